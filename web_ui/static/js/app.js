// The browser client: state kept from protocol frames, rendered with DOM calls.
//
// Theory of operation
// -------------------
// Every server frame goes through `onFrame`, which updates `state` (rooms with
// their entries, site statuses, presence, receipts) and re-renders the parts it
// touched. A room's entries are kept sorted by order key (order.js), so a late
// message is inserted at its place and marked, and a page of older history is
// merged in wherever it belongs. The user's own messages are shown as
// "sending" at the bottom until the server delivers them in the global order,
// then take their place like any other message.
//
// User text only ever reaches the page as text nodes (dom.js); there is no
// HTML parser (no inner/outer-HTML assignment, no markup insertion) anywhere in the client.

import { ChatConnection } from "./connection.js";
import { COMMANDS, parseInput } from "./commands.js";
import { clear, h } from "./dom.js";
import { compareEntries, insertIndex } from "./order.js";

const $ = (id) => document.getElementById(id);
const STATUS_WORDS = { connected: "connected", suspected: "suspected", disconnected: "disconnected" };
const STATUS_MARKS = { connected: "●", suspected: "◐", disconnected: "○" };
const NEAR_BOTTOM = 80;     // px: closer than this to the bottom, new messages keep the view at the bottom
const NARROW = "(max-width: 760px)";

const state = {
  user: null,
  site: null,
  sites: new Map(),          // site -> status
  presence: new Map(),       // site -> Set(user)
  rooms: new Map(),          // room name -> Room
  current: null,             // room shown
  receipts: new Map(),       // msg_id -> Set(site)
  skipped: new Map(),        // msg_id -> [site]
  ackedIds: new Map(),       // msg_id -> client_id (own messages acknowledged, maybe not yet delivered)
  online: false,
  seq: 0,                    // tie-breaker for notices and pending entries
};

const conn = new ChatConnection({ onFrame, onState });

// --- rooms and entries -------------------------------------------------------------------------

function room(name) {
  let r = state.rooms.get(name);
  if (!r) {
    r = { name, joined: false, private: false, members: null, entries: [], byId: new Map(), pending: new Map(),
          unread: 0, more: false, loading: false };
    state.rooms.set(name, r);
  }
  return r;
}

function joinedRooms() {
  return [...state.rooms.values()].filter((r) => r.joined).sort((a, b) => (a.name < b.name ? -1 : 1));
}

function lastOrder(r) {
  for (let i = r.entries.length - 1; i >= 0; i--) if (r.entries[i].group === 0) return r.entries[i].order;
  return [];
}

/** Insert an entry at its place; returns its index. Renders it when the room is shown. */
function insertEntry(r, entry) {
  const i = insertIndex(r.entries, entry);
  r.entries.splice(i, 0, entry);
  if (state.current === r.name) {
    entry.el = renderEntry(r, entry);
    const list = $("message-list");
    const next = r.entries[i + 1];
    list.insertBefore(entry.el, next && next.el ? next.el : null);
    $("room-empty").hidden = true;
  }
  return i;
}

function removeEntry(r, entry) {
  const i = r.entries.indexOf(entry);
  if (i >= 0) r.entries.splice(i, 1);
  if (entry.el) entry.el.remove();
}

