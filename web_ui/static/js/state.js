// The browser client's state: a reducer over events, with no DOM, no network and no timers.
//
// Theory of operation
// -------------------
// `reduce(state, event)` returns the next state and never changes the one it is
// given (collections are copied where they change, shared where they don't, so
// the view can tell what changed by comparing references). Events say what
// happened:
//
//   {type: "frame", frame, now}            a frame from the chat server (replies included), and when it came
//   {type: "ask-site"}, {type: "site-info", site}   which site the sign-in form is for (the server's /health)
//   {type: "conn", kind, info}             the connection's state (see connection.js)
//   {type: "request-failed", what, ...}    a request was refused or cut off (`message` says why)
//   {type: "login-submit", user, password}, {type: "login-done"}, {type: "login-failed", code, message}
//   {type: "logout", all}, {type: "logged-out", confirmed, all, reason}
//   {type: "submit", line, clientId, now}  the message box (a chat line or a /command)
//   {type: "select-room" | "cycle-room" | "join-submit" | "retry" | "load-older" | "retry-now" |
//          "toggle-theme" | "system-theme" | "nav" | "escape" | "visibility" | "init", ...}
//   {type: "join" | "directory" | "search-submit" | "search-close" | "jump" | "fill-gap" | "reply" |
//          "reply-cancel" | "precedence" | "expires-in" | "acknowledge" | "viewport" | "tick", ...}   the operators' features
//   {type: "send-label", value} | {type: "create-submit", room, label, members}   security labels (classification.js)
//   {type: "directory-page" | "search-results" | "around-page" | "gap-page" | "original-page", frame, ...}
//                                          replies to requests that asked for them as events (draft.js `request`)
//   {type: "positions-show" | "position-select" | "position-submit" | "locate" | "located" | "locate-failed", ...}
//                                          the positions panel and the user's reports (positions.js)
//
// The next state's `effects` lists, as data, what this step asks of the world
// outside: `request` (a protocol frame, the event to dispatch if it fails, and
// optionally the event to dispatch with its reply), `login`, `logout`,
// `retry-now`, `save-theme`, `focus`, `announce`, `clear-input`, `mark-read`,
// `notify`, `clock`, `locate`. The store (app.js) hands them to effects.js once and
// drops them; view.js draws the state. Random ids, the time and the page's
// visibility come in with the events, so the same events always give the same state.
//
// The server's frames and the rooms' logs are handled in rooms.js: a room's
// entries are sorted by order key (order.js), so a late message is inserted at
// its place and marked, and a page of older history merges in wherever it
// belongs. The user's own messages are shown as "pending" at the bottom until
// the server delivers them in the global order, then take their place like any
// other message, with the sites that delivered them (receipts) and those they
// were not sent to (skipped). The operators' features live in finding.js
// (directory, search), reading.js (unread and mention counts, read markers),
// replies.js and navigation.js (quotes, going to a message, gaps) and
// precedence.js (FLASH/IMMEDIATE alerts, acknowledgements), expiry.js (messages that expire); units' positions in
// positions.js (`state.positions`, its one owner); security labels (the scheme, rooms' floors, the composer's
// label, /label and /create with a label) in classification.js, with labels.js's pure rules. This module holds the
// state's shape, the connection, signing in and out, and what the user does.

import { COMMANDS, parseInput } from "./commands.js";
import { announce, applyFrame, currentRoom, editRoom, effect, findEntry, insertEntry, isOnline, joinedRooms, notice,
         putRoom, replaceEntry, request, selectRoom, showListing } from "./rooms.js";
import { directoryFailed, fetchDirectory, onDirectoryPage, onSearchResults, searchFailed, startSearch } from "./finding.js";
import { aroundFailed, fillGap, gapFailed, jump, onAroundPage, onGapPage } from "./navigation.js";
import { acknowledge, acknowledgeFailed, alertList, DEFAULT, onTick, PRECEDENCES, RAISED } from "./precedence.js";
import { expiryTicking, onExpiryTick, parseDuration, validExpiresIn } from "./expiry.js";
import { emptyPositions, hasUnits, locate, located, locateFailed, onPositionsTick, positionsFailed, selectUnit, showPositions,
         submitReport } from "./positions.js";
