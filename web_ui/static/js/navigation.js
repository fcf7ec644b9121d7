// Going to a message: a search result, or the line a reply answers, shown in its room, in context.
//
// `jump {room, msgId}` shows the room (a public room one has not joined is shown as a
// preview, read-only, with a Join button) and, when the message is loaded, asks the
// view to scroll to it and mark it (`state.jump`, with a fresh `seq` each time). When
// it is not loaded, the page around it is fetched (`history {around}`) and merged
// (pages.js marks the gaps); the jump completes when it comes. A gap entry's button
// fetches the messages missing there, a page at a time (`fill-gap`).

import { findEntry, getRoom, notice, putRoom, replaceEntry, request } from "./draft.js";
import { addPage } from "./messages.js";
import { hasMessage } from "./pages.js";

const PAGE = 50;           // messages per page fetched around a message or into a gap

function show(s, roomName) {
  if (!s.rooms.has(roomName)) putRoom(s, getRoom(s, roomName));
  if (s.current !== roomName) s.replyTo = null;
  s.current = roomName;
  s.navOpen = false;
}

export function jump(s, e) {
  if (typeof e.room !== "string" || typeof e.msgId !== "string") return;
  show(s, e.room);
  s.seq += 1;
  if (hasMessage(s.rooms.get(e.room), e.msgId)) {
    s.jump = { room: e.room, msgId: e.msgId, seq: s.seq };
    s.following = false;
    return;
  }
  s.jump = { room: e.room, msgId: e.msgId, seq: s.seq, loading: true };
  request(s, { type: "history", room: e.room, around: e.msgId, limit: PAGE },
          { what: "around", room: e.room, msgId: e.msgId }, { type: "around-page", room: e.room, msgId: e.msgId });
}

/** The page around a message we are going to. */
export function onAroundPage(s, e) {
  const f = e.frame;
  addPage(s, e.room, f.messages || [], { moreBefore: !!f.more_before, moreAfter: !!f.more_after });
  if (!s.jump || s.jump.msgId !== e.msgId) return;             // the user went elsewhere meanwhile
  s.seq += 1;
  if (hasMessage(s.rooms.get(e.room), e.msgId)) {
    s.jump = { room: e.room, msgId: e.msgId, seq: s.seq };
    s.following = false;
  } else {
    s.jump = null;
    notice(s, `Message ${e.msgId} is not in ${e.room} at this site.`, "error");
  }
}

export function aroundFailed(s, e) {
  if (s.jump && s.jump.msgId === e.msgId) s.jump = null;
  notice(s, `Cannot show that message: ${e.message}`, "error");
}

/** Fetch the messages missing before the gap entry's message. */
export function fillGap(s, e) {
  const r = s.rooms.get(e.room);
  const gap = findEntry(r, `g:${e.beforeId}`);
  if (!gap || gap.loading) return;
  replaceEntry(s, e.room, { ...gap, loading: true });
  request(s, { type: "history", room: e.room, before: e.beforeId, limit: PAGE },
          { what: "gap", room: e.room, beforeId: e.beforeId }, { type: "gap-page", room: e.room, beforeId: e.beforeId });
}

export function onGapPage(s, e) {
  const f = e.frame;
  addPage(s, e.room, f.messages || [], { moreBefore: !!f.more, contiguousWith: e.beforeId });
}

export function gapFailed(s, e) {
  const gap = findEntry(s.rooms.get(e.room), `g:${e.beforeId}`);
  if (gap) replaceEntry(s, e.room, { ...gap, loading: false });
  notice(s, `Cannot load those messages: ${e.message}`, "error");
}

/** The joined page of a room: merged like any page (a preview's pages stay, with a gap if needed). */
export function onJoinedPage(s, f) {
  addPage(s, f.room, f.history || [], { moreBefore: !!f.more, moreAfter: false });
}