/** Add a delivered message (live or from history); returns the entry, or null if already shown. */
function addMessage(frame, { live }) {
  const r = room(frame.room);
  if (r.byId.has(frame.msg_id)) return null;
  if (Array.isArray(frame.receipts)) {
    const set = state.receipts.get(frame.msg_id) || new Set();
    for (const s of frame.receipts) set.add(s);
    state.receipts.set(frame.msg_id, set);
  }
  const entry = { kind: "message", group: 0, sub: 0, id: frame.msg_id, order: frame.order, frame, seq: 0, el: null };
  // Our own message, acknowledged earlier: it replaces its "sending" line.
  const cid = state.ackedIds.get(frame.msg_id);
  if (cid !== undefined) {
    const p = r.pending.get(cid);
    if (p) { removeEntry(r, p); r.pending.delete(cid); }
    state.ackedIds.delete(frame.msg_id);
  } else if (frame.origin === state.site && frame.user === state.user) {
    state.ackedIds.set(frame.msg_id, null);     // delivered before its ack: the ack removes the pending line
  }
  const atBottom = isNearBottom();
  const i = insertEntry(r, entry);
  r.byId.set(frame.msg_id, entry);
  if (!live) return entry;
  const mine = frame.user === state.user && frame.origin === state.site;
  if (state.current !== r.name || document.hidden) {
    if (!mine) r.unread += 1;
    renderRooms();
    renderTitle();
  }
  if (state.current === r.name) {
    const placedEarlier = i < r.entries.length - 1 - r.pending.size;
    if (frame.late) {
      announce(`Late message from ${frame.user}@${frame.origin} in ${r.name}, placed at its position` +
               (placedEarlier ? " earlier in the conversation" : ""));
      entry.el.classList.add("just-placed");
    }
    if (atBottom) scrollToBottom();
  }
  return entry;
}

function addNotice(r, text, cls = "") {
  state.seq += 1;
  const entry = { kind: "notice", group: 0, sub: 1, order: lastOrder(r), seq: state.seq, text, cls, el: null };
  const atBottom = isNearBottom();
  insertEntry(r, entry);
  if (state.current === r.name && atBottom) scrollToBottom();
  return entry;
}

/** A notice in the room shown (or the first joined room). */
function notice(text, cls = "") {
  const name = state.current || (joinedRooms()[0] || {}).name;
  if (name) addNotice(room(name), text, cls);
  else setBanner(text, false);
}

// --- frames ------------------------------------------------------------------------------------

function onFrame(f) {
  switch (f.type) {
    case "welcome": return onWelcome(f);
    case "joined": return onJoined(f);
    case "left": return onLeft(f);
    case "message": return void addMessage(f, { live: true });
    case "history": return onHistory(f);
    case "ack": return onAck(f);
    case "receipt": return onReceipt(f);
    case "site_status": state.sites.set(f.site, f.status); announce(`Site ${f.site} is ${f.status}`); return renderSites();
    case "presence": return onPresence(f);
    case "missing": return onMissing(f);
    case "rooms": return onRoomsList(f);
    case "created": return notice(`Private room ${f.room} created for ${f.members.join(", ")}`);
    case "error": if (f.in_reply_to === undefined) notice(`Error from the server: ${f.message}`, "error"); return;
    default: return;
  }
}

function onWelcome(f) {
  const fresh = state.user !== f.user || state.site !== f.site;
  state.user = f.user;
  state.site = f.site;
  state.sites = new Map(Object.entries(f.sites || {}));
  state.presence = new Map(Object.entries(f.presence || {}).map(([s, us]) => [s, new Set(us)]));
  const rooms = new Set(f.rooms || []);
  for (const r of state.rooms.values()) {
    if (r.joined && !rooms.has(r.name)) r.joined = false;
  }
  for (const name of rooms) {
    const r = room(name);
    if (!r.joined || fresh) conn.request({ type: "join", room: name }).catch((e) => notice(`Cannot join ${name}: ${e.message}`, "error"));
  }
  $("whoami").textContent = `${f.user}@${f.site}`;
  $("whoami").title = `Signed in as ${f.user} at site ${f.site}`;
  showChat();
  renderAll();
}

function onJoined(f) {
  const r = room(f.room);
  const wasJoined = r.joined;
  r.joined = true;
  r.private = !!f.private;
  r.members = f.members || null;
  r.more = !!f.more;
  for (const m of f.history || []) addMessage(m, { live: false });
  if (!state.current || !room(state.current).joined || (!wasJoined && r.wanted)) {
    r.wanted = false;
    selectRoom(r.name);
  } else {
    renderRooms();
    if (state.current === r.name) renderRoomHead();
  }
}

function onLeft(f) {
  const r = room(f.room);
  r.joined = false;
  r.unread = 0;
  if (f.reason) setBanner(`You left ${f.room}: ${f.reason}`, false);
  if (state.current === f.room) {
    const next = joinedRooms()[0];
    selectRoom(next ? next.name : null);
  } else {
    renderRooms();
  }
}