import { markReadIfReading, onViewport } from "./reading.js";
import { onOriginalPage, originalFailed, replyCommand, startReply } from "./replies.js";
import { CONNECTED, statusOf } from "./status.js";
import { errorReason } from "./words.js";
import { chooseLabel, createCommand, createSubmit, labelCommand, labelToSend } from "./classification.js";
import { labelJson, labelText } from "./labels.js";

export { currentRoom, isOnline, joinedRooms } from "./rooms.js";
export { alertList } from "./precedence.js";

export const HISTORY_PAGE = 50;
const KEYS_HELP = "Keys: Enter sends, Shift+Enter new line, Alt+↑/↓ previous/next room, Escape back to the message box.";

/** The state before anything happened: the login screen. */
export function initialState({ theme = null, systemDark = false, hidden = false } = {}) {
  return {
    screen: "login",                 // "login" | "chat"
    login: { error: "", note: "", busy: false, site: null },   // site: the site one signs in to (/health)
    ...emptySession(),
    conn: { kind: "offline", info: {} },
    banner: null,                    // {text, kind: "reconnecting" | "info"}
    theme,                           // "light" | "dark" chosen by the user, or null: follow the system
    systemDark,
    navOpen: false,                  // the room drawer (narrow screens)
    hidden,                          // the page is not visible: new messages count as unread everywhere
    seq: 0,                          // tie-breaker for notices and pending entries
    effects: [],
  };
}

function emptySession() {
  return {
    user: null,
    site: null,
    sites: new Map(),                // site -> status
    via: new Map(),                  // site -> next hop, for a site reached only through relays
    chatDown: new Set(),             // sites RCM reaches whose chat server is gone (nobody there is online)
    presence: new Map(),             // site -> Set(user)
    rooms: new Map(),                // name -> room (see newRoom)
    current: null,                   // the room shown
    receipts: new Map(),             // msg_id -> Set(site) where it was delivered
    skipped: new Map(),              // msg_id -> [site] it was not sent to
    acked: new Map(),                // msg_id -> client_id (own, acknowledged, not yet delivered) or null
    listing: null,                   // the /rooms listing so far while its next page is on its way, else null
    directory: null,                 // {rooms: [{room, private, members, last_at, joined}], note} (finding.js)
    directoryFilter: "",             // what the join box holds: the directory shows the rooms it matches
    search: null,                    // the search panel: {seq, text, query, room, user, status, results, error}
    jump: null,                      // {room, msgId, seq, loading?}: the message the view goes to (navigation.js)
    following: true,                 // the message list is scrolled to the bottom (the page says so)
    replyTo: null,                   // {room, msgId, user, origin, text}: the next line sent answers this one
    precedence: DEFAULT,             // the composer's precedence for the next line
    expiresIn: null,                 // the composer's expiry (seconds) for the lines sent, null: never (expiry.js)
    expiring: new Map(),             // "room\nmsg_id" -> expires_at of entries not marked expired yet (expiry.js)
    originals: new Map(),            // "room\nmsg_id" -> {state, frame}: lines replies answer, fetched (replies.js)
    acks: new Map(),                 // msg_id -> [{user, site, at}] acknowledgements (precedence.js)
    alerts: new Map(),               // msg_id -> alert: flash/immediate messages not acknowledged yet
    losses: new Map(),               // origin -> {lost, back}: messages still missing, recovered so far (losses.js)
    positions: emptyPositions(),     // units' newest reports, the panel and the report form (positions.js)
    labels: null,                    // the mission's security labels and the user's clearance, null: unlabeled
    sendLabel: null,                 // the composer's label, null: the room's floor (classification.js)
  };
}

// --- queries (also used by the view) -------------------------------------------------------

