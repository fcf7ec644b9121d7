// Finding things: the room directory and full-text search.
//
// The directory (`directory` → `directory {rooms, more}`) lists the public rooms this
// site knows of and the private rooms the user is in. It is fetched at every sign-in
// and resume, a page at a time until `more` is false, and shown in the side panel,
// where a click joins a room; `/directory` fetches it again and lists it in the room.
// Joining and leaving update it at once, and the server pushes every other change
// (`directory_update {rooms, removed}`: new rooms, member counts, last messages, rooms
// gone), so the list is live without asking again.
//
// Search (`search {query, room?, user?}` → `results`) runs from the search box or
// `/search`; `in:ROOM` and `by:USER` in the text narrow it. Each search has a number;
// the results of an older one that come late are dropped. What the panel shows is
// exactly what the server returned for this user (it never returns a private room
// the user cannot read), drawn as text with the matched spans marked.

import { notice, request } from "./draft.js";
import { plural } from "./words.js";

export const MAX_DIRECTORY = 10000;       // the server's max_rooms default: a listing stops there
const SEARCH_LIMIT = 50;
const ROOM_NAME = /^[A-Za-z0-9#][A-Za-z0-9_.#:+-]{0,63}$/;
const USER_NAME = /^[A-Za-z][A-Za-z0-9_.-]{0,31}$/;

// --- the directory -----------------------------------------------------------------------------

/** Ask for the directory; with `show`, list it in the room when it is in (`now`: Unix seconds, for "5 min ago"). */
export function fetchDirectory(s, show = false, now = 0) {
  request(s, { type: "directory" }, { what: "directory", sofar: [], show }, { type: "directory-page", sofar: [], show, now });
}

function validRow(r) {
  return r && typeof r.room === "string";
}

export function onDirectoryPage(s, e) {
  const page = (e.frame.rooms || []).filter(validRow);
  const sofar = [...e.sofar, ...page];
  const last = page.length ? page[page.length - 1].room : null;
  if (e.frame.more && last !== null && sofar.length < MAX_DIRECTORY) {
    request(s, { type: "directory", after: last }, { what: "directory", sofar, show: e.show },
            { type: "directory-page", sofar, show: e.show, now: e.now });
    return;
  }
  s.directory = { rooms: sofar, note: e.frame.more ? `more rooms not listed (over ${MAX_DIRECTORY})` : "" };
  if (e.show) showDirectory(s, e.now || 0);
}

export function directoryFailed(s, e) {
  s.directory = { rooms: e.sofar, note: e.sofar.length ? `incomplete: ${e.message}` : `cannot list rooms: ${e.message}` };
  if (e.show) notice(s, `Cannot list the room directory: ${e.message}`, "error");
}

/** `directory_update`: the server's push of what changed (entries new or changed in place, rooms removed). */
export function onDirectoryUpdate(s, f) {
  if (!s.directory) return;                         // the fetch at sign-in (or resume) brings the whole list
  const rows = new Map(s.directory.rooms.map((r) => [r.room, r]));
  for (const r of Array.isArray(f.rooms) ? f.rooms : []) {
    if (!validRow(r)) continue;
    const mine = s.rooms.get(r.room);
    rows.set(r.room, { ...(rows.get(r.room) || {}), ...r, joined: !!(mine && mine.joined) });
  }
  for (const name of Array.isArray(f.removed) ? f.removed : []) rows.delete(name);
  const next = [...rows.values()].sort((a, b) => (a.room < b.room ? -1 : a.room > b.room ? 1 : 0));
  s.directory = { ...s.directory, rooms: next };
}

/** Joining or leaving changes the directory's `joined` flags at once (and adds a room just made). */
export function directoryJoined(s, room, joined, isPrivate = false) {
  if (!s.directory) return;
  const rows = s.directory.rooms;
  const i = rows.findIndex((r) => r.room === room);
  const next = rows.slice();
  if (i >= 0) next[i] = { ...rows[i], joined };
  else if (joined) next.push({ room, private: isPrivate, members: 1, last_at: null, joined });
  else return;
  next.sort((a, b) => (a.room < b.room ? -1 : a.room > b.room ? 1 : 0));
  s.directory = { ...s.directory, rooms: next };
}

function ago(seconds) {
  if (seconds < 90) return "just now";
  if (seconds < 5400) return `${Math.round(seconds / 60)} min ago`;
  if (seconds < 129600) return `${Math.round(seconds / 3600)} h ago`;
  return `${Math.round(seconds / 86400)} days ago`;
}

/** "3 members · 5 min ago" (`now` in Unix seconds). */
export function describeRoom(r, now) {
  const members = plural(r.members, "member");
  const last = typeof r.last_at === "number" ? ago(Math.max(0, now - r.last_at)) : "no messages yet";
  return `${r.private ? "private · " : ""}${members} · ${last}`;
}

function showDirectory(s, now) {
  const rows = s.directory.rooms;
  if (!rows.length) return notice(s, "The directory is empty: /join ROOM creates a room.");
  const lines = rows.map((r) => `${r.room}${r.joined ? " (joined)" : ""}: ${describeRoom(r, now)}`);
  return notice(s, [`Room directory (${rows.length}):`, ...lines, ...(s.directory.note ? [`(${s.directory.note})`] : [])]
    .join("\n"), "listing");
}

// --- search ------------------------------------------------------------------------------------

/** The search box's text: {query, room?, user?} or {error}. */
export function parseSearch(text) {
  const out = { query: "" };
  const words = [];
  for (const w of String(text).trim().split(/\s+/)) {
    if (!w) continue;
    const m = /^(in|by):(.*)$/i.exec(w);
    if (m && m[1].toLowerCase() === "in" && ROOM_NAME.test(m[2])) out.room = m[2];
    else if (m && m[1].toLowerCase() === "by" && USER_NAME.test(m[2])) out.user = m[2];
    else words.push(w);
  }
  out.query = words.join(" ");
  if (!out.query) return { error: "Search for what? Type some words (in:ROOM and by:USER narrow it)." };
  if (out.query.length > 200) return { error: "A search is at most 200 characters." };
  return out;
}

export function startSearch(s, text) {
  const p = parseSearch(text);
  if (p.error) { notice(s, p.error, "error"); return; }
  s.seq += 1;
  s.search = { seq: s.seq, text: String(text).trim(), query: p.query, room: p.room || null, user: p.user || null,
               status: "searching", results: [], error: "" };
  const frame = { type: "search", query: p.query, limit: SEARCH_LIMIT };
  if (p.room) frame.room = p.room;
  if (p.user) frame.user = p.user;
  request(s, frame, { what: "search", seq: s.seq }, { type: "search-results", seq: s.seq });
}

function validResult(m) {
  return m && typeof m.msg_id === "string" && typeof m.room === "string" && typeof m.text === "string";
}

export function onSearchResults(s, e) {
  if (!s.search || s.search.seq !== e.seq) return;                  // an older search, or closed
  const results = (e.frame.messages || []).filter(validResult);
  s.search = { ...s.search, status: "done", results };
}

export function searchFailed(s, e) {
  if (!s.search || s.search.seq !== e.seq) return;
  s.search = { ...s.search, status: "error", error: e.message };
}