function onHistory(f) {
  const r = room(f.room);
  r.loading = false;
  r.more = !!f.more;
  const box = $("messages");
  const before = box.scrollHeight - box.scrollTop;
  for (const m of f.messages || []) addMessage(m, { live: false });
  if (state.current === r.name) {
    box.scrollTop = box.scrollHeight - before;    // keep what was on screen where it was
    renderRoomHead();
    if (!(f.messages || []).length) announce("No older messages");
  }
}

function onAck(f) {
  if (Array.isArray(f.skipped) && f.skipped.length) state.skipped.set(f.msg_id, f.skipped);
  for (const r of state.rooms.values()) {
    const p = r.pending.get(f.client_id);
    if (!p) continue;
    if (state.ackedIds.has(f.msg_id)) {           // already delivered and shown
      state.ackedIds.delete(f.msg_id);
      removeEntry(r, p);
      r.pending.delete(f.client_id);
      const shown = r.byId.get(f.msg_id);
      if (shown) refreshEntry(r, shown);
    } else {
      state.ackedIds.set(f.msg_id, f.client_id);
      p.state = "accepted";
      p.msgId = f.msg_id;
      refreshEntry(r, p);
    }
  }
}

function onReceipt(f) {
  const set = state.receipts.get(f.msg_id) || new Set();
  set.add(f.site);
  state.receipts.set(f.msg_id, set);
  for (const r of state.rooms.values()) {
    const e = r.byId.get(f.msg_id);
    if (e) refreshEntry(r, e);
  }
}

function onPresence(f) {
  const set = state.presence.get(f.site) || new Set();
  for (const u of f.online || []) set.add(u);
  for (const u of f.offline || []) set.delete(u);
  state.presence.set(f.site, set);
  renderPresence();
}

function onMissing(f) {
  const text = `${f.count} message${f.count === 1 ? "" : "s"} from site ${f.origin} ` +
               `${f.count === 1 ? "was" : "were"} lost while ${f.origin} was disconnected; ` +
               `${f.count === 1 ? "it" : "they"} will not arrive.`;
  const rooms = joinedRooms();
  for (const r of rooms) addNotice(r, text, "missing");
  if (!rooms.length) setBanner(text, false);
  announce(text);
}

function onRoomsList(f) {
  const rooms = f.rooms || [];
  if (!rooms.length) return notice("No rooms yet: /join ROOM creates one.");
  const lines = rooms.map((r) => `${r.room}${r.private ? " (private)" : ""}: ${r.members} member${r.members === 1 ? "" : "s"}, ` +
                                 `${r.online} online${r.joined ? ", joined" : ""}`);
  notice(["Rooms:", ...lines].join("\n"), "listing");
}

// --- connection state --------------------------------------------------------------------------

function onState(kind, info) {
  const el = $("conn-state");
  el.dataset.state = kind;
  state.online = kind === "online";
  document.body.classList.toggle("offline", !state.online && state.user !== null);
  $("banner-retry").hidden = kind !== "reconnecting";
  switch (kind) {
    case "online":
      el.textContent = "Online";
      setBanner(null);
      break;
    case "connecting":
      el.textContent = "Connecting…";
      break;
    case "reconnecting": {
      el.textContent = "Reconnecting…";
      const secs = (info.delay / 1000).toFixed(info.delay < 1000 ? 1 : 0);
      setBanner(`Connection to the chat server lost (${info.reason}). Reconnecting in ${secs} s ` +
                `(attempt ${info.attempt}); messages you send are kept and sent when it is back.`, true);
      break;
    }
    case "expired":
      el.textContent = "Signed out";
      showLogin(`Your session could not be resumed (${info.reason}). Please sign in again.`);
      break;
    case "closed":
      el.textContent = "";
      break;
    default:
      break;
  }
  renderSites();
}

function setBanner(text, reconnecting) {
  const b = $("banner");
  if (text === null) { b.hidden = true; return; }
  $("banner-text").textContent = text;
  b.dataset.kind = reconnecting ? "reconnecting" : "info";
  b.hidden = false;
}

