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
// The few event handlers created here (a room button, Retry) only dispatch.
// User text only ever reaches the page as text nodes (dom.js).

import { clear, h } from "./dom.js";
import { currentRoom, effectiveTheme, isOnline, joinedRooms, siteOrder, unreadTotal } from "./state.js";

const $ = (id) => document.getElementById(id);
const STATUS_WORDS = { connected: "connected", suspected: "suspected", disconnected: "disconnected" };
const STATUS_MARKS = { connected: "●", suspected: "◐", disconnected: "○" };
const CONN_WORDS = { online: "Online", connecting: "Connecting…", reconnecting: "Reconnecting…", expired: "Signed out",
                     closed: "" };
const NEAR_BOTTOM = 80;     // px: closer than this to the bottom, new messages keep the view at the bottom
const PENDING_LABELS = { sending: "sending…", queued: "waiting for the connection…", accepted: "accepted, in order soon…" };

export function createView(dispatch) {
  let shownRoom;              // the room whose entries are in the list (undefined: nothing drawn yet)
  let shownUser;
  let elements = new Map();   // entry key -> {entry, el}
  const highlighted = new Set();  // keys of late messages already highlighted once

  function render(prev, s) {
    const all = prev === null;
    const changed = (...keys) => all || keys.some((k) => prev[k] !== s[k]);
    if (changed("screen", "login")) renderScreen(s);
    if (changed("theme", "systemDark")) renderTheme(s);
    if (changed("conn", "user")) renderConn(s);
    if (changed("banner", "conn")) renderBanner(s);
    if (changed("sites", "site", "conn")) renderSites(s);
    if (changed("rooms", "current")) renderRooms(s);
    if (changed("presence", "sites", "site")) renderPresence(s);
    if (changed("rooms", "user", "site")) renderTitle(s);
    if (changed("user", "site")) renderWhoami(s);
    if (changed("rooms", "current")) renderRoomHead(s);
    if (changed("rooms", "current", "user", "site")) renderMessages(all ? null : prev, s);
    if (changed("navOpen")) renderNav(s);
  }

  // --- screens, connection, banner ---------------------------------------------------------

  function renderScreen(s) {
    const chat = s.screen === "chat";
    $("login-view").hidden = chat;
    $("chat-view").hidden = !chat;
    $("logout").hidden = !chat;
    $("nav-toggle").hidden = !chat;
    $("login-error").textContent = s.login.error;
    $("login-note").textContent = s.login.note;
    $("login-submit").disabled = s.login.busy;
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
      const status = s.sites.get(site) || "suspected";
      const here = site === s.site;
      strip.append(h("li", {
        class: `site-pill status-${status}`, "data-site": site, "data-status": status,
        title: `${here ? "This site" : "Site"} ${site}: ${STATUS_WORDS[status] || status}` +
               (stale ? " (last known; not connected to the chat server)" : ""),
      }, h("span", { class: "mark", "aria-hidden": "true" }, STATUS_MARKS[status] || "?"),
         h("span", { class: "site-name" }, site), here ? h("span", { class: "here" }, "(here)") : null,
         h("span", { class: "site-status" }, STATUS_WORDS[status] || status)));
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
        }, h("span", { class: "room-name" }, r.private ? `${r.name} 🔒` : r.name),
           r.unread ? h("span", { class: "unread", "aria-label": `${r.unread} unread` }, String(r.unread)) : null)));
    }
  }

  function renderPresence(s) {
    const list = $("presence-list");
    clear(list);
    let any = false;
    for (const site of siteOrder(s).concat([...s.presence.keys()].filter((x) => !s.sites.has(x)))) {
      const users = [...(s.presence.get(site) || [])].sort();
      const status = s.sites.get(site) || "suspected";
      for (const u of users) {
        any = true;
        list.append(h("li", { class: `person status-${status}`, "data-user": `${u}@${site}`,
                              title: `${u} at site ${site} (${status})` },
          h("span", { class: "mark", "aria-hidden": "true" }, STATUS_MARKS[status] || "?"), `${u}@${site}`));
      }
    }
    if (!any) list.append(h("li", { class: "room-none" }, "Nobody online."));
  }

  function renderTitle(s) {
    const total = unreadTotal(s);
    document.title = `${total ? `(${total}) ` : ""}RCM chat${s.user ? ` · ${s.user}@${s.site}` : ""}`;
  }

  function renderWhoami(s) {
    $("whoami").textContent = s.user ? `${s.user}@${s.site}` : "";
    $("whoami").title = s.user ? `Signed in as ${s.user} at site ${s.site}` : "";
  }

  function renderRoomHead(s) {
    const r = currentRoom(s);
    $("room-title").textContent = r ? r.name : "No room";
    $("room-info").textContent = r ? (r.private ? `private: ${(r.members || []).join(", ")}` : "public room") : "";
    $("load-older").hidden = !(r && r.more);
    $("load-older").disabled = !!(r && r.loading);
    const empty = $("room-empty");
    empty.hidden = !!(r && r.entries.length > 0);
    empty.textContent = r ? "No messages yet." : "Join a room to start: type a name under Rooms, or /join ROOM.";
    $("composer-input").placeholder = r ? `Message ${r.name}, or /help for commands` : "/join ROOM to start";
  }

  // --- the message list ----------------------------------------------------------------------

  function renderMessages(prev, s) {
    const r = currentRoom(s);
    const list = $("message-list");
    if (prev === null || shownRoom !== s.current || shownUser !== s.user) {
      clear(list);
      elements = new Map();
      shownRoom = s.current;
      shownUser = s.user;
      if (r) place(list, r);
      scrollToBottom();
      return;
    }
    const before = prev.rooms.get(s.current);
    if (!r || (before && before.entries === r.entries)) return;
    const box = $("messages");
    const atBottom = isNearBottom();
    const fromBottom = box.scrollHeight - box.scrollTop;
    const sent = r.entries.some((e) => e.kind === "pending" && !elements.has(e.key));
    place(list, r);
    if (before && before.loading && !r.loading) box.scrollTop = box.scrollHeight - fromBottom;   // older history: stay put
    else if (sent || atBottom) scrollToBottom();
  }

  /** Make the list show `room.entries`, reusing the element of every entry that did not change. */
  function place(list, room) {
    const reused = new Map();
    for (const e of room.entries) {
      const old = elements.get(e.key);
      if (old && old.entry === e) reused.set(e.key, old.el);
    }
    for (const [key, old] of elements) if (reused.get(key) !== old.el) old.el.remove();
    elements = new Map();
    let cursor = list.firstChild;
    for (const e of room.entries) {
      const el = reused.get(e.key) || entryElement(room.name, e);
      elements.set(e.key, { entry: e, el });
      if (el === cursor) cursor = cursor.nextSibling;
      else list.insertBefore(el, cursor);
    }
  }

  function entryElement(roomName, e) {
    if (e.kind === "notice") {
      return h("li", { class: `notice ${e.cls}`.trim() }, h("span", { class: "notice-text" }, e.text));
    }
    if (e.kind === "pending") {
      const label = e.state === "failed" ? `not sent: ${e.error}` : PENDING_LABELS[e.state];
      return h("li", { class: `msg mine pending state-${e.state}`, "data-client-id": e.clientId },
        h("span", { class: "time" }, ""),
        h("span", { class: "author" }, e.author),
        h("span", { class: "text" }, e.text),
        h("span", { class: "meta" }, label,
          e.state === "failed" ? h("button", { type: "button", class: "retry",
                                               onclick: () => dispatch({ type: "retry", room: roomName, clientId: e.clientId }) },
                                   "Retry") : null));
    }
    const f = e.frame;
    const cls = ["msg"];
    if (f.late) cls.push("late");
    if (e.mine) cls.push("mine");
    if (e.placed && !highlighted.has(e.key)) {
      highlighted.add(e.key);
      cls.push("just-placed");
    }
    const orderText = JSON.stringify(f.order);
    const sent = new Date(f.sent_at * 1000);
    return h("li", { class: cls.join(" "), "data-msg-id": f.msg_id, "data-order": orderText, "data-late": f.late ? "true" : "false" },
      h("time", { class: "time", datetime: sent.toISOString(), title: `sent ${sent.toLocaleString()} · ${f.msg_id} · order ${orderText}` },
        fmtTime(sent)),
      h("span", { class: "author" }, `${f.user}@${f.origin}`),
      f.late ? h("span", { class: "late-badge", title: "Arrived after its place in the global order had passed; shown at its place." }, "late") : null,
      h("span", { class: "text" }, f.text),
      e.mine ? h("span", { class: "meta receipts", "data-receipts": e.receipts.join(","),
                           title: e.receipts.length ? `Delivered at ${e.receipts.join(", ")}` : "Not yet delivered elsewhere" },
        e.receipts.length ? `✓ ${e.receipts.join(" ")}` : "✓",
        e.skipped.length ? h("span", { class: "skipped" }, ` · not sent to ${e.skipped.join(", ")} (disconnected)`) : null) : null);
  }

  function fmtTime(d) {
    return d.toLocaleTimeString([], { hour: "2-digit", minute: "2-digit", second: "2-digit", hour12: false });
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

  return { render, focus, announce, clearInput, autosize };
}
