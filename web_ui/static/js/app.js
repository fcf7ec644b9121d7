// The browser client, wired together: state (state.js), view (view.js), effects (effects.js).
//
// Theory of operation
// -------------------
// Everything that happens becomes an event for `dispatch`: a server frame or a
// change of the connection (connection.js), or something the user did, read off
// the page by the handlers below. The store runs the event through the pure
// reducer (`reduce(state, event)`), the view draws the new state, and the
// effects layer performs what the step asked for (send a request, log in or out,
// store the theme, move the focus). Handlers here read the page and dispatch;
// they never change the state, send, or draw themselves.
//
// User text only ever reaches the page as text nodes (dom.js); there is no
// HTML parser (no inner/outer-HTML assignment, no markup insertion) anywhere in the client.

import { ChatConnection } from "./connection.js";
import { createEffects, createStore } from "./effects.js";
import { initialState, reduce } from "./state.js";
import { createView } from "./view.js";

const $ = (id) => document.getElementById(id);
const NARROW = "(max-width: 760px)";
const DARK = "(prefers-color-scheme: dark)";
const NEAR_TOP = 40;        // px: scrolled closer than this to the top, older messages are fetched
const USER_SCROLL_MS = 1000;  // a scroll this soon after the user's wheel, touch, key or click is theirs
const ASKED = "rcm-notify-asked";   // local storage: notifications were asked for once
const AGES_EVERY = 30000;   // ms between redrawing the directory's "last message" ages

function savedTheme() {
  try {
    const t = localStorage.getItem("rcm-theme");
    return t === "light" || t === "dark" ? t : null;
  } catch (e) {
    return null;                          // storage may be off
  }
}