// --- rendering ---------------------------------------------------------------------------------

function renderAll() {
  renderSites();
  renderRooms();
  renderPresence();
  renderRoom();
  renderTitle();
}

function siteOrder() {
  return [...state.sites.keys()].sort((a, b) => (a === state.site ? -1 : b === state.site ? 1 : a < b ? -1 : a > b ? 1 : 0));
}

function renderSites() {
  const strip = $("site-strip");
  clear(strip);
  const stale = !state.online;
  strip.dataset.stale = stale ? "true" : "false";
  for (const site of siteOrder()) {
    const status = state.sites.get(site) || "suspected";
    const here = site === state.site;
    strip.append(h("li", {
      class: `site-pill status-${status}`, "data-site": site, "data-status": status,
      title: `${here ? "This site" : "Site"} ${site}: ${STATUS_WORDS[status] || status}` +
             (stale ? " (last known; not connected to the chat server)" : ""),
    }, h("span", { class: "mark", "aria-hidden": "true" }, STATUS_MARKS[status] || "?"),
       h("span", { class: "site-name" }, site), here ? h("span", { class: "here" }, "(here)") : null,
       h("span", { class: "site-status" }, STATUS_WORDS[status] || status)));
  }
}

function renderRooms() {
  const list = $("room-list");
  clear(list);
  const rooms = joinedRooms();
  if (!rooms.length) list.append(h("li", { class: "room-none" }, "No rooms: join one below."));
  for (const r of rooms) {
    const current = r.name === state.current;
    list.append(h("li", { "data-room": r.name },
      h("button", {
        type: "button", class: `room-button${current ? " current" : ""}`, "aria-current": current ? "true" : null,
        onclick: () => { selectRoom(r.name); closeNav(); $("composer-input").focus(); },
      }, h("span", { class: "room-name" }, r.private ? `${r.name} 🔒` : r.name),
         r.unread ? h("span", { class: "unread", "aria-label": `${r.unread} unread` }, String(r.unread)) : null)));
  }
}

function renderPresence() {
  const list = $("presence-list");
  clear(list);
  let any = false;
  for (const site of siteOrder().concat([...state.presence.keys()].filter((s) => !state.sites.has(s)))) {
    const users = [...(state.presence.get(site) || [])].sort();
    const status = state.sites.get(site) || "suspected";
    for (const u of users) {
      any = true;
      list.append(h("li", { class: `person status-${status}`, "data-user": `${u}@${site}`,
                            title: `${u} at site ${site} (${status})` },
        h("span", { class: "mark", "aria-hidden": "true" }, STATUS_MARKS[status] || "?"), `${u}@${site}`));
    }
  }
  if (!any) list.append(h("li", { class: "room-none" }, "Nobody online."));
}

function renderTitle() {
  const total = joinedRooms().reduce((n, r) => n + r.unread, 0);
  document.title = `${total ? `(${total}) ` : ""}RCM chat${state.user ? ` · ${state.user}@${state.site}` : ""}`;
}

function renderRoomHead() {
  const r = state.current ? room(state.current) : null;
  $("room-title").textContent = r ? r.name : "No room";
  $("room-info").textContent = r ? (r.private ? `private: ${(r.members || []).join(", ")}` : "public room") : "";
  $("load-older").hidden = !(r && r.more);
  $("load-older").disabled = !!(r && r.loading);
  const empty = $("room-empty");
  const hasMessages = r && r.entries.length > 0;
  empty.hidden = !!hasMessages;
  empty.textContent = r ? "No messages yet." : "Join a room to start: type a name under Rooms, or /join ROOM.";
  $("composer-input").placeholder = r ? `Message ${r.name}, or /help for commands` : "/join ROOM to start";
}

function renderRoom() {
  renderRoomHead();
  const list = $("message-list");
  clear(list);
  const r = state.current ? room(state.current) : null;
  if (!r) return;
  for (const e of r.entries) {
    e.el = renderEntry(r, e);
    list.append(e.el);
  }
  scrollToBottom();
}

function refreshEntry(r, e) {
  if (!e.el) return;
  const el = renderEntry(r, e);
  e.el.replaceWith(el);
  e.el = el;
}

