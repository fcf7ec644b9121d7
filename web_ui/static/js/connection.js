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
// Every server frame goes to `onFrame`; connection changes go to `onState`
// with one of: "connecting", "online", "reconnecting" ({delay, attempt,
// reason}), "expired" (the session cannot be resumed), "closed" (logout).

const BACKOFF_FIRST = 500;     // ms
const BACKOFF_MAX = 15000;     // ms

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

  /** Send a request; resolves with the reply, rejects with ChatError on an error frame. */
  request(frame) {
    const id = `w${this.nextId++}`;
    const msg = { ...frame, id };
    return new Promise((resolve, reject) => {
      this.pending.set(id, { frame: msg, resolve, reject });
      if (this.ready) this._send(msg);
    });
  }

  /** Log out: close, forget the session, never reconnect. */
  logout() {
    this.stop();
    this.session = null;
    this.user = null;
    this.onState("closed", {});
  }

  stop() {
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