function randomId() {
  const bytes = new Uint8Array(12);
  crypto.getRandomValues(bytes);
  return [...bytes].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/** Ask once (at the first sign-in, a user gesture) whether the page may raise notifications. */
function askNotificationsOnce() {
  if (typeof Notification === "undefined" || Notification.permission !== "default") return;
  try {
    if (localStorage.getItem(ASKED)) return;
    localStorage.setItem(ASKED, "1");
  } catch (e) { /* storage off: ask at each sign-in while undecided */ }
  try { Promise.resolve(Notification.requestPermission()).catch(() => {}); } catch (e) { /* unsupported */ }
}

/** Show a notification (mentions, FLASH/IMMEDIATE alerts) if the user allowed them; a click shows the message. */
function notifier(dispatch) {
  return (n) => {
    if (typeof Notification === "undefined" || Notification.permission !== "granted") return;
    const note = new Notification(n.title, { body: n.body, tag: n.tag, renotify: true, requireInteraction: !!n.urgent });
    note.onclick = () => {
      window.focus();
      if (n.room && n.msgId) dispatch({ type: "jump", room: n.room, msgId: n.msgId });
      note.close();
    };
  };
}

function init() {
  const dispatch = (event) => store.dispatch(event);
  const view = createView(dispatch);
  const conn = new ChatConnection({
    onFrame: (frame) => dispatch({ type: "frame", frame, now: Date.now() / 1000 }),
    onState: (kind, info) => dispatch({ type: "conn", kind, info }),
  });
  const storage = (() => { try { return localStorage; } catch (e) { return null; } })();
  const perform = createEffects({ conn, view, dispatch, storage, notifier: notifier(dispatch) });
  const initial = initialState({ theme: savedTheme(), systemDark: window.matchMedia(DARK).matches, hidden: document.hidden });
  // After every drawing, tell the reducer when the message list reached (or left) its bottom: reading marks rooms read.
  let atBottom = true;
  const reportViewport = () => {
    const now = view.isNearBottom();
    if (now !== atBottom) { atBottom = now; dispatch({ type: "viewport", atBottom: now }); }
  };
  const store = createStore(reduce, initial, { render: (prev, next) => { view.render(prev, next); reportViewport(); }, perform });
  view.render(null, initial);
  view.focus("login-user");
  dispatch({ type: "ask-site" });
  setInterval(view.refreshAges, AGES_EVERY);          // "5 min ago" in the directory stays true between pushes
  const now = () => Date.now() / 1000;

  // Handlers: read the page, dispatch. (Closing the tab sends nothing: only "Log out" ends the session.)
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();                  // never a form submission: nothing goes into a URL
    askNotificationsOnce();
    dispatch({ type: "login-submit", user: $("login-user").value, password: $("login-password").value });
  });
  $("logout").addEventListener("click", () => dispatch({ type: "logout", all: false }));
  $("theme-toggle").addEventListener("click", () => dispatch({ type: "toggle-theme" }));
  window.matchMedia(DARK).addEventListener("change", (ev) => dispatch({ type: "system-theme", dark: ev.matches }));
  $("banner-retry").addEventListener("click", () => dispatch({ type: "retry-now" }));
  const input = $("composer-input");
  const submit = () => dispatch({ type: "submit", line: input.value, clientId: randomId(), now: now() });
  $("composer").addEventListener("submit", (ev) => { ev.preventDefault(); submit(); });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submit(); }
  });
  input.addEventListener("input", view.autosize);
  $("join-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    dispatch({ type: "join-submit", room: $("join-input").value });
  });
  $("join-input").addEventListener("input", () => dispatch({ type: "directory-filter", text: $("join-input").value }));
  $("directory-refresh").addEventListener("click", () => dispatch({ type: "directory", now: now() }));
  $("room-join").addEventListener("click", () => dispatch({ type: "join", room: store.getState().current }));
  $("search-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    dispatch({ type: "search-submit", text: $("search-input").value });
  });
  $("search-close").addEventListener("click", () => dispatch({ type: "search-close" }));
  $("reply-cancel").addEventListener("click", () => dispatch({ type: "reply-cancel" }));
  $("precedence").addEventListener("change", () => dispatch({ type: "precedence", value: $("precedence").value }));
  $("send-label").addEventListener("change", () => dispatch({ type: "send-label", value: $("send-label").value }));
  $("create-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    dispatch({ type: "create-submit", room: $("create-room").value, label: $("create-label").value,
               members: $("create-members").value });
  });
  $("expires-in").addEventListener("change", () => dispatch({ type: "expires-in", value: $("expires-in").value ? Number($("expires-in").value) : null }));
  $("load-older").addEventListener("click", () => dispatch({ type: "load-older" }));
  $("positions-toggle").addEventListener("click", () => dispatch({ type: "positions-show", on: !store.getState().positions.shown }));
  $("positions-close").addEventListener("click", () => dispatch({ type: "positions-show", on: false }));
  $("position-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    dispatch({ type: "position-submit", lat: $("position-lat").value, lon: $("position-lon").value,
               unit: $("position-unit").value, now: now() });
  });
  $("position-locate").addEventListener("click", () => dispatch({ type: "locate", unit: $("position-unit").value }));
  // Older history comes by itself only when the user scrolls to the top (wheel, touch, keys, the
  // scroll bar): a render that moves the list (a room switch empties it for a moment) fetches nothing.
  let userScrolledAt = -Infinity;
  for (const kind of ["wheel", "touchmove", "keydown", "mousedown"]) {
    $("messages").addEventListener(kind, () => { userScrolledAt = performance.now(); }, { passive: true });
  }
  $("messages").addEventListener("scroll", () => {
    const byUser = performance.now() - userScrolledAt < USER_SCROLL_MS;
    if (byUser && $("messages").scrollTop < NEAR_TOP) dispatch({ type: "load-older" });
    reportViewport();
  });
  $("nav-toggle").addEventListener("click", () => dispatch({ type: "nav", open: !store.getState().navOpen }));
  document.addEventListener("keydown", (ev) => {
    if (ev.altKey && (ev.key === "ArrowDown" || ev.key === "ArrowUp")) {
      ev.preventDefault();
      dispatch({ type: "cycle-room", step: ev.key === "ArrowDown" ? 1 : -1 });
    } else if (ev.key === "Escape") {
      dispatch({ type: "escape" });
    }
  });
  document.addEventListener("visibilitychange", () => dispatch({ type: "visibility", hidden: document.hidden }));
  window.matchMedia(NARROW).addEventListener("change", () => dispatch({ type: "nav", open: false }));
}

init();