function fmtTime(t) {
  const d = new Date(t * 1000);
  return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
}

function renderEntry(r, e) {
  if (e.kind === "notice") {
    return h("li", { class: `notice ${e.cls}`.trim() }, h("span", { class: "notice-text" }, e.text));
  }
  if (e.kind === "pending") {
    const label = { sending: "sending…", queued: "waiting for the connection…", accepted: "accepted, in order soon…",
                    failed: `not sent: ${e.error}` }[e.state];
    return h("li", { class: `msg mine pending state-${e.state}`, "data-client-id": e.clientId },
      h("span", { class: "time" }, ""),
      h("span", { class: "author" }, `${state.user}@${state.site}`),
      h("span", { class: "text" }, e.text),
      h("span", { class: "meta" }, label,
        e.state === "failed" ? h("button", { type: "button", class: "retry", onclick: () => retrySay(r, e) }, "Retry") : null));
  }
  const f = e.frame;
  const mine = f.user === state.user && f.origin === state.site;
  const cls = ["msg"];
  if (f.late) cls.push("late");
  if (mine) cls.push("mine");
  const orderText = JSON.stringify(f.order);
  const receiptSites = [...(state.receipts.get(f.msg_id) || [])].sort();
  const skipped = state.skipped.get(f.msg_id) || [];
  return h("li", { class: cls.join(" "), "data-msg-id": f.msg_id, "data-order": orderText, "data-late": f.late ? "true" : "false" },
    h("time", { class: "time", datetime: new Date(f.sent_at * 1000).toISOString(),
                title: `sent ${new Date(f.sent_at * 1000).toLocaleString()} · ${f.msg_id} · order ${orderText}` }, fmtTime(f.sent_at)),
    h("span", { class: "author" }, `${f.user}@${f.origin}`),
    f.late ? h("span", { class: "late-badge", title: "Arrived after its place in the global order had passed; shown at its place." }, "late") : null,
    h("span", { class: "text" }, f.text),
    mine ? h("span", { class: "meta receipts", "data-receipts": receiptSites.join(","),
                       title: receiptSites.length ? `Delivered at ${receiptSites.join(", ")}` : "Not yet delivered elsewhere" },
      receiptSites.length ? `✓ ${receiptSites.join(" ")}` : "✓",
      skipped.length ? h("span", { class: "skipped" }, ` · not sent to ${skipped.join(", ")} (disconnected)`) : null) : null);
}

// --- scrolling ---------------------------------------------------------------------------------

function isNearBottom() {
  const box = $("messages");
  return box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM;
}

function scrollToBottom() {
  const box = $("messages");
  box.scrollTop = box.scrollHeight;
}

function loadOlder(limit = 50) {
  const r = state.current ? room(state.current) : null;
  if (!r || !r.more || r.loading) return;
  const oldest = r.entries.find((e) => e.kind === "message");
  r.loading = true;
  $("load-older").disabled = true;
  const req = { type: "history", room: r.name, limit };
  if (oldest) req.before = oldest.id;
  conn.request(req).catch((e) => { r.loading = false; notice(`Cannot load history: ${e.message}`, "error"); renderRoomHead(); });
}

// --- actions -----------------------------------------------------------------------------------

function selectRoom(name) {
  state.current = name;
  if (name) room(name).unread = 0;
  renderRooms();
  renderRoom();
  renderTitle();
}

function randomId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

function say(r, text) {
  state.seq += 1;
  const entry = { kind: "pending", group: 1, sub: 0, order: [], seq: state.seq, clientId: randomId(), text,
                  state: state.online ? "sending" : "queued", el: null };
  r.pending.set(entry.clientId, entry);
  insertEntry(r, entry);
  scrollToBottom();
  sendPending(r, entry);
}

function sendPending(r, entry) {
  conn.request({ type: "say", room: r.name, text: entry.text, client_id: entry.clientId }).catch((e) => {
    if (!r.pending.has(entry.clientId)) return;
    entry.state = "failed";
    entry.error = e.message;
    refreshEntry(r, entry);
  });
}