/** Sites with this site first, then by name. */
export function siteOrder(state) {
  return [...state.sites.keys()].sort((a, b) => (a === state.site ? -1 : b === state.site ? 1 : a < b ? -1 : a > b ? 1 : 0));
}

/** "connected", "connected via B" (reached only through relays), "suspected"..., and ", chat server down" when RCM
 *  reaches the site but its chat server is gone. */
export function siteWords(state, site) {
  const status = statusOf(state.sites.get(site));
  const via = status === CONNECTED ? state.via.get(site) : undefined;
  return status + (via ? ` via ${via}` : "") + (state.chatDown.has(site) ? ", chat server down" : "");
}

export function effectiveTheme(state) {
  return state.theme || (state.systemDark ? "dark" : "light");
}

export function unreadTotal(state) {
  return joinedRooms(state).reduce((n, r) => n + r.unread, 0);
}

// --- the reducer ---------------------------------------------------------------------------

/** The state after `event`; `state` itself is left as it was. */
export function reduce(state, event) {
  const s = { ...state, effects: [] };      // a draft: its fields are replaced, never mutated in place
  const handler = EVENTS[event.type];
  if (handler) handler(s, event);
  // A tick every second while alerts are outstanding (they repeat), units are shown (their ages move, they expire)
  // or messages are still to expire.
  const ticking = (st) => (!!st.alerts && st.alerts.size > 0) || hasUnits(st) || expiryTicking(st);
  if (ticking(s) !== ticking(state)) effect(s, "clock", { on: ticking(s) });
  return s;
}

const EVENTS = {
  init: (s, e) => { s.theme = e.theme ?? s.theme; s.systemDark = !!e.systemDark; s.hidden = !!e.hidden; },
  "ask-site": (s) => effect(s, "ask-site"),
  frame: (s, e) => applyFrame(s, e.frame, e.now),
  "site-info": (s, e) => { if (typeof e.site === "string" && e.site) s.login = { ...s.login, site: e.site }; },
  conn: onConn,
  "request-failed": onRequestFailed,
  "login-submit": onLoginSubmit,
  "login-done": (s) => { s.login = { ...s.login, busy: false }; effect(s, "focus", { target: "composer" }); },
  "login-failed": (s, e) => showLogin(s, e.code === "auth_failed" ? "Unknown user or wrong password." : e.message),
  logout: onLogout,
  "logged-out": onLoggedOut,
  submit: onSubmit,
  "select-room": (s, e) => {
    selectRoom(s, e.room);
    s.navOpen = false;
    effect(s, "focus", { target: "composer" });
  },
  join: (s, e) => { if (e.room) { joinRoom(s, e.room); s.navOpen = false; } },
  "directory-filter": (s, e) => { s.directoryFilter = String(e.text || ""); },
  directory: (s, e) => fetchDirectory(s, false, e.now),
  "search-submit": (s, e) => startSearch(s, e.text || ""),
  "search-close": (s) => { s.search = null; },
  jump,
  "around-page": onAroundPage,
  "fill-gap": fillGap,
  "gap-page": onGapPage,
  "original-page": onOriginalPage,
  "directory-page": onDirectoryPage,
  "search-results": onSearchResults,
  viewport: onViewport,
  reply: (s, e) => { startReply(s, e); effect(s, "focus", { target: "composer" }); },
  "reply-cancel": (s) => { s.replyTo = null; },
  precedence: (s, e) => { if (PRECEDENCES.includes(e.value)) s.precedence = e.value; },
  "expires-in": (s, e) => { s.expiresIn = validExpiresIn(e.value === null ? null : Number(e.value)); },
  "send-label": (s, e) => chooseLabel(s, e.value),
  "create-submit": createSubmit,
  acknowledge: (s, e) => acknowledge(s, e.msgId),
  tick: (s, e) => {                    // a tick's `now` is in ms (precedence.js)
    onTick(s, e);
    onPositionsTick(s, Number(e.now) / 1000);
    onExpiryTick(s, Number(e.now) / 1000);
  },
  "positions-show": (s, e) => showPositions(s, e.on),
  "position-select": (s, e) => selectUnit(s, e.key),
  "position-submit": submitReport,
  locate,
  located,
  "locate-failed": locateFailed,
  "cycle-room": (s, e) => {
    const rooms = joinedRooms(s);
    if (!rooms.length) return;
    const i = rooms.findIndex((r) => r.name === s.current);
    const next = rooms[(i + e.step + rooms.length) % rooms.length];
    selectRoom(s, next.name);
    announce(s, `Room ${next.name}`);
  },
  "join-submit": (s, e) => {
    const name = (e.room || "").trim();
    if (!name) return;
    effect(s, "clear-input", { id: "join-input" });
    s.directoryFilter = "";
    joinRoom(s, name);
    s.navOpen = false;
  },
  retry: (s, e) => {
    const p = findEntry(s.rooms.get(e.room), `p:${e.clientId}`);
    if (!p) return;
    replaceEntry(s, e.room, { ...p, state: isOnline(s) ? "sending" : "queued", error: undefined });
    sendSay(s, e.room, p);
  },
  "load-older": (s) => loadOlder(s, HISTORY_PAGE),
  "retry-now": (s) => effect(s, "retry-now"),
  "toggle-theme": (s) => setTheme(s, effectiveTheme(s) === "dark" ? "light" : "dark"),
  "system-theme": (s, e) => { s.systemDark = !!e.dark; },
  nav: (s, e) => {
    s.navOpen = !!e.open;
    if (s.navOpen) effect(s, "focus", { target: "nav" });
  },
  escape: (s) => {
    s.navOpen = false;
    if (s.search) s.search = null;
    else if (s.replyTo) s.replyTo = null;
    if (s.screen === "chat") effect(s, "focus", { target: "composer" });
  },
  visibility: (s, e) => {
    s.hidden = !!e.hidden;
    markReadIfReading(s);
  },
};

