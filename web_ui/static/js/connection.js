// One user's connection to the site's chat server: chat protocol v1 over /ws.
//
// Theory of operation
// -------------------
// `login(user, password)` opens the WebSocket (same origin, no credentials in
// the URL) and sends `hello {user, password}`; the password is not kept. The
// `welcome` carries a session token, kept in memory only. When the socket drops
// for any reason other than `logout()`, the connection is re-opened with
// exponential back-off (0.5 s doubling to 15 s, with jitter) and resumed with
// `hello {user, session, last_n}`, `last_n` being the highest site delivery
// number seen, so the server replays what was missed. Requests carry an `id`
// the server echoes; requests still unanswered when the socket drops (a `say`
// keeps its client_id, so the server acknowledges and sends it once) are sent
// again after the resume.
//
// `logout({all})` ends the session at the server: it stops reconnecting, sends
// `logout {all}` on the open socket and waits for `logged_out` or for the server
// to close it ("logged out"), at most LOGOUT_WAIT; then it closes and forgets the
// session token either way. Nothing else sends `logout` (closing the tab does
// not). A close with "logged out" that we did not ask for (the user ended all
// their sessions from elsewhere) is not resumed: the page is signed out.
//
// Every server frame goes to `onFrame`; connection changes go to `onState`
// with one of: "connecting", "online", "reconnecting" ({delay, attempt,
// reason}), "expired" (the session cannot be resumed: {reason, signedOut?}),
// "closed" (logout).

const BACKOFF_FIRST = 500;     // ms
const BACKOFF_MAX = 15000;     // ms
const LOGOUT_WAIT = 3000;      // ms to wait for the server's logged_out before forgetting the session anyway
const LOGGED_OUT = "logged out";   // the close reason of a session the server ended

export class ChatError extends Error {
  constructor(frame) {
    super(frame.message || frame.code || "error");
    this.code = frame.code;
    this.frame = frame;
  }
}

export function wsUrl(loc = window.location) {
  return `${loc.protocol === "https:" ? "wss:" : "ws:"}//${loc.host}/ws`;
}

export class ChatConnection {
  constructor({ url = wsUrl(), onFrame = () => {}, onState = () => {} } = {}) {
    this.url = url;
    this.onFrame = onFrame;
    this.onState = onState;
    this.ws = null;
    this.user = null;
    this.session = null;
    this.lastN = 0;
    this.ready = false;          // the socket is open and the hello was answered
    this.pending = new Map();    // id -> {frame, resolve, reject}
    this.nextId = 1;
    this.attempt = 0;
    this.timer = null;
    this.stopped = true;
    this.loggingOut = null;      // while a logout waits for the server: settles it
    this.logoutId = null;
  }

  /** Log in; resolves with the welcome frame, rejects with a ChatError or Error. */
  login(user, password) {
    this.stop();
    this.stopped = false;
    this.user = user;
    this.session = null;
    this.lastN = 0;
    this.pending.clear();
    return new Promise((resolve, reject) => {
      this._open({ type: "hello", user, password }, resolve, reject);
    });
  }

  /** Send a request; resolves with the reply, rejects with ChatError on an error frame. With `quiet`, the reply
   *  goes only to the caller, not to `onFrame` (an error still does not). */
  request(frame, { quiet = false } = {}) {
    const id = `w${this.nextId++}`;
    const msg = { ...frame, id };
    return new Promise((resolve, reject) => {
      this.pending.set(id, { frame: msg, resolve, reject, quiet });
      if (this.ready) this._send(msg);
    });
  }

  /**
   * Log out: end the session at the server (with `all`, every session of the user at this site),
   * then close and forget it, never reconnecting. Resolves with {confirmed, all, reason}:
   * `confirmed` when the server answered logged_out or closed with "logged out" within `wait` ms.
   */
  logout({ all = false, wait = LOGOUT_WAIT } = {}) {
    const ws = this.ready && this.ws && this.ws.readyState === WebSocket.OPEN ? this.ws : null;
    this.stopped = true;                   // from here on nothing reconnects
    clearTimeout(this.timer);
    this.timer = null;
    return new Promise((resolve) => {
      let timer = null;
      const finish = (outcome) => {
        if (this.loggingOut !== finish) return;
        this.loggingOut = null;
        clearTimeout(timer);
        this.stop();
        this.session = null;
        this.user = null;
        this.onState("closed", {});
        resolve({ all, ...outcome });
      };
      this.loggingOut = finish;
      if (!ws) { finish({ confirmed: false, reason: "not connected to the chat server" }); return; }
      timer = setTimeout(() => finish({ confirmed: false, reason: `no answer within ${wait / 1000} s` }), wait);
      this.logoutId = `w${this.nextId++}`;
      ws.send(JSON.stringify({ type: "logout", all, id: this.logoutId }));
    });
  }

