// The effects layer: performs what a reducer step asked for (state.js `effects`), and
// turns what comes back (replies, refusals, connection changes) into events again.
//
// It is the only code that talks to the connection (connection.js) or the browser's
// storage; the page itself is drawn by view.js, whose focus/announce/clear helpers it calls.

export function createEffects({ conn, view, dispatch, storage }) {
  /** Perform one effect; anything it leads to comes back through `dispatch`. */
  return function perform(effect) {
    switch (effect.type) {
      case "request":
        conn.request(effect.frame).catch((e) => {
          if (effect.failed) dispatch({ ...effect.failed, type: "request-failed", message: e.message });
        });
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
      default: return;
    }
  };
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
