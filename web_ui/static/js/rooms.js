// The server's frames, applied to the reducer's draft state (state.js).
//
// Every function here takes the draft `s` of one reducer step and replaces the
// collections it changes (draft.js), so the state the step started from stays as it
// was. A room's entries are sorted by order key (order.js): delivered messages and
// notices first, in the global order (a late message at its place, a page of older
// history wherever it belongs, gaps where a stretch is missing), the user's own
// messages still on their way ("pending") after them. Messages themselves are built
// in messages.js; the operators' features (directory and search, read markers and
// mentions, replies, precedence alerts) have a module each and are wired in here.

import { onCreated, onWelcomeLabels, roomLabelFrom } from "./classification.js";
import { announce, currentRoom, editRoom, findEntry, getRoom, joinedRooms, mapWith, mapWithout, notice,
         putRoom, removeEntry, replaceEntry, request, updateMessage } from "./draft.js";
import { directoryJoined, fetchDirectory, onDirectoryUpdate } from "./finding.js";
import { labelOf, labelText } from "./labels.js";
import { onMissing, reconcileLosses } from "./losses.js";
import { addLiveMessage, addPage } from "./messages.js";
import { onJoinedPage } from "./navigation.js";
import { askPositions, onPosition, onPositionsSnapshot } from "./positions.js";
import { onAcknowledged, onAcknowledging } from "./precedence.js";
import { applyWelcomeCounts, markReadIfReading, onRead } from "./reading.js";
import { statusOf } from "./status.js";
import { plural } from "./words.js";

export { announce, currentRoom, editRoom, effect, findEntry, insertEntry, isOnline, joinedRooms, newRoom, notice,
         putRoom, replaceEntry, request } from "./draft.js";

export function selectRoom(s, name) {
  if (s.current !== name) { s.replyTo = null; s.jump = null; s.sendLabel = null; }   // the composer: the floor again
  s.current = name;
  s.following = true;                 // the view shows a room from its bottom
  markReadIfReading(s);
}

// --- frames ------------------------------------------------------------------------------

/** Apply one server frame to the draft (`now`: when it came, Unix seconds). */
export function applyFrame(s, f, now) {
  const handler = FRAMES[f.type];
  if (handler) handler(s, f, now);
}

const FRAMES = {
  welcome: onWelcome,
  joined: onJoined,
  left: onLeft,
  message: addLiveMessage,
  history: onHistory,
  ack: onAck,
  receipt: onReceipt,
  site_status: (s, f) => {
    const status = statusOf(f.status);
    s.sites = mapWith(s.sites, f.site, status);
    s.via = typeof f.via === "string" ? mapWith(s.via, f.site, f.via) : mapWithout(s.via, f.site);
    const down = f.chat_down === true;
    let chat = "";
    if (down !== s.chatDown.has(f.site)) {        // its chat server went, or came back: said once
      s.chatDown = new Set(s.chatDown);
      if (down) s.chatDown.add(f.site); else s.chatDown.delete(f.site);
      chat = down ? "; its chat server is down" : "; its chat server is back";
    }
    announce(s, `Site ${f.site} is ${status}${typeof f.via === "string" ? ` via ${f.via}` : ""}${chat}`);
  },
  presence: (s, f) => {
    const set = new Set(s.presence.get(f.site) || []);
    for (const u of f.online || []) set.add(u);
    for (const u of f.offline || []) set.delete(u);
    s.presence = mapWith(s.presence, f.site, set);
  },
  missing: onMissing,
  directory_update: onDirectoryUpdate,
  rooms: onRoomsList,
  read: onRead,
  acknowledging: onAcknowledging,
  acknowledged: onAcknowledged,
  position: onPosition,
  positions: onPositionsSnapshot,
  created: onCreated,
  error: (s, f) => { if (f.in_reply_to === undefined) notice(s, `Error from the server: ${f.message}`, "error"); },
};