// --- the connection ------------------------------------------------------------------------

function onConn(s, e) {
  const info = e.info || {};
  s.conn = { kind: e.kind, info };
  if (e.kind === "online") s.banner = null;
  else if (e.kind === "reconnecting") {
    const secs = (info.delay / 1000).toFixed(info.delay < 1000 ? 1 : 0);
    s.banner = { kind: "reconnecting",
                 text: `Connection to the chat server lost (${info.reason}). Reconnecting in ${secs} s ` +
                       `(attempt ${info.attempt}); messages you send are kept and sent when it is back.` };
  } else if (e.kind === "expired") {
    showLogin(s, info.signedOut ? "You were signed out (all your sessions at this site were ended). Please sign in again."
                                : `Your session could not be resumed (${info.reason}). Please sign in again.`);
  }
}

function showLogin(s, error, note = "") {
  s.screen = "login";
  s.login = { error: error || "", note, busy: false, site: s.login.site || s.site };
  s.banner = null;
  s.navOpen = false;
  effect(s, "focus", { target: "login-user" });
}

function onLoginSubmit(s, e) {
  const user = (e.user || "").trim();
  if (!user || !e.password) {
    s.login = { ...s.login, error: "Give a user name and a password." };
    return;
  }
  Object.assign(s, emptySession());
  s.login = { ...s.login, error: "", note: "", busy: true };
  effect(s, "clear-input", { id: "login-password" });
  effect(s, "login", { user, password: e.password });    // the effect is dropped once performed; state never holds it
}

function onLogout(s, e) {
  if (s.screen !== "chat") return;
  s.login = { ...s.login, site: s.login.site || s.site };
  Object.assign(s, emptySession());
  showLogin(s, "", "Signing out…");
  s.login = { ...s.login, busy: true };                  // until the server answered (or did not, in time)
  effect(s, "logout", { all: !!e.all });
}

function onLoggedOut(s, e) {
  const note = e.confirmed ? (e.all ? "Signed out of every session at this site." : "Signed out.")
                           : `Signed out of this page; the chat server did not confirm (${e.reason}).`;
  s.login = { ...s.login, note, busy: false };
}