function retrySay(r, entry) {
  entry.state = state.online ? "sending" : "queued";
  refreshEntry(r, entry);
  sendPending(r, entry);
}

function joinRoom(name) {
  const r = room(name);
  if (r.joined) { selectRoom(name); return; }
  r.wanted = true;
  conn.request({ type: "join", room: name }).catch((e) => { r.wanted = false; notice(`Cannot join ${name}: ${e.message}`, "error"); });
}

function runCommand(name, args) {
  const r = state.current ? room(state.current) : null;
  switch (name) {
    case "join": return joinRoom(args[0]);
    case "leave": {
      const target = args[0] || (r && r.name);
      if (!target) return notice("Not in a room.");
      return conn.request({ type: "leave", room: target }).catch((e) => notice(`Cannot leave ${target}: ${e.message}`, "error"));
    }
    case "rooms": return conn.request({ type: "rooms" }).catch((e) => notice(`Cannot list rooms: ${e.message}`, "error"));
    case "create": {
      const [roomName, ...members] = args;
      room(roomName).wanted = true;
      return conn.request({ type: "create", room: roomName, members }).catch((e) => notice(`Cannot create ${roomName}: ${e.message}`, "error"));
    }
    case "history":
      if (!r) return notice("Not in a room.");
      if (!r.more) return notice("No older messages.");
      return loadOlder(args.length ? Number(args[0]) : 50);
    case "switch":
      if (!room(args[0]).joined) return notice(`Not in ${args[0]}: /join ${args[0]} first.`, "error");
      return selectRoom(args[0]);
    case "who": {
      const lines = [];
      for (const site of siteOrder()) {
        const users = [...(state.presence.get(site) || [])].sort();
        lines.push(`${site} (${state.sites.get(site)}): ${users.length ? users.join(", ") : "nobody"}`);
      }
      return notice(["Online:", ...lines].join("\n"), "listing");
    }
    case "sites":
      return notice(["Sites:", ...siteOrder().map((s) => `${s}: ${state.sites.get(s)}${s === state.site ? " (here)" : ""}`)].join("\n"), "listing");
    case "theme": return setTheme(args[0]);
    case "logout": return logout(args[0] === "all");
    case "help": return notice(["Commands:", ...COMMANDS.map(([u, d]) => `${u}  ${d}`),
      "Keys: Enter sends, Shift+Enter new line, Alt+↑/↓ previous/next room, Escape back to the message box."].join("\n"), "listing");
    default: return undefined;
  }
}

function submitComposer() {
  const input = $("composer-input");
  const parsed = parseInput(input.value);
  if (parsed.kind === "empty") return;
  if (parsed.kind === "error") { notice(parsed.message, "error"); return; }
  input.value = "";
  autosize();
  if (parsed.kind === "command") { runCommand(parsed.name, parsed.args); return; }
  const r = state.current ? room(state.current) : null;
  if (!r || !r.joined) { notice("Join a room first: /join ROOM", "error"); input.value = parsed.text; return; }
  say(r, parsed.text);
}

function autosize() {
  const input = $("composer-input");
  input.style.height = "auto";
  input.style.height = `${Math.min(input.scrollHeight, 160)}px`;
}

// --- login / logout ----------------------------------------------------------------------------

function showLogin(error) {
  $("chat-view").hidden = true;
  $("login-view").hidden = false;
  $("logout").hidden = true;
  $("nav-toggle").hidden = true;
  $("login-error").textContent = error || "";
  $("login-submit").disabled = false;
  setBanner(null);
  $("login-user").focus();
}

function showChat() {
  $("login-view").hidden = true;
  $("chat-view").hidden = false;
  $("logout").hidden = false;
  $("nav-toggle").hidden = false;
}

function resetState() {
  state.user = null;
  state.site = null;
  state.sites = new Map();
  state.presence = new Map();
  state.rooms = new Map();
  state.current = null;
  state.receipts = new Map();
  state.skipped = new Map();
  state.ackedIds = new Map();
  $("whoami").textContent = "";
}

/** Sign out: the connection tells the server (and forgets the session whatever it answers). */
function logout(all = false) {
  conn.logout({ all });
  resetState();
  renderAll();
  showLogin("");
}