function onWelcome(s, f) {
  const fresh = s.user !== f.user || s.site !== f.site;
  s.user = f.user;
  s.site = f.site;
  onWelcomeLabels(s, f);
  s.sites = new Map(Object.entries(f.sites || {}).map(([site, status]) => [site, statusOf(status)]));
  s.via = new Map(Object.entries(f.via || {}).filter(([, hop]) => typeof hop === "string"));
  s.chatDown = new Set((Array.isArray(f.chat_down) ? f.chat_down : []).filter((x) => typeof x === "string"));
  s.presence = new Map(Object.entries(f.presence || {}).map(([site, users]) => [site, new Set(users)]));
  const rooms = new Set(f.rooms || []);
  const kept = new Map(s.rooms);
  for (const r of kept.values()) if (r.joined && !rooms.has(r.name)) kept.set(r.name, { ...r, joined: false });
  s.rooms = kept;
  for (const name of rooms) {
    const r = putRoom(s, getRoom(s, name));
    if (!r.joined || fresh) request(s, { type: "join", room: name }, { what: "join", room: name });
  }
  if (fresh) applyWelcomeCounts(s, f);      // a resume counts the replayed messages itself
  else reconcileLosses(s, f.missing);       // and learns what repair brought back while it was away
  fetchDirectory(s);
  askPositions(s);                          // at a resume too: the server's set may have changed meanwhile
  s.screen = "chat";
}

function onJoined(s, f) {
  const before = getRoom(s, f.room);
  editRoom(s, f.room, { joined: true, private: !!f.private, members: f.members || null });
  roomLabelFrom(s, f.room, f);
  if (Array.isArray(f.read) && !before.read) editRoom(s, f.room, { read: f.read });
  onJoinedPage(s, f);
  directoryJoined(s, f.room, true, !!f.private);
  const cur = currentRoom(s);
  if (!cur || !cur.joined || (!before.joined && s.rooms.get(f.room).wanted)) {
    editRoom(s, f.room, { wanted: false });
    selectRoom(s, f.room);
  }
}

function onLeft(s, f) {
  editRoom(s, f.room, { joined: false, unread: 0, mentions: 0 });
  directoryJoined(s, f.room, false);
  for (const a of [...s.alerts.values()]) if (a.room === f.room) s.alerts = mapWithout(s.alerts, a.msgId);
  if (f.reason) s.banner = { text: `You left ${f.room}: ${f.reason}`, kind: "info" };
  if (s.current === f.room) {
    const next = joinedRooms(s)[0];
    selectRoom(s, next ? next.name : null);
  }
}

/** Older messages (load-older, /history): before the oldest loaded message, so contiguous with it. */
function onHistory(s, f) {
  const r = s.rooms.get(f.room);
  const oldest = r ? r.entries.find((e) => e.kind === "message") : null;
  editRoom(s, f.room, { loading: false });
  const messages = f.messages || [];
  addPage(s, f.room, messages, { moreBefore: !!f.more, contiguousWith: oldest ? oldest.id : null });
  if (!messages.length) editRoom(s, f.room, { more: false });
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
  const receipts = [...s.receipts.get(f.msg_id)].sort();
  updateMessage(s, f.msg_id, (e) => ({ ...e, receipts }));
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

const listedLabel = (s, r) => { const l = labelOf(s.labels, r.label); return l ? ` [${labelText(l)}]` : ""; };

export function showListing(s, rooms, note = "") {
  if (!rooms.length && !note) return notice(s, "No rooms yet: /join ROOM creates one.");
  const lines = rooms.map((r) => `${r.room}${r.private ? " (private)" : ""}${listedLabel(s, r)}: ${plural(r.members, "member")}, ` +
                                 `${r.online} online${r.joined ? ", joined" : ""}`);
  return notice(s, [`Rooms (${rooms.length}):`, ...lines, ...(note ? [`(${note})`] : [])].join("\n"), "listing");
}
