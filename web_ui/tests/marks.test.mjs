// What a line and the page say, the same as the terminal clients and IRC (issue 35): the lateness figure, the
// order-against-time mark, never "late" on one's own line, delivery marks after repair, plurals, times, error
// reasons, the site at sign-in, the live directory. Run with `node --test web_ui/tests/`.

import assert from "node:assert/strict";
import { test } from "node:test";

import { describeRoom } from "../static/js/finding.js";
import { notSentTo } from "../static/js/messages.js";
import { initialState } from "../static/js/state.js";
import { T, frame, msg, run } from "./reducer.mjs";
import { errorReason, fmtDateTime, fmtTime, outOfTime, plural } from "../static/js/words.js";

const WELCOME = { type: "welcome", user: "alice", site: "A", sites: { A: "connected", B: "connected", C: "connected" },
                  rooms: [], presence: {}, session: "tok", n: 0 };



const inOps = (history = []) => run(initialState(), frame(WELCOME), frame({ type: "joined", room: "ops", history, more: false })).state;
const entry = (state, id) => state.rooms.get("ops").entries.find((e) => e.id === id);

test("a late line that came live carries its lateness figure, as in the TUI and IRC; from history it has none", () => {
  let { state } = run(inOps([msg(1, "B", "one"), msg(9, "C", "old late", { late: true })]),
                      frame(msg(5, "C", "late from C", { late: true }), T + 5 + 22.4));
  assert.equal(entry(state, "C:5").late, true);
  assert.equal(Math.round(entry(state, "C:5").lateBy), 22);
  assert.equal(entry(state, "C:9").lateBy, null);
  ({ state } = run(state, frame(msg(7, "B", "on time"), T + 8)));
  assert.equal(entry(state, "B:7").late, false);
  assert.equal(entry(state, "B:7").lateBy, null);
});

test("a sender never sees their own line marked late, whatever the frame says", () => {
  const { state } = run(inOps([msg(1, "B", "one")]),
                        frame(msg(3, "A", "own FLASH", { user: "alice", late: true, precedence: "flash" }), T + 40),
                        frame(msg(4, "B", "another alice", { user: "alice", late: true }), T + 40));
  assert.equal(entry(state, "A:3").late, false);
  assert.equal(entry(state, "A:3").lateBy, null);
  assert.equal(entry(state, "B:4").late, true);                     // alice at B is someone else
});

test("order against time: a line whose time reads earlier than the line above says by how much, checked again below a late line", () => {
  let { state } = run(inOps([msg(10, "B", "first"), msg(20, "B", "carol, written later")]),
                      frame(msg(30, "A", "alice, placed after", { sent_at: T - 42 }), T + 31));
  assert.deepEqual(["B:10", "B:20", "A:30"].map((id) => entry(state, id).outOfTime), [0, 0, 62]);
  ({ state } = run(state, frame(msg(25, "C", "late, sent at 0", { late: true, sent_at: T }), T + 99)));
  assert.equal(entry(state, "C:25").outOfTime, 20);                  // against carol's, now the line above it
  assert.equal(entry(state, "A:30").outOfTime, 42);                  // against the late line above it now
  assert.equal(outOfTime(T + 1.1, T + 1.9), 0);                      // whole seconds, as times are shown
  assert.equal(outOfTime(T + 0.9, T + 1.1), 1);
  assert.equal(outOfTime(T + 5, null), 0);
});

test("delivery marks update: a site an own message was not sent to drops off once it delivers it", () => {
  let { state } = run(inOps(), { type: "submit", line: "grid 4411", clientId: "c1" },
                      frame({ type: "ack", client_id: "c1", msg_id: "A:9", skipped: ["C"] }),
                      frame(msg(9, "A", "grid 4411", { user: "alice" })), frame({ type: "receipt", msg_id: "A:9", site: "A" }));
  assert.deepEqual(notSentTo(entry(state, "A:9")), ["C"]);
  ({ state } = run(state, frame({ type: "receipt", msg_id: "A:9", site: "C" })));
  assert.deepEqual(notSentTo(entry(state, "A:9")), []);
  assert.deepEqual(entry(state, "A:9").receipts, ["A", "C"]);
});

test("words: one plural helper; times 24-hour whatever the locale; an error does not repeat its request's name", () => {
  assert.deepEqual([0, 1, 2].map((n) => plural(n, "message")), ["0 messages", "1 message", "2 messages"]);
  assert.equal(describeRoom({ room: "ops", members: 1, last_at: null }, 0), "1 member · no messages yet");
  const d = new Date(2026, 0, 2, 9, 5, 3);
  assert.equal(fmtTime(d), "09:05:03");
  assert.equal(fmtDateTime(d), "2026-01-02 09:05:03");
  assert.equal(errorReason("join: room 'cell' is private and you are not a member", "join"),
               "room 'cell' is private and you are not a member");
  const { state } = run(initialState(), frame(WELCOME),
                        { type: "request-failed", what: "join", room: "cell", request: "join",
                          message: "join: room 'cell' is private and you are not a member" });
  assert.equal(state.banner.text, "Cannot join cell: room 'cell' is private and you are not a member");
});

test("the sign-in form names the site: asked of /health before sign-in, kept after signing out", () => {
  let { state, effects } = run(initialState(), { type: "ask-site" });
  assert.deepEqual(effects, [{ type: "ask-site" }]);
  ({ state } = run(state, { type: "site-info", site: "ground1" }));
  assert.equal(state.login.site, "ground1");
  ({ state } = run(state, { type: "login-submit", user: "alice", password: "pw" }, frame({ ...WELCOME, site: "ground1" }),
                   { type: "logout", all: false }));
  assert.equal(state.screen, "login");
  assert.equal(state.login.site, "ground1");
});

test("the directory is live: the server's pushes change counts and ages in place, add and remove rooms", () => {
  let { state } = run(inOps(), { type: "directory-page", sofar: [], show: false, now: 0,
                                 frame: { type: "directory", more: false, rooms: [
                                   { room: "cell", private: true, members: 2, last_at: null },
                                   { room: "ops", private: false, members: 2, last_at: null }] } });
  ({ state } = run(state, frame({ type: "directory_update", removed: ["cell"], rooms: [
    { room: "ops", private: false, members: 3, last_at: T + 5 }, { room: "weather", private: false, members: 1, last_at: null }] })));
  assert.deepEqual(state.directory.rooms.map((r) => [r.room, r.members, r.last_at, r.joined]),
                   [["ops", 3, T + 5, true], ["weather", 1, null, false]]);
});
