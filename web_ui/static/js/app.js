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

function init() {
  const dispatch = (event) => store.dispatch(event);
  const view = createView(dispatch);
  const conn = new ChatConnection({
    onFrame: (frame) => dispatch({ type: "frame", frame }),
    onState: (kind, info) => dispatch({ type: "conn", kind, info }),
  });
  const storage = (() => { try { return localStorage; } catch (e) { return null; } })();
  const perform = createEffects({ conn, view, dispatch, storage });
  const initial = initialState({ theme: savedTheme(), systemDark: window.matchMedia(DARK).matches, hidden: document.hidden });
  const store = createStore(reduce, initial, { render: view.render, perform });
  view.render(null, initial);
  view.focus("login-user");

  // Handlers: read the page, dispatch. (Closing the tab sends nothing: only "Log out" ends the session.)
  $("login-form").addEventListener("submit", (ev) => {
    ev.preventDefault();                  // never a form submission: nothing goes into a URL
    dispatch({ type: "login-submit", user: $("login-user").value, password: $("login-password").value });
  });
  $("logout").addEventListener("click", () => dispatch({ type: "logout", all: false }));
  $("theme-toggle").addEventListener("click", () => dispatch({ type: "toggle-theme" }));
  window.matchMedia(DARK).addEventListener("change", (ev) => dispatch({ type: "system-theme", dark: ev.matches }));
  $("banner-retry").addEventListener("click", () => dispatch({ type: "retry-now" }));
  const input = $("composer-input");
  const submit = () => dispatch({ type: "submit", line: input.value, clientId: randomId() });
  $("composer").addEventListener("submit", (ev) => { ev.preventDefault(); submit(); });
  input.addEventListener("keydown", (ev) => {
    if (ev.key === "Enter" && !ev.shiftKey && !ev.isComposing) { ev.preventDefault(); submit(); }
  });
  input.addEventListener("input", view.autosize);
  $("join-form").addEventListener("submit", (ev) => {
    ev.preventDefault();
    dispatch({ type: "join-submit", room: $("join-input").value });
  });
  $("load-older").addEventListener("click", () => dispatch({ type: "load-older" }));
  $("messages").addEventListener("scroll", () => { if ($("messages").scrollTop < NEAR_TOP) dispatch({ type: "load-older" }); });
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