  stop() {
    if (this.loggingOut) this.loggingOut({ confirmed: false, reason: "signed in again" });
    this.stopped = true;
    this.ready = false;
    clearTimeout(this.timer);
    this.timer = null;
    if (this.ws) {
      const ws = this.ws;
      this.ws = null;
      ws.onopen = ws.onmessage = ws.onclose = ws.onerror = null;
      try { ws.close(1000, "logout"); } catch (e) { /* already closed */ }
    }
    for (const p of this.pending.values()) p.reject(new Error("logged out"));
    this.pending.clear();
  }

  /** Reconnect now (skip the rest of the back-off wait). */
  retryNow() {
    if (this.stopped || this.ready || !this.session || (this.ws && this.ws.readyState === WebSocket.CONNECTING)) return;
    clearTimeout(this.timer);
    this._resume();
  }

  _send(frame) {
    if (this.ws && this.ws.readyState === WebSocket.OPEN) this.ws.send(JSON.stringify(frame));
  }

  _open(hello, onWelcome, onRefused) {
    this.onState("connecting", { attempt: this.attempt });
    const ws = new WebSocket(this.url);
    this.ws = ws;
    let answered = false;
    const first = hello.password !== undefined;   // a sign-in, not a resume
    const helloId = `h${this.nextId++}`;
    ws.onopen = () => {
      ws.send(JSON.stringify({ ...hello, id: helloId }));
      delete hello.password;                        // not kept once sent
    };
    ws.onmessage = (ev) => {
      let frame;
      try { frame = JSON.parse(ev.data); } catch (e) { return; }
      if (!frame || typeof frame !== "object") return;
      if (!answered && (frame.id === helloId || frame.in_reply_to === helloId)) {
        answered = true;
        if (frame.type === "welcome") {
          this.session = frame.session || this.session;
          if (first) this.lastN = Math.max(this.lastN, frame.n || 0);
          this.ready = true;
          this.attempt = 0;
          this.onFrame(frame);
          onWelcome(frame);
          this.onState("online", {});
          for (const p of this.pending.values()) this._send(p.frame);
        } else {
          onRefused(new ChatError(frame));
          this._giveUp(ws);
        }
        return;
      }
      this._dispatch(frame);
    };
    ws.onclose = (ev) => {
      if (this.ws !== ws) return;
      this.ws = null;
      this.ready = false;
      if (this.loggingOut) {              // our logout: the server closing is its answer too
        const ours = ev.code === 1000 && ev.reason === LOGGED_OUT;
        this.loggingOut({ confirmed: ours, reason: ours ? "" : (ev.reason || `closed (${ev.code})`) });
        return;
      }
      if (answered && ev.code === 1000 && ev.reason === LOGGED_OUT) {   // ended from elsewhere: do not resume
        this.stopped = true;
        this.session = null;
        this.onState("expired", { reason: LOGGED_OUT, signedOut: true });
        return;
      }
      if (!answered && first) {   // a failed first login does not retry
        answered = true;
        this.stopped = true;
        onRefused(new Error(ev.reason || "cannot reach the chat server"));
        this.onState("closed", { reason: ev.reason });
        return;
      }
      this._scheduleReconnect(ev.reason || (ev.code === 1006 ? "connection lost" : `closed (${ev.code})`));
    };
  }

  _giveUp(ws) {
    ws.onclose = null;
    try { ws.close(1000); } catch (e) { /* gone */ }
    if (this.ws === ws) this.ws = null;
    this.ready = false;
    this.stopped = true;
  }

  _dispatch(frame) {
    if (this.loggingOut && frame.type === "logged_out") {
      this.loggingOut({ confirmed: true, all: !!frame.all, reason: "" });
      return;
    }
    if (this.loggingOut && frame.type === "error" && frame.in_reply_to === this.logoutId) {
      this.loggingOut({ confirmed: false, reason: frame.message || frame.code || "refused" });
      return;
    }
    if (frame.type === "message" && typeof frame.n === "number") this.lastN = Math.max(this.lastN, frame.n);
    const key = frame.type === "error" ? frame.in_reply_to : frame.id;
    const p = key !== undefined ? this.pending.get(key) : undefined;
    if (p) {
      this.pending.delete(key);
      if (frame.type === "error") {
        p.reject(new ChatError(frame));
        return;
      }
      p.resolve(frame);
      if (p.quiet) return;
    }
    this.onFrame(frame);
  }

  _scheduleReconnect(reason) {
    if (this.stopped || !this.session) return;
    const base = Math.min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** this.attempt);
    const delay = Math.round(base * (0.8 + 0.4 * Math.random()));
    this.attempt += 1;
    this.onState("reconnecting", { delay, attempt: this.attempt, reason });
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this._resume(), delay);
  }

  _resume() {
    this.timer = null;
    if (this.stopped || !this.session) return;
    const hello = { type: "hello", user: this.user, session: this.session, last_n: this.lastN };
    this._open(hello, () => {}, (err) => {
      this.session = null;
      this.onState("expired", { reason: err.message });
    });
  }
}