async function onLogin(ev) {
  ev.preventDefault();                     // never a form submission: nothing goes into a URL
  const user = $("login-user").value.trim();
  const pw = $("login-password");
  if (!user || !pw.value) { $("login-error").textContent = "Give a user name and a password."; return; }
  $("login-submit").disabled = true;
  $("login-error").textContent = "";
  const password = pw.value;
  pw.value = "";
  resetState();
  try {
    await conn.login(user, password);
    $("composer-input").focus();
  } catch (e) {
    showLogin(e.code === "auth_failed" ? "Unknown user or wrong password." : e.message);
  }
}

// --- theme and layout --------------------------------------------------------------------------

function effectiveTheme() {
  const t = document.documentElement.dataset.theme;
  if (t === "light" || t === "dark") return t;
  return window.matchMedia("(prefers-color-scheme: dark)").matches ? "dark" : "light";
}

function setTheme(theme) {
  document.documentElement.dataset.theme = theme;
  try { localStorage.setItem("rcm-theme", theme); } catch (e) { /* storage may be off */ }
  renderThemeButton();
}

function renderThemeButton() {
  const dark = effectiveTheme() === "dark";
  const b = $("theme-toggle");
  b.textContent = dark ? "Light theme" : "Dark theme";
  b.setAttribute("aria-pressed", dark ? "true" : "false");
}

function openNav(open) {
  document.body.classList.toggle("nav-open", open);
  $("nav-toggle").setAttribute("aria-expanded", open ? "true" : "false");
  if (open) (document.querySelector("#room-list button") || $("join-input")).focus();
}

function closeNav() {
  if (document.body.classList.contains("nav-open")) openNav(false);
}

function announce(text) {
  const el = $("announce");
  el.textContent = "";
  el.textContent = text;
}

function cycleRoom(step) {
  const rooms = joinedRooms();
  if (!rooms.length) return;
  const i = rooms.findIndex((r) => r.name === state.current);
  const next = rooms[(i + step + rooms.length) % rooms.length];
  selectRoom(next.name);
  announce(`Room ${next.name}`);
}

function init() {
  try {
    const saved = localStorage.getItem("rcm-theme");
    if (saved === "light" || saved === "dark") document.documentElement.dataset.theme = saved;
  } catch (e) { /* storage may be off */ }
  renderThemeButton();
  window.matchMedia("(prefers-color-scheme: dark)").addEventListener("change", renderThemeButton);
  $("theme-toggle").addEventListener("click", () => setTheme(effectiveTheme() === "dark" ? "light" : "dark"));
  $("login-form").addEventListener("submit", onLogin);
  $("logout").addEventListener("click", () => logout(false));
  $("banner-retry").addEventListener("click", () => conn.retryNow());
  $("composer").addEventListener("submit", (ev) => { ev.preventDefault(); submitComposer(); });
  const input = $("composer-input");
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submitComposer(); }
  });
  input.addEventListener("input", autosize);
  $("join-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    const name = $("join-input").value.trim();
    if (!name) return;
    $("join-input").value = "";
    joinRoom(name);
    closeNav();
  });
  $("load-older").addEventListener("click", () => loadOlder());
  $("messages").addEventListener("scroll", () => { if ($("messages").scrollTop < 40) loadOlder(); });
  $("nav-toggle").addEventListener("click", () => openNav(!document.body.classList.contains("nav-open")));
  document.addEventListener("keydown", (ev) => {
    if (ev.altKey && (ev.key === "ArrowDown" || ev.key === "ArrowUp")) {
      ev.preventDefault();
      cycleRoom(ev.key === "ArrowDown" ? 1 : -1);
    } else if (ev.key === "Escape") {
      closeNav();
      if (!$("chat-view").hidden) input.focus();
    }
  });
  document.addEventListener("visibilitychange", () => {
    if (!document.hidden && state.current) { room(state.current).unread = 0; renderRooms(); renderTitle(); }
  });
  window.matchMedia(NARROW).addEventListener("change", () => closeNav());
  showLogin("");
}

init();
