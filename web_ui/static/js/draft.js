// The reducer's draft: helpers every part of the reducer changes the state with.
//
// Each function takes the draft `s` of one reducer step (a shallow copy of the state)
// and replaces the collections it changes (copy on write) instead of changing them,
// so the state the step started from stays as it was and the view can tell what
// changed by comparing references.

import { insertIndex } from "./order.js";

export function newRoom(name) {
  return { name, joined: false, private: false, members: null, entries: [], unread: 0, mentions: 0, more: false,
           loading: false, wanted: false, read: null, dirty: false, label: null };   // label: the floor (classification.js)
}

// --- queries (also used by the view) -------------------------------------------------------

export function isOnline(state) {
  return state.conn.kind === "online";
}

export function joinedRooms(state) {
  return [...state.rooms.values()].filter((r) => r.joined).sort((a, b) => (a.name < b.name ? -1 : 1));
}

export function currentRoom(state) {
  return state.current ? state.rooms.get(state.current) || null : null;
}

/** Is this message ours (this user at this site)? */
export function isMine(state, f) {
  return f.user === state.user && f.origin === state.site;
}

// --- effects ---------------------------------------------------------------------------------

export function effect(s, type, fields = {}) {
  s.effects = [...s.effects, { type, ...fields }];
}

export function announce(s, text) {
  effect(s, "announce", { text });
}

/** Send a frame; `failed` is dispatched (as a request-failed event) if it is refused. With `reply`, the reply is
 *  dispatched as the event `{...reply, frame}` instead of going through the frame handlers. */
export function request(s, frame, failed, reply) {
  effect(s, "request", reply ? { frame, failed, reply } : { frame, failed });
}

// --- collections (copy on write) -----------------------------------------------------------

export function mapWith(m, k, v) {
  const n = new Map(m);
  n.set(k, v);
  return n;
}

export function mapWithout(m, k) {
  const n = new Map(m);
  n.delete(k);
  return n;
}

export function getRoom(s, name) {
  return s.rooms.get(name) || newRoom(name);
}

export function putRoom(s, room) {
  s.rooms = mapWith(s.rooms, room.name, room);
  return room;
}

export function editRoom(s, name, patch) {
  return putRoom(s, { ...getRoom(s, name), ...patch });
}

export function findEntry(room, key) {
  return room ? room.entries.find((e) => e.key === key) : undefined;
}

export function insertEntry(room, entry) {
  const i = insertIndex(room.entries, entry);
  const entries = room.entries.slice();
  entries.splice(i, 0, entry);
  return [{ ...room, entries }, i];
}

export function removeEntry(room, key) {
  return { ...room, entries: room.entries.filter((e) => e.key !== key) };
}

export function replaceEntry(s, roomName, entry) {
  const r = s.rooms.get(roomName);
  if (r) putRoom(s, { ...r, entries: r.entries.map((e) => (e.key === entry.key ? entry : e)) });
}

/** Replace, in every room, the message entry of `msgId` by `change(entry)`. */
export function updateMessage(s, msgId, change) {
  const key = `m:${msgId}`;
  for (const r of [...s.rooms.values()]) {
    const e = findEntry(r, key);
    if (e) replaceEntry(s, r.name, change(e));
  }
}

/** The room's newest delivered message entry, or null. */
export function newestMessage(room) {
  for (let i = room.entries.length - 1; i >= 0; i--) if (room.entries[i].kind === "message") return room.entries[i];
  return null;
}

function lastOrder(room) {
  for (let i = room.entries.length - 1; i >= 0; i--) if (room.entries[i].group === 0) return room.entries[i].order;
  return [];
}

/** A notice at the bottom of a room (`key`: its own, to find and replace it later; default: a fresh one). */
export function addNotice(s, roomName, text, cls = "", key = null) {
  s.seq += 1;
  const r = getRoom(s, roomName);
  const [next] = insertEntry(r, { kind: "notice", key: key || `n:${s.seq}`, group: 0, sub: 1, order: lastOrder(r), seq: s.seq,
                                  text, cls });
  putRoom(s, next);
}

/** A notice in the room shown (or the first joined room), else in the banner. */
export function notice(s, text, cls = "") {
  const name = s.current || (joinedRooms(s)[0] || {}).name;
  if (name) addNotice(s, name, text, cls);
  else s.banner = { text, kind: "info" };
}
