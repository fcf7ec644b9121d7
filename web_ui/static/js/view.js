// The view: draws the state (state.js) into the page, and nothing else.
//
// Theory of operation
// -------------------
// `render(prev, next)` compares the two states part by part (the reducer
// replaces what changed and shares what didn't, so `!==` says what to redraw)
// and updates only those parts of the page. The message list of the room shown
// is kept, not rebuilt: each entry's element is remembered by the entry's key
// and reused while the entry object is the same, a changed entry (a receipt, an
// ack) gets a new element, and new entries are inserted at their place, so a
// late message appears where it belongs without redrawing the room. Scrolling
// follows the list when it was at the bottom, keeps the page in place when
// older history comes in, and goes to the bottom when the user sends.
//
// A jump (a search result, a reply's quote, an alert's Show) scrolls the message it
// names into view and marks it, once per jump (`state.jump.seq`).
//
// The positions panel (a plot and a table of units, the report form's messages) is
// drawn by view_positions.js; the classification banners and the label menus by view_labels.js.
//
// The event handlers created here and in view_entries.js / view_panels.js (a room
// button, Retry, Reply, Acknowledge, a result, a directory row) only dispatch.
// User text only ever reaches the page as text nodes (dom.js).

import { clear, h } from "./dom.js";
import { alertList, currentRoom, effectiveTheme, isOnline, joinedRooms, siteOrder, siteWords, unreadTotal } from "./state.js";
import { CONNECTED, DISCONNECTED, statusOf, SUSPECTED, UNKNOWN } from "./status.js";
import { entryElement } from "./view_entries.js";
import { renderAlerts, renderDirectory, renderReply, renderSearch } from "./view_panels.js";
import { createPositionsView } from "./view_positions.js";
import { renderCreateForm, renderLabels } from "./view_labels.js";
import { plural } from "./words.js";

const $ = (id) => document.getElementById(id);
// A site no status has been reported for yet is "unknown" (status.js), in muted grey, as in the terminal clients.
const STATUS_MARKS = { [CONNECTED]: "●", [SUSPECTED]: "◐", [DISCONNECTED]: "○", [UNKNOWN]: "?" };
const CONN_WORDS = { online: "Online", connecting: "Connecting…", reconnecting: "Reconnecting…", expired: "Signed out",
                     closed: "" };
const NEAR_BOTTOM = 80;     // px: closer than this to the bottom, new messages keep the view at the bottom

