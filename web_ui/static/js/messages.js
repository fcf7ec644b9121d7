// Message entries: built from `message` frames (live, or in a page of history) and put in their room.
//
// An entry carries everything its line shows, so an entry object that did not change
// draws the same: `mine`, `late` (never on the user's own line), `lateBy` (seconds from
// sending to arrival here, for a late line that came live), `outOfTime` (seconds its time
// reads earlier than the line above it: docs/chat-protocol.md "Order against time"),
// `receipts`, `skipped`, `placed` (a live late message), `mentionsMe`, `precedence` (with
// `acks`, `alert`, `acking` for flash and immediate), `replyTo` and its `quote`, `expiresAt` and
// `expired` (expiry.js). A live message goes in at its place by order key; a page
// goes through pages.js, which marks gaps between stretches that are not contiguous.
// After either, the hooks of the features run: alerts (precedence.js), quotes of the
// replies to a message that just came (replies.js), unread counts and read markers
// (reading.js).

import { announce, getRoom, findEntry, insertEntry, isMine, mapWith, mapWithout, putRoom, removeEntry } from "./draft.js";
import { mergePage } from "./pages.js";
import { expiryFields, trackExpiry } from "./expiry.js";
import { onMessageAdded, precedenceFields } from "./precedence.js";
import { mentionsMe, onLiveMessage } from "./reading.js";
import { fetchOriginal, quoteFor, refreshQuotes } from "./replies.js";
import { labelOf } from "./labels.js";
import { lateness, outOfTime } from "./words.js";

function receiptsOf(s, msgId) {
  return [...(s.receipts.get(msgId) || [])].sort();
}

function validMessage(f) {
  return f && typeof f.room === "string" && typeof f.msg_id === "string";
}

/** Our own message, acknowledged earlier or not yet: it replaces its pending line. */
function claimPending(s, r, f) {
  const cid = s.acked.get(f.msg_id);
  if (cid !== undefined) {
    if (cid !== null) r = removeEntry(r, `p:${cid}`);
    s.acked = mapWithout(s.acked, f.msg_id);
  } else if (isMine(s, f)) {
    s.acked = mapWith(s.acked, f.msg_id, null);     // delivered before its ack: the ack removes the pending line
  }
  return r;
}

function buildEntry(s, r, f, placed, now) {
  if (Array.isArray(f.receipts)) {
    s.receipts = mapWith(s.receipts, f.msg_id, new Set([...(s.receipts.get(f.msg_id) || []), ...f.receipts]));
  }
  const mine = isMine(s, f);
  const late = !!f.late && !mine;            // a sender never sees their own line marked late, whatever a frame says
  const entry = { kind: "message", key: `m:${f.msg_id}`, group: 0, sub: 0, seq: 0, id: f.msg_id, order: f.order, frame: f,
                  mine, late, lateBy: late ? lateness(f, now) : null, outOfTime: 0,
                  receipts: receiptsOf(s, f.msg_id), skipped: s.skipped.get(f.msg_id) || [], placed,
                  mentionsMe: mentionsMe(s, f), ...precedenceFields(s, f, mine), ...expiryFields(f, now),
                  label: labelOf(s.labels, f.label) };
  if (typeof f.reply_to === "string" && f.reply_to) {
    entry.replyTo = f.reply_to;
    entry.quote = quoteFor(s, r, f.reply_to);
  }
  return entry;
}

/** The sites an own message was not sent to (disconnected, the `ack` said) that have not delivered it since. */
export function notSentTo(e) {
  return (e.skipped || []).filter((site) => !(e.receipts || []).includes(site));
}

/** After entries were added to a room: alerts, expiries, quotes of and for them. */
function afterAdded(s, roomName, added, live) {
  for (const e of added) {
    trackExpiry(s, roomName, e);
    onMessageAdded(s, s.rooms.get(roomName), e, live);
    refreshQuotes(s, roomName, e.id);
  }
  for (const e of added) {
    const now = s.rooms.get(roomName);
    const current = findEntry(now, e.key);
    if (current && current.replyTo && current.quote.state !== "loaded") {
      const q = quoteFor(s, now, current.replyTo);
      if (q.state === "loading") fetchOriginal(s, roomName, current.replyTo);
    }
  }
}

/** The room with every delivered line's `outOfTime` as the line above it now makes it (an entry that changes is
 *  replaced, so the view redraws it; one that does not stays the same object). */
export function withTimeMarks(room) {
  let above = null;
  let entries = null;
  room.entries.forEach((e, i) => {
    if (e.kind !== "message") return;
    const n = outOfTime(e.frame.sent_at, above ? above.frame.sent_at : null);
    above = e;
    if (n === e.outOfTime) return;
    entries = entries || room.entries.slice();
    entries[i] = { ...e, outOfTime: n };
  });
  return entries ? { ...room, entries } : room;
}

/** A live message (or one replayed after a resume): at its place, counted, announced when late. `now`: when it
 *  arrived (Unix seconds), for its lateness figure. */
export function addLiveMessage(s, f, now) {
  if (!validMessage(f)) return;
  let r = getRoom(s, f.room);
  if (findEntry(r, `m:${f.msg_id}`)) return;
  r = claimPending(s, r, f);
  const shown = s.current === r.name;
  const entry = buildEntry(s, r, f, shown && !!f.late && !isMine(s, f), now);
  let i;
  [r, i] = insertEntry(r, entry);
  putRoom(s, withTimeMarks(r));
  afterAdded(s, r.name, [entry], true);
  onLiveMessage(s, r.name, entry);
  if (shown && entry.late) {
    const pending = r.entries.filter((e) => e.kind === "pending").length;
    const placedEarlier = i < r.entries.length - 1 - pending;
    announce(s, `Late message from ${f.user}@${f.origin} in ${r.name}, placed at its position` +
                (placedEarlier ? " earlier in the conversation" : ""));
  }
}

/**
 * A page of history (joined, history before/around, a gap filled): merged by pages.js, nothing counted.
 * `opts`: {moreBefore, moreAfter, contiguousWith} (see pages.js).
 */
export function addPage(s, roomName, frames, opts) {
  let r = getRoom(s, roomName);
  const page = [];
  const added = [];
  for (const f of frames) {
    if (!validMessage(f) || f.room !== roomName || page.some((e) => e.id === f.msg_id)) continue;
    const known = findEntry(r, `m:${f.msg_id}`);
    if (known) { page.push(known); continue; }
    r = claimPending(s, r, f);
    const e = buildEntry(s, r, f, false);
    page.push(e);
    added.push(e);
  }
  putRoom(s, withTimeMarks(mergePage(r, page, opts)));
  afterAdded(s, roomName, added, false);
}
