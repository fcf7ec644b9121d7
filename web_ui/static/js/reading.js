// What the user has read: unread and mention counts, read markers, mention notifications.
//
// Theory of operation
// -------------------
// At sign-in, `welcome` carries the server's counts per room (`unread`, `mentions`:
// messages of others after the user's read marker, and those naming the user). After
// that the page counts itself: a live message of someone else in a room the user is
// not reading adds one (and one mention if `message.mentions` names the user).
//
// The user is reading a room when it is the room shown, the page is visible, and the
// message list is scrolled to the bottom (`following`, reported by the page). Then the
// room's counts drop to zero and a `mark-read` effect carries the order key of its
// newest message; the effects layer sends `mark_read` (coalesced: at most one per
// room in flight every quarter second). The server keeps the marker, answers `read`
// and sends the same `read` to the user's other sessions (another tab, the terminal
// client): there, the counts drop to what is still after the marker, so reading in
// one place clears the badge everywhere. A late message (placed before the marker,
// delivered after it) makes the room dirty even if the newest order did not change,
// so the marker is sent again and the server counts it as seen.
//
// A live message that names the user, when the user is not reading its room, raises
// a notification (the `notify` effect; the page shows it only if the browser allows).

import { announce, currentRoom, editRoom, effect, getRoom, isMine, newestMessage, putRoom } from "./draft.js";
import { compareOrder } from "./order.js";

/** Counts from a fresh sign-in's welcome (a resumed session counts the replayed messages itself). */
export function applyWelcomeCounts(s, f) {
  const unread = f.unread && typeof f.unread === "object" ? f.unread : {};
  const mentions = f.mentions && typeof f.mentions === "object" ? f.mentions : {};
  for (const name of f.rooms || []) {
    const u = Number.isInteger(unread[name]) ? unread[name] : 0;
    const m = Number.isInteger(mentions[name]) ? mentions[name] : 0;
    editRoom(s, name, { unread: u, mentions: m, dirty: u > 0 || m > 0 });
  }
}

/** Is the user reading this room now? */
export function reading(s, roomName) {
  const r = s.rooms.get(roomName);
  return !!r && r.joined && s.screen === "chat" && s.current === roomName && !s.hidden && s.following;
}

/** A live message was added to `roomName`: count it, notify, or mark the room read. */
export function onLiveMessage(s, roomName, entry) {
  const r = getRoom(s, roomName);
  if (reading(s, roomName)) {
    putRoom(s, { ...r, dirty: true });
  } else if (!entry.mine) {
    putRoom(s, { ...r, unread: r.unread + 1, mentions: r.mentions + (entry.mentionsMe ? 1 : 0) });
    if (entry.mentionsMe) {
      const f = entry.frame;
      effect(s, "notify", { title: `${f.user}@${f.origin} mentioned you in ${roomName}`, body: f.text, tag: f.msg_id,
                            room: roomName, msgId: f.msg_id });
      announce(s, `${f.user}@${f.origin} mentioned you in ${roomName}`);
    }
  }
  markReadIfReading(s);
}

/** If the user is reading the room shown and it has something unseen, mark it read up to its newest message. */
export function markReadIfReading(s) {
  const r = currentRoom(s);
  if (!r || !reading(s, r.name)) return;
  if (!(r.unread || r.mentions || r.dirty)) return;
  const newest = newestMessage(r);
  putRoom(s, { ...r, unread: 0, mentions: 0, dirty: false });
  if (newest) effect(s, "mark-read", { room: r.name, order: newest.order });
}

/** A `read` frame: the marker moved (here or in another session of the user). */
export function onRead(s, f) {
  if (typeof f.room !== "string" || !Array.isArray(f.order)) return;
  const r = s.rooms.get(f.room);
  if (!r) return;
  const read = r.read && compareOrder(r.read, f.order) > 0 ? r.read : f.order;
  const messages = r.entries.filter((e) => e.kind === "message");
  const covered = !r.more || (messages.length && compareOrder(messages[0].order, read) <= 0);
  let { unread, mentions } = r;
  if (covered) {
    const after = messages.filter((e) => !e.mine && compareOrder(e.order, read) > 0);
    unread = Math.min(unread, after.length);
    mentions = Math.min(mentions, after.filter((e) => e.mentionsMe).length);
  }
  putRoom(s, { ...r, read, unread, mentions });
}

/** The page says whether the message list is scrolled to the bottom. */
export function onViewport(s, e) {
  s.following = !!e.atBottom;
  markReadIfReading(s);
}

/** Does the message name this user (the server's list for this site)? */
export function mentionsMe(s, f) {
  return Array.isArray(f.mentions) && f.mentions.includes(s.user) && !isMine(s, f);
}