export function createView(dispatch) {
  let shownRoom;              // the room whose entries are in the list (undefined: nothing drawn yet)
  let shownUser;
  let elements = new Map();   // entry key -> {entry, el}
  const highlighted = new Set();  // keys of late messages already highlighted once
  let jumped = 0;             // the seq of the last jump done
  let joinedKey = null;       // the joined rooms the directory was last drawn with
  let labelFloor = null;      // the shown room's floor the label bar was last drawn with
  let last = null;            // the state last drawn (refreshAges draws its directory again)
  const positions = createPositionsView(dispatch);

  function render(prev, s) {
    last = s;
    const all = prev === null;
    const changed = (...keys) => all || keys.some((k) => prev[k] !== s[k]);
    if (changed("screen", "login")) renderScreen(s);
    if (changed("login", "site")) renderLoginSite(s);
    if (changed("theme", "systemDark")) renderTheme(s);
    if (changed("conn", "user")) renderConn(s);
    if (changed("banner", "conn")) renderBanner(s);
    if (changed("sites", "site", "conn")) renderSites(s);
    if (changed("rooms", "current")) renderRooms(s);
    if (changed("presence", "sites", "site")) renderPresence(s);
    if (changed("rooms", "user", "site", "alerts")) renderTitle(s);
    if (changed("user", "site")) renderWhoami(s);
    if (changed("rooms", "current")) renderRoomHead(s);
    if (changed("rooms", "current", "user", "site", "jump")) renderMessages(all ? null : prev, s);
    if (changed("navOpen")) renderNav(s);
    const joinedNow = joinedRooms(s).map((r) => r.name).join("\n");   // the directory shows joined flags only
    if (changed("directory", "directoryFilter") || joinedNow !== joinedKey) {
      joinedKey = joinedNow;
      renderDirectory(s, dispatch);
    }
    if (changed("search", "user", "site")) renderSearch(s, dispatch);
    if (changed("alerts")) renderAlerts(s, dispatch);
    if (changed("replyTo")) renderReply(s);
    if (changed("precedence")) $("precedence").value = s.precedence;
    if (changed("expiresIn")) $("expires-in").value = s.expiresIn === null ? "" : String(s.expiresIn);
    if (changed("positions", "sites", "site", "user")) positions.render(s);
    // The label bar depends on the shown room's floor, not on every room edit (each message makes a new map).
    const floor = s.current && s.rooms.get(s.current) ? s.rooms.get(s.current).label : null;
    if (changed("labels", "current", "sendLabel") || floor !== labelFloor) {
      labelFloor = floor;
      renderLabels(s);
    }
    if (changed("labels")) renderCreateForm(s);
  }

  // --- screens, connection, banner ---------------------------------------------------------

  function renderScreen(s) {
    const chat = s.screen === "chat";
    $("login-view").hidden = chat;
    $("chat-view").hidden = !chat;
    $("logout").hidden = !chat;
    $("nav-toggle").hidden = !chat;
    $("positions-toggle").hidden = !chat;
    $("login-error").textContent = s.login.error;
    $("login-note").textContent = s.login.note;
    $("login-submit").disabled = s.login.busy;
  }

  /** The sign-in form names the site one signs in to (the server's /health, or the site one was signed in to). */
  function renderLoginSite(s) {
    const site = s.login.site || s.site;
    const el = $("login-site");
    clear(el);
    if (site) el.append("Sign in to site ", h("strong", { class: "site-name" }, site), ".");
    else el.append("Sign in with your account at this site.");
  }

  /** Redraw the directory, so that its "5 min ago" stay true between the server's pushes. */
  function refreshAges() {
    if (last && last.screen === "chat" && last.directory) renderDirectory(last, dispatch);
  }

  function renderTheme(s) {
    if (s.theme) document.documentElement.dataset.theme = s.theme;
    const dark = effectiveTheme(s) === "dark";
    const b = $("theme-toggle");
    b.textContent = dark ? "Light theme" : "Dark theme";
    b.setAttribute("aria-pressed", dark ? "true" : "false");
  }

  function renderConn(s) {
    const el = $("conn-state");
    el.dataset.state = s.conn.kind;
    if (s.conn.kind in CONN_WORDS) el.textContent = CONN_WORDS[s.conn.kind];
    document.body.classList.toggle("offline", !isOnline(s) && s.user !== null);
    $("banner-retry").hidden = s.conn.kind !== "reconnecting";
  }

  function renderBanner(s) {
    const b = $("banner");
    if (!s.banner) { b.hidden = true; return; }
    $("banner-text").textContent = s.banner.text;
    b.dataset.kind = s.banner.kind;
    b.hidden = false;
  }

  function renderNav(s) {
    document.body.classList.toggle("nav-open", s.navOpen);
    $("nav-toggle").setAttribute("aria-expanded", s.navOpen ? "true" : "false");
  }

  // --- side panels ---------------------------------------------------------------------------

  function renderSites(s) {
    const strip = $("site-strip");
    clear(strip);
    const stale = !isOnline(s);
    strip.dataset.stale = stale ? "true" : "false";
    for (const site of siteOrder(s)) {
      const status = statusOf(s.sites.get(site));
      const here = site === s.site;
      const via = status === CONNECTED ? s.via.get(site) : undefined;
      const chatDown = s.chatDown.has(site);
      strip.append(h("li", {
        class: `site-pill status-${status}${via ? " relayed" : ""}${chatDown ? " chat-down" : ""}`, "data-site": site,
        "data-status": status,
        title: `${here ? "This site" : "Site"} ${site}: ${status}` +
               (via ? ` through ${via} (its direct link is down; messages are relayed)` : "") +
               (chatDown ? "; its chat server is down: nobody there is online, and what is said reaches them " +
                           "when it is back" : "") +
               (stale ? " (last known; not connected to the chat server)" : ""),
      }, h("span", { class: "mark", "aria-hidden": "true" }, STATUS_MARKS[status]),
         h("span", { class: "site-name" }, site), here ? h("span", { class: "here" }, "(here)") : null,
         h("span", { class: "site-status" }, siteWords(s, site))));
    }
  }

  function renderRooms(s) {
    const list = $("room-list");
    clear(list);
    const rooms = joinedRooms(s);
    if (!rooms.length) list.append(h("li", { class: "room-none" }, "No rooms: join one below."));
    for (const r of rooms) {
      const current = r.name === s.current;
      list.append(h("li", { "data-room": r.name },
        h("button", {
          type: "button", class: `room-button${current ? " current" : ""}`, "aria-current": current ? "true" : null,
          onclick: () => dispatch({ type: "select-room", room: r.name }),
        }, h("span", { class: "room-name" }, r.name,
             r.private ? h("span", { class: "lock", role: "img", "aria-label": "private", title: "Private room" }) : null),
           h("span", { class: "badges" },
             r.mentions ? h("span", { class: "mentions", "aria-label": `${r.mentions} mentioning you`,
                                      title: `${plural(r.mentions, "message")} naming you` }, `@${r.mentions}`) : null,
             r.unread ? h("span", { class: "unread", "aria-label": `${r.unread} unread` }, String(r.unread)) : null))));
    }
  }

  function renderPresence(s) {
    const list = $("presence-list");
    clear(list);
    let any = false;
    for (const site of siteOrder(s).concat([...s.presence.keys()].filter((x) => !s.sites.has(x)))) {
      const users = [...(s.presence.get(site) || [])].sort();
      const status = statusOf(s.sites.get(site));
      for (const u of users) {
        any = true;
        list.append(h("li", { class: `person status-${status}`, "data-user": `${u}@${site}`,
                              title: `${u} at site ${site} (${status})` },
          h("span", { class: "mark", "aria-hidden": "true" }, STATUS_MARKS[status]), `${u}@${site}`));
      }
    }
    if (!any) list.append(h("li", { class: "room-none" }, "Nobody online."));
  }

  function renderTitle(s) {
    const total = unreadTotal(s);
    const alerts = alertList(s);
    const alert = alerts.length ? `${alerts[0].precedence.toUpperCase()} · ` : "";
    document.title = `${alert}${total ? `(${total}) ` : ""}RCM chat${s.user ? ` · ${s.user}@${s.site}` : ""}`;
  }

  function renderWhoami(s) {
    $("whoami").textContent = s.user ? `${s.user}@${s.site}` : "";
    $("whoami").title = s.user ? `Signed in as ${s.user} at site ${s.site}` : "";
  }

  function renderRoomHead(s) {
    const r = currentRoom(s);
    $("room-title").textContent = r ? r.name : "No room";
    $("room-info").textContent = !r ? "" : r.private ? `private: ${(r.members || []).join(", ")}`
                                         : r.joined ? "public room" : "public room · preview: join it to write here";
    $("room-join").hidden = !r || r.joined;
    $("load-older").hidden = !(r && r.more);
    $("load-older").disabled = !!(r && r.loading);
    const empty = $("room-empty");
    empty.hidden = !!(r && r.entries.length > 0);
    empty.textContent = r ? "No messages yet." : "Join a room to start: pick one in the Directory, or /join ROOM.";
    $("composer-input").placeholder = !r ? "/join ROOM to start" : r.joined ? `Message ${r.name}, or /help for commands`
                                                                         : `Join ${r.name} to write here`;
  }

  // --- the message list ----------------------------------------------------------------------

  function renderMessages(prev, s) {
    const r = currentRoom(s);
    const list = $("message-list");
    const was = prev && prev.rooms.get(s.current);
    if (prev === null || shownRoom !== s.current || shownUser !== s.user || (was && r && was.joined !== r.joined)) {
      clear(list);
      elements = new Map();
      shownRoom = s.current;
      shownUser = s.user;
      if (r) place(list, r, s);
      scrollToBottom();
      applyJump(s);
      return;
    }
    const before = prev.rooms.get(s.current);
    if (r && !(before && before.entries === r.entries)) {
      const box = $("messages");
      const atBottom = isNearBottom();
      const fromBottom = box.scrollHeight - box.scrollTop;
      const sent = r.entries.some((e) => e.kind === "pending" && !elements.has(e.key));
      place(list, r, s);
      if (before && before.loading && !r.loading) box.scrollTop = box.scrollHeight - fromBottom;   // older history: stay put
      else if (sent || atBottom) scrollToBottom();
    }
    applyJump(s);
  }

  /** Scroll to the message of the latest jump (once), and mark it. */
  function applyJump(s) {
    const j = s.jump;
    if (!j || j.loading || j.seq === jumped || j.room !== s.current) return;
    const found = elements.get(`m:${j.msgId}`);
    if (!found) return;
    jumped = j.seq;
    found.el.classList.remove("jumped");
    void found.el.offsetWidth;                  // restart the highlight animation
    found.el.classList.add("jumped");
    found.el.scrollIntoView({ block: "center" });
  }

  /** Make the list show `room.entries`, reusing the element of every entry that did not change. */
  function place(list, room, s) {
    const reused = new Map();
    for (const e of room.entries) {
      const old = elements.get(e.key);
      if (old && old.entry === e) reused.set(e.key, old.el);
    }
    for (const [key, old] of elements) if (reused.get(key) !== old.el) old.el.remove();
    elements = new Map();
    let cursor = list.firstChild;
    for (const e of room.entries) {
      const el = reused.get(e.key) || entryElement(dispatch, room, e, { user: s.user, site: s.site, highlighted,
                                                                        labels: s.labels });
      elements.set(e.key, { entry: e, el });
      if (el === cursor) cursor = cursor.nextSibling;
      else list.insertBefore(el, cursor);
    }
  }

  function isNearBottom() {
    const box = $("messages");
    return box.scrollHeight - box.scrollTop - box.clientHeight < NEAR_BOTTOM;
  }

  function scrollToBottom() {
    const box = $("messages");
    box.scrollTop = box.scrollHeight;
  }

  // --- what effects.js asks of the page ------------------------------------------------------

  function focus(target) {
    if (target === "composer") $("composer-input").focus();
    else if (target === "login-user") $("login-user").focus();
    else if (target === "nav") (document.querySelector("#room-list button") || $("join-input")).focus();
    else if (target === "positions") $("positions-panel").focus();
    else if (["position-lat", "position-lon", "position-unit"].includes(target)) $(target).focus();
  }

  function announce(text) {
    const el = $("announce");
    el.textContent = "";
    el.textContent = text;
  }

  function clearInput(id) {
    const el = $(id);
    el.value = "";
    if (id === "composer-input") autosize();
  }

  function autosize() {
    const input = $("composer-input");
    input.style.height = "auto";
    input.style.height = `${Math.min(input.scrollHeight, 160)}px`;
  }

  return { render, focus, announce, clearInput, autosize, isNearBottom, refreshAges };
}