function onRequestFailed(s, e) {
  const msg = errorReason(e.message, e.request);     // "Cannot join x: room 'x' is private", not "...: join: room..."
  switch (e.what) {
    case "say": {
      const p = findEntry(s.rooms.get(e.room), `p:${e.clientId}`);
      if (p) replaceEntry(s, e.room, { ...p, state: "failed", error: msg });
      if (e.code === "forbidden") {
        notice(s, `Not sent${p && p.label ? ` at ${labelText(p.label)}` : ""}: refused by the server (${msg}).`, "error");
      }
      return;
    }
    case "join":
      if (s.rooms.has(e.room)) editRoom(s, e.room, { wanted: false });
      return notice(s, `Cannot join ${e.room}: ${msg}`, "error");
    case "leave": return notice(s, `Cannot leave ${e.room}: ${msg}`, "error");
    case "rooms": {
      const sofar = s.listing || [];
      s.listing = null;
      if (sofar.length) showListing(s, sofar, `incomplete: the next page failed: ${msg}`);
      return notice(s, `Cannot list rooms: ${msg}`, "error");
    }
    case "create": return notice(s, `Cannot create ${e.room}: ${msg}`, "error");
    case "history":
      if (s.rooms.has(e.room)) editRoom(s, e.room, { loading: false });
      return notice(s, `Cannot load history: ${msg}`, "error");
    case "directory": return directoryFailed(s, e);
    case "search": return searchFailed(s, e);
    case "around": return aroundFailed(s, e);
    case "gap": return gapFailed(s, e);
    case "original": return originalFailed(s, e);
    case "acknowledge":
      acknowledgeFailed(s, e);
      return notice(s, `Cannot acknowledge: ${msg}`, "error");
    case "mark_read": return undefined;          // best effort: the next read sends it again
    case "positions":
    case "position": return positionsFailed(s, e, msg);
    default: return undefined;
  }
}

// --- what the user does --------------------------------------------------------------------

function onSubmit(s, e) {
  const parsed = parseInput(e.line);
  if (parsed.kind === "empty") return;
  if (parsed.kind === "error") { notice(s, parsed.message, "error"); return; }
  if (parsed.kind === "command") {
    effect(s, "clear-input", { id: "composer-input" });
    runCommand(s, parsed.name, parsed.args, parsed.rest, e);
    return;
  }
  say(s, parsed.text, e.clientId, s.precedence);
}

/** Send a chat line to the room shown (answering `replyTo` when it is for this room), expiring after
 *  `expiresIn` seconds (default: the composer's choice; null: never). */
function say(s, text, clientId, precedence = DEFAULT, expiresIn = s.expiresIn) {
  const r = currentRoom(s);
  if (!r || !r.joined) { notice(s, r ? `Join ${r.name} to write here.` : "Join a room first: /join ROOM", "error"); return; }
  effect(s, "clear-input", { id: "composer-input" });
  s.seq += 1;
  const replyTo = s.replyTo && s.replyTo.room === r.name ? s.replyTo : null;
  const entry = { kind: "pending", key: `p:${clientId}`, group: 1, sub: 0, order: [], seq: s.seq, clientId,
                  text, author: `${s.user}@${s.site}`, state: isOnline(s) ? "sending" : "queued", precedence,
                  replyTo: replyTo ? replyTo.msgId : null, expiresIn: validExpiresIn(expiresIn), label: labelToSend(s, r) };
  putRoom(s, insertEntry(r, entry)[0]);
  sendSay(s, r.name, entry);
  s.replyTo = null;
  if (precedence !== DEFAULT) s.precedence = DEFAULT;      // a FLASH is never sent twice by accident
}

function sendSay(s, room, entry) {
  const frame = { type: "say", room, text: entry.text, client_id: entry.clientId };
  if (entry.precedence && entry.precedence !== DEFAULT) frame.precedence = entry.precedence;   // routine: left out
  if (entry.replyTo) frame.reply_to = entry.replyTo;
  if (entry.expiresIn) frame.expires_in = entry.expiresIn;
  if (entry.label) frame.label = labelJson(entry.label);
  request(s, frame, { what: "say", room, clientId: entry.clientId });
}

