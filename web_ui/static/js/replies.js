// Replies: writing one (`say {reply_to}`), and the quote a reply shows of the line it answers.
//
// Theory of operation
// -------------------
// A message with `reply_to` carries a `quote` of the line it answers, looked up in
// the same room only: the room's loaded messages first, then `state.originals`
// (lines fetched on purpose). When the original is not loaded, the page asks for it
// alone (`history {room, around: msg_id, limit: 1}`); while that is on its way the
// quote says so, and if the server does not have it (the original is late and has
// not reached this site yet) the quote says that. Whenever a message arrives, live
// or in a page, the quotes of the replies to it in its room are redrawn from it, so
// a reply whose original comes later, even much later, ends up quoting it.
//
// Quote states: "loaded" ({user, origin, text, late, precedence}), "loading", "missing".

import { currentRoom, findEntry, mapWith, notice, replaceEntry, request } from "./draft.js";
import { precedenceOf } from "./precedence.js";

export function quoteOf(f, late = !!f.late) {
  return { state: "loaded", msgId: f.msg_id, user: String(f.user), origin: String(f.origin), text: String(f.text),
           late, precedence: precedenceOf(f) };
}

/** The quote of `msgId` as this room can show it now. */
export function quoteFor(s, room, msgId) {
  const e = findEntry(room, `m:${msgId}`);
  if (e && e.kind === "message") return quoteOf(e.frame, e.late);
  const o = s.originals.get(`${room.name}\n${msgId}`);
  if (o && o.state === "loaded") return quoteOf(o.frame);
  return { state: o ? o.state : "loading", msgId };
}

/** Ask for the original of a reply once, unless it is loaded or asked for already. */
export function fetchOriginal(s, roomName, msgId) {
  const k = `${roomName}\n${msgId}`;
  if (s.originals.has(k)) return;
  s.originals = mapWith(s.originals, k, { state: "loading" });
  request(s, { type: "history", room: roomName, around: msgId, limit: 1 }, { what: "original", room: roomName, msgId },
          { type: "original-page", room: roomName, msgId });
}

/** Redraw the quotes of the replies to `msgId` in the room. */
export function refreshQuotes(s, roomName, msgId) {
  const r = s.rooms.get(roomName);
  if (!r) return;
  for (const e of r.entries) {
    if (e.kind === "message" && e.replyTo === msgId) replaceEntry(s, roomName, { ...e, quote: quoteFor(s, s.rooms.get(roomName), msgId) });
  }
}

/** The reply to `history {around, limit: 1}`: the original, or not at this site. */
export function onOriginalPage(s, e) {
  const found = (e.frame.messages || []).find((m) => m && m.msg_id === e.msgId);
  s.originals = mapWith(s.originals, `${e.room}\n${e.msgId}`, found ? { state: "loaded", frame: found } : { state: "missing" });
  refreshQuotes(s, e.room, e.msgId);
}

export function originalFailed(s, e) {
  s.originals = mapWith(s.originals, `${e.room}\n${e.msgId}`, { state: "missing" });
  refreshQuotes(s, e.room, e.msgId);
}

// --- writing a reply -------------------------------------------------------------------------

/** Reply to a message of the room shown (the Reply button). */
export function startReply(s, e) {
  const r = s.rooms.get(e.room);
  const m = findEntry(r, `m:${e.msgId}`);
  if (!m || !r.joined) return;
  s.replyTo = { room: r.name, msgId: m.id, user: m.frame.user, origin: m.frame.origin, text: m.frame.text };
}

/** The newest message of someone else in the room shown (what `/reply` answers when nothing is chosen). */
export function lastFromOthers(s) {
  const r = currentRoom(s);
  if (!r) return null;
  for (let i = r.entries.length - 1; i >= 0; i--) {
    const e = r.entries[i];
    if (e.kind === "message" && !e.mine) return e;
  }
  return null;
}

/** `/reply [TEXT]`: choose the line to answer (the one chosen, else the newest of someone else); with TEXT, send. */
export function replyCommand(s, text, send) {
  const r = currentRoom(s);
  if (!r || !r.joined) return notice(s, "Join a room first: /join ROOM", "error");
  let target = s.replyTo && s.replyTo.room === r.name ? s.replyTo : null;
  if (!target) {
    const m = lastFromOthers(s);
    if (!m) return notice(s, "Nothing to reply to in this room yet.", "error");
    target = { room: r.name, msgId: m.id, user: m.frame.user, origin: m.frame.origin, text: m.frame.text };
  }
  s.replyTo = target;
  if (text) send(text);
  return undefined;
}
