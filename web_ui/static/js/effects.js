// The effects layer: performs what a reducer step asked for (state.js `effects`), and
// turns what comes back (replies, refusals, connection changes, timer ticks) into events again.
//
// It is the only code that talks to the connection (connection.js), the browser's
// storage, its notifications or its timers; the page itself is drawn by view.js, whose
// focus/announce/clear helpers it calls.
//
// - `request`: sends the frame; a refusal comes back as the `failed` event; with `reply`,
//   the reply comes back as that event (and not as a frame).
// - `mark-read`: coalesced per room, sent at most every MARK_READ_DELAY ms with the latest order.
// - `notify`: a browser notification, when the user allowed them (`notifier`).
// - `clock`: while on, a `tick` event with the time (`now`, in ms) every second (repeating alerts, positions' ages
//   and expiry).
// - `locate`: the browser's location (`geolocation`, injectable: headless tests have none), once; it comes back
//   as `located` {lat, lon, alt, course, speed, accuracy, at, unit, now}, or `locate-failed` {reason, message}
//   (reason: unsupported | insecure | denied | unavailable | timeout; the reducer words it).
// - `ask-site`: the chat server's `/health` names its site (anyone may read that much); `site-info` carries it
//   back, so the sign-in form says which site one signs in to.

export const MARK_READ_DELAY = 250;     // ms: read markers of a burst of messages go out as one
const TICK = 1000;                      // ms between ticks while alerts are outstanding or positions are shown
export const LOCATE_OPTIONS = { enableHighAccuracy: true, timeout: 20000, maximumAge: 30000 };
const LOCATE_REASONS = { 1: "denied", 2: "unavailable", 3: "timeout" };   // GeolocationPositionError codes

export function createEffects({ conn, view, dispatch, storage, notifier = () => {}, timers = globalThis,
                                now = () => Date.now(), fetchJson = fetchHealth,
                                geolocation = globalThis.navigator && globalThis.navigator.geolocation,
                                secure = globalThis.isSecureContext !== false }) {
  const marks = new Map();              // room -> {order, timer}: the read marker waiting to go out
  let ticker = null;

  function markRead(room, order) {
    const waiting = marks.get(room);
    if (waiting) { waiting.order = order; return; }
    const entry = { order };
    entry.timer = timers.setTimeout(() => {
      marks.delete(room);
      conn.request({ type: "mark_read", room, order: entry.order }, { quiet: true }).catch(() => {});
    }, MARK_READ_DELAY);
    marks.set(room, entry);
  }

  function clock(on) {
    if (on && ticker === null) {
      ticker = timers.setInterval(() => dispatch({ type: "tick", now: now() }), TICK);
      dispatch({ type: "tick", now: now() });
    } else if (!on && ticker !== null) {
      timers.clearInterval(ticker);
      ticker = null;
    }
  }

  /** Ask the browser where it is, once; the answer (or why not) comes back as an event. */
  function locate(unit) {
    const failed = (reason, message = "") => dispatch({ type: "locate-failed", reason, message, unit });
    if (!geolocation || typeof geolocation.getCurrentPosition !== "function") {
      failed(secure ? "unsupported" : "insecure");
      return;
    }
    try {
      geolocation.getCurrentPosition((pos) => {
        const c = pos.coords;
        dispatch({ type: "located", lat: c.latitude, lon: c.longitude, alt: c.altitude, course: c.heading, speed: c.speed,
                   accuracy: c.accuracy, at: pos.timestamp / 1000, unit, now: now() / 1000 });
      }, (err) => failed(!secure ? "insecure" : LOCATE_REASONS[err && err.code] || "unavailable", err && err.message),
      LOCATE_OPTIONS);
    } catch (e) {
      failed(secure ? "unavailable" : "insecure", e.message);
    }
  }

  /** Perform one effect; anything it leads to comes back through `dispatch`. */
  return function perform(effect) {
    switch (effect.type) {
      case "request":
        conn.request(effect.frame, { quiet: !!effect.reply }).then(
          (reply) => { if (effect.reply) dispatch({ ...effect.reply, frame: reply }); },
          (e) => { if (effect.failed) dispatch({ ...effect.failed, type: "request-failed", message: e.message,
                                                 request: effect.frame.type, ...(e.code ? { code: e.code } : {}) }); });
        return;
      case "login":
        conn.login(effect.user, effect.password).then(
          () => dispatch({ type: "login-done" }),
          (e) => dispatch({ type: "login-failed", code: e.code, message: e.message }));
        return;
      case "logout":
        conn.logout({ all: effect.all }).then((outcome) => dispatch({ type: "logged-out", ...outcome }));
        return;
      case "retry-now": conn.retryNow(); return;
      case "save-theme":
        try { storage.setItem("rcm-theme", effect.theme); } catch (e) { /* storage may be off */ }
        return;
      case "focus": view.focus(effect.target); return;
      case "announce": view.announce(effect.text); return;
      case "clear-input": view.clearInput(effect.id); return;
      case "mark-read": markRead(effect.room, effect.order); return;
      case "notify":
        try { notifier(effect); } catch (e) { /* notifications may be refused or unsupported */ }
        return;
      case "clock": clock(!!effect.on); return;
      case "locate": locate(effect.unit || null); return;
      case "ask-site":
        fetchJson("/health").then((body) => dispatch({ type: "site-info", site: body && body.site }), () => {});
        return;
      default: return;
    }
  };
}

function fetchHealth(path) {
  return fetch(path, { cache: "no-store", credentials: "omit" }).then((r) => r.json());
}

/**
 * The store: one state, changed only by `reduce`, drawn after every step, its effects
 * performed once. Events dispatched while a step runs (an effect that answers at once)
 * wait for it to finish, so steps never interleave.
 */
export function createStore(reduce, initial, { render, perform }) {
  let state = initial;
  const queue = [];
  let running = false;

  function dispatch(event) {
    queue.push(event);
    if (running) return;
    running = true;
    try {
      while (queue.length) {
        const prev = state;
        const next = reduce(prev, queue.shift());
        state = next.effects.length ? { ...next, effects: [] } : next;
        render(prev, state);
        for (const effect of next.effects) perform(effect);
      }
    } finally {
      running = false;
    }
  }

  return { dispatch, getState: () => state };
}
