// Rooms and their logs, for the reducer (state.js): the server's frames applied to the
// reducer's draft state, and the helpers it changes rooms and entries with.
//
// Every function here takes the draft `s` of one reducer step (a shallow copy of the
// state) and replaces the collections it changes (copy on write) instead of changing
// them, so the state the step started from stays as it was. A room's entries are
// sorted by order key (order.js): delivered messages and notices first, in the global
// order (a late message at its place, a page of older history wherever it belongs), the
// user's own messages still on their way ("pending") after them.

import { insertIndex } from "./order.js";

export function newRoom(name) {
  return { name, joined: false, private: false, members: null, entries: [], unread: 0, more: false,
           loading: false, wanted: false };
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

// --- the draft ------------------------------------------------------------------------------

export function effect(s, type, fields = {}) {
  s.effects = [...s.effects, { type, ...fields }];
}

export function announce(s, text) {
  effect(s, "announce", { text });
}

export function request(s, frame, failed) {
  effect(s, "request", { frame, failed });
}

// --- rooms and entries (copy on write) -------------------------------------------------------

function mapWith(m, k, v) {
  const n = new Map(m);
  n.set(k, v);
  return n;
}

function mapWithout(m, k) {
  const n = new Map(m);
  n.delete(k);
  return n;
}

function getRoom(s, name) {
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

function removeEntry(room, key) {
  return { ...room, entries: room.entries.filter((e) => e.key !== key) };
}

export function replaceEntry(s, roomName, entry) {
  const r = s.rooms.get(roomName);
  if (r) putRoom(s, { ...r, entries: r.entries.map((e) => (e.key === entry.key ? entry : e)) });
}

function pendingCount(room) {
  return room.entries.filter((e) => e.kind === "pending").length;
}

function lastOrder(room) {
  for (let i = room.entries.length - 1; i >= 0; i--) if (room.entries[i].group === 0) return room.entries[i].order;
  return [];
}

function receiptsOf(s, msgId) {
  return [...(s.receipts.get(msgId) || [])].sort();
}

/** Add a delivered message (live or from history) unless its room shows it already. */
function addMessage(s, f, live) {
  if (typeof f.room !== "string" || typeof f.msg_id !== "string") return;
  let r = getRoom(s, f.room);
  const key = `m:${f.msg_id}`;
  if (findEntry(r, key)) return;
  if (Array.isArray(f.receipts)) {
    s.receipts = mapWith(s.receipts, f.msg_id, new Set([...(s.receipts.get(f.msg_id) || []), ...f.receipts]));
  }
  const mine = f.user === s.user && f.origin === s.site;
  // Our own message, acknowledged earlier: it replaces its pending line.
  const cid = s.acked.get(f.msg_id);
  if (cid !== undefined) {
    if (cid !== null) r = removeEntry(r, `p:${cid}`);
    s.acked = mapWithout(s.acked, f.msg_id);
  } else if (mine) {
    s.acked = mapWith(s.acked, f.msg_id, null);     // delivered before its ack: the ack removes the pending line
  }
  const shown = live && s.current === r.name;
  const entry = { kind: "message", key, group: 0, sub: 0, seq: 0, id: f.msg_id, order: f.order, frame: f, mine,
                  receipts: receiptsOf(s, f.msg_id), skipped: s.skipped.get(f.msg_id) || [], placed: shown && !!f.late };
  let i;
  [r, i] = insertEntry(r, entry);
  if (live && (s.current !== r.name || s.hidden) && !mine) r = { ...r, unread: r.unread + 1 };
  putRoom(s, r);
  if (shown && f.late) {
    const placedEarlier = i < r.entries.length - 1 - pendingCount(r);
    announce(s, `Late message from ${f.user}@${f.origin} in ${r.name}, placed at its position` +
                (placedEarlier ? " earlier in the conversation" : ""));
  }
}

function addNotice(s, roomName, text, cls = "") {
  s.seq += 1;
  const r = getRoom(s, roomName);
  const [next] = insertEntry(r, { kind: "notice", key: `n:${s.seq}`, group: 0, sub: 1, order: lastOrder(r), seq: s.seq,
                                  text, cls });
  putRoom(s, next);
}

/** A notice in the room shown (or the first joined room), else in the banner. */
export function notice(s, text, cls = "") {
  const name = s.current || (joinedRooms(s)[0] || {}).name;
  if (name) addNotice(s, name, text, cls);
  else s.banner = { text, kind: "info" };
}

export function selectRoom(s, name) {
  s.current = name;
  if (name) editRoom(s, name, { unread: 0 });
}

// --- frames ------------------------------------------------------------------------------

/** Apply one server frame to the draft. */
export function applyFrame(s, f) {
  const handler = FRAMES[f.type];
  if (handler) handler(s, f);
}

const FRAMES = {
  welcome: onWelcome,
  joined: onJoined,
  left: onLeft,
  message: (s, f) => addMessage(s, f, true),
  history: onHistory,
  ack: onAck,
  receipt: onReceipt,
  site_status: (s, f) => {
    s.sites = mapWith(s.sites, f.site, f.status);
    announce(s, `Site ${f.site} is ${f.status}`);
  },
  presence: (s, f) => {
    const set = new Set(s.presence.get(f.site) || []);
    for (const u of f.online || []) set.add(u);
    for (const u of f.offline || []) set.delete(u);
    s.presence = mapWith(s.presence, f.site, set);
  },
  missing: onMissing,
  rooms: onRoomsList,
  created: (s, f) => notice(s, `Private room ${f.room} created for ${(f.members || []).join(", ")}`),
  error: (s, f) => { if (f.in_reply_to === undefined) notice(s, `Error from the server: ${f.message}`, "error"); },
};

function onWelcome(s, f) {
  const fresh = s.user !== f.user || s.site !== f.site;
  s.user = f.user;
  s.site = f.site;
  s.sites = new Map(Object.entries(f.sites || {}));
  s.presence = new Map(Object.entries(f.presence || {}).map(([site, users]) => [site, new Set(users)]));
  const rooms = new Set(f.rooms || []);
  const kept = new Map(s.rooms);
  for (const r of kept.values()) if (r.joined && !rooms.has(r.name)) kept.set(r.name, { ...r, joined: false });
  s.rooms = kept;
  for (const name of rooms) {
    const r = putRoom(s, getRoom(s, name));
    if (!r.joined || fresh) request(s, { type: "join", room: name }, { what: "join", room: name });
  }
  s.screen = "chat";
}

function onJoined(s, f) {
  const wasJoined = getRoom(s, f.room).joined;
  editRoom(s, f.room, { joined: true, private: !!f.private, members: f.members || null, more: !!f.more });
  for (const m of f.history || []) addMessage(s, m, false);
  const cur = currentRoom(s);
  if (!cur || !cur.joined || (!wasJoined && s.rooms.get(f.room).wanted)) {
    editRoom(s, f.room, { wanted: false });
    selectRoom(s, f.room);
  }
}

function onLeft(s, f) {
  editRoom(s, f.room, { joined: false, unread: 0 });
  if (f.reason) s.banner = { text: `You left ${f.room}: ${f.reason}`, kind: "info" };
  if (s.current === f.room) {
    const next = joinedRooms(s)[0];
    selectRoom(s, next ? next.name : null);
  }
}

function onHistory(s, f) {
  editRoom(s, f.room, { loading: false, more: !!f.more });
  const messages = f.messages || [];
  for (const m of messages) addMessage(s, m, false);
  if (s.current === f.room && !messages.length) announce(s, "No older messages");
}

function onAck(s, f) {
  if (Array.isArray(f.skipped) && f.skipped.length) s.skipped = mapWith(s.skipped, f.msg_id, f.skipped);
  const key = `p:${f.client_id}`;
  for (const r of [...s.rooms.values()]) {
    const p = findEntry(r, key);
    if (!p) continue;
    if (s.acked.has(f.msg_id)) {                    // already delivered and shown: drop the pending line
      s.acked = mapWithout(s.acked, f.msg_id);
      putRoom(s, removeEntry(r, key));
      const shown = findEntry(s.rooms.get(r.name), `m:${f.msg_id}`);
      if (shown) replaceEntry(s, r.name, { ...shown, skipped: s.skipped.get(f.msg_id) || [] });
    } else {
      s.acked = mapWith(s.acked, f.msg_id, f.client_id);
      replaceEntry(s, r.name, { ...p, state: "accepted", msgId: f.msg_id });
    }
  }
}

function onReceipt(s, f) {
  s.receipts = mapWith(s.receipts, f.msg_id, new Set([...(s.receipts.get(f.msg_id) || []), f.site]));
  const key = `m:${f.msg_id}`;
  for (const r of [...s.rooms.values()]) {
    const e = findEntry(r, key);
    if (e) replaceEntry(s, r.name, { ...e, receipts: receiptsOf(s, f.msg_id) });
  }
}

function onMissing(s, f) {
  const one = f.count === 1;
  const text = `${f.count} message${one ? "" : "s"} from site ${f.origin} ${one ? "was" : "were"} lost while ` +
               `${f.origin} was disconnected; ${one ? "it" : "they"} will not arrive.`;
  const rooms = joinedRooms(s);
  for (const r of rooms) addNotice(s, r.name, text, "missing");
  if (!rooms.length) s.banner = { text, kind: "info" };
  announce(s, text);
}

export const MAX_LISTED_ROOMS = 10000;   // the server's max_rooms default: a listing stops there whatever `more` says

/** A page of the room listing: while the server says there is `more`, ask for the next page (after the last
 *  room of this one); show the whole listing once the last page is in. */
function onRoomsList(s, f) {
  const page = Array.isArray(f.rooms) ? f.rooms.filter((r) => r && typeof r.room === "string") : [];
  const sofar = [...(s.listing || []), ...page];
  const last = page.length ? page[page.length - 1].room : null;
  if (f.more && last !== null && sofar.length < MAX_LISTED_ROOMS) {
    s.listing = sofar;
    request(s, { type: "rooms", after: last }, { what: "rooms" });
    return;
  }
  s.listing = null;
  showListing(s, sofar, f.more ? `more rooms not listed (over ${MAX_LISTED_ROOMS})` : "");
}

export function showListing(s, rooms, note = "") {
  if (!rooms.length && !note) return notice(s, "No rooms yet: /join ROOM creates one.");
  const lines = rooms.map((r) => `${r.room}${r.private ? " (private)" : ""}: ${r.members} member${r.members === 1 ? "" : "s"}, ` +
                                 `${r.online} online${r.joined ? ", joined" : ""}`);
  return notice(s, [`Rooms (${rooms.length}):`, ...lines, ...(note ? [`(${note})`] : [])].join("\n"), "listing");
}