function joinRoom(s, name) {
  const r = s.rooms.get(name);
  if (r && r.joined) { selectRoom(s, name); return; }
  editRoom(s, name, { wanted: true });
  request(s, { type: "join", room: name }, { what: "join", room: name });
}

function loadOlder(s, limit) {
  const r = currentRoom(s);
  if (!r || !r.more || r.loading) return;
  const oldest = r.entries.find((e) => e.kind === "message");
  editRoom(s, r.name, { loading: true });
  const frame = { type: "history", room: r.name, limit };
  if (oldest) frame.before = oldest.id;
  request(s, frame, { what: "history", room: r.name });
}

/** `/ack [all]`: acknowledge the most urgent alert (or every one). */
function ackCommand(s, which) {
  const open = alertList(s).filter((a) => !a.acking);
  if (!open.length) return notice(s, "Nothing to acknowledge.");
  for (const a of which === "all" ? open : open.slice(0, 1)) acknowledge(s, a.msgId);
  return undefined;
}

function setTheme(s, theme) {
  s.theme = theme;
  effect(s, "save-theme", { theme });
}

function runCommand(s, name, args, rest, e) {
  const r = currentRoom(s);
  if (RAISED.includes(name)) return say(s, rest, e.clientId, name);     // /flash, /immediate, /priority
  switch (name) {
    case "reply": return replyCommand(s, rest, (text) => say(s, text, e.clientId, s.precedence));
    case "me": return say(s, `* ${s.user} ${rest}`, e.clientId, s.precedence);   // contracts/text.py action_text
    case "ack": return ackCommand(s, args[0]);
    case "expire": {
      const secs = parseDuration(args[0]);
      if (secs === null) return notice(s, "usage: /expire TIME TEXT (TIME: 90, 90s, 15m, 2h or 1d; at most 7 days)", "error");
      return say(s, rest.replace(/^\s*\S+\s?/, ""), e.clientId, s.precedence, secs);
    }
    case "search": return startSearch(s, rest);
    case "directory": return fetchDirectory(s, true, e.now || 0);
    case "join": return joinRoom(s, args[0]);
    case "leave": {
      const target = args[0] || (r && r.name);
      if (!target) return notice(s, "Not in a room.");
      return request(s, { type: "leave", room: target }, { what: "leave", room: target });
    }
    case "rooms":
      s.listing = null;                                   // a new listing, from its first page
      return request(s, { type: "rooms" }, { what: "rooms" });
    case "create": return createCommand(s, args[0], args.slice(1));
    case "label": return labelCommand(s, rest);
    case "history":
      if (!r) return notice(s, "Not in a room.");
      if (!r.more) return notice(s, "No older messages.");
      return loadOlder(s, args.length ? Number(args[0]) : HISTORY_PAGE);
    case "switch": {
      const target = s.rooms.get(args[0]);
      if (!target || !target.joined) return notice(s, `Not in ${args[0]}: /join ${args[0]} first.`, "error");
      return selectRoom(s, args[0]);
    }
    case "who": {
      const lines = siteOrder(s).map((site) => {
        const users = [...(s.presence.get(site) || [])].sort();
        return `${site} (${siteWords(s, site)}): ${users.length ? users.join(", ") : "nobody"}`;
      });
      return notice(s, ["Online:", ...lines].join("\n"), "listing");
    }
    case "sites":
      return notice(s, ["Sites:", ...siteOrder(s).map((x) => `${x}: ${siteWords(s, x)}${x === s.site ? " (here)" : ""}`)]
        .join("\n"), "listing");
    case "theme": return setTheme(s, args[0]);
    case "positions": return showPositions(s, !s.positions.shown);
    case "logout": return onLogout(s, { all: args[0] === "all" });
    case "help":
      return notice(s, ["Commands:", ...COMMANDS.map(([u, d]) => `${u}  ${d}`), KEYS_HELP].join("\n"), "listing");
    default: return undefined;
  }
}
