// Message expiry in the page (web_ui/static/js/expiry.js): the composer's choice and /expire put `expires_in` on
// the say; a line is marked expired by the tick that passes its `expires_at` (or at once when it came expired);
// a `missing` notice answered by expired stubs says so. Run with `node --test web_ui/tests/`.

import assert from "node:assert/strict";
import { test } from "node:test";

import { parseDuration } from "../static/js/expiry.js";
import { lossWords } from "../static/js/losses.js";
import { initialState } from "../static/js/state.js";
import { T, frame, msg, run } from "./reducer.mjs";

const WELCOME = { type: "welcome", user: "alice", site: "A", sites: { A: "connected", B: "connected" },
                  rooms: [], presence: {}, session: "tok", n: 0 };
const inOps = (history = []) => run(initialState(), frame(WELCOME), frame({ type: "joined", room: "ops", history, more: false })).state;
const entry = (state, id) => state.rooms.get("ops").entries.find((e) => e.id === id);
const tick = (seconds) => ({ type: "tick", now: seconds * 1000 });            // ticks count ms (precedence.js)
const clockEffects = (effects) => effects.filter((e) => e.type === "clock").map((e) => e.on);
const says = (effects) => effects.filter((e) => e.type === "request" && e.frame.type === "say").map((e) => e.frame);

test("a line is marked expired by the tick past its expires_at; the clock runs only while some are still to expire", () => {
  let { state, effects } = run(inOps([msg(1, "B", "plain")]), frame(msg(2, "B", "short-lived", { expires_at: T + 60 }), T + 2));
  assert.deepEqual([entry(state, "B:2").expiresAt, entry(state, "B:2").expired], [T + 60, false]);
  assert.deepEqual([entry(state, "B:1").expiresAt, entry(state, "B:1").expired], [null, false]);
  assert.deepEqual(clockEffects(effects), [true]);
  const before = entry(state, "B:2");
  ({ state, effects } = run(state, tick(T + 59)));
  assert.equal(entry(state, "B:2"), before);                                  // nothing due: the same entry
  ({ state, effects } = run(state, tick(T + 60)));
  assert.equal(entry(state, "B:2").expired, true);
  assert.equal(entry(state, "B:2").frame.text, "short-lived");               // kept readable, shown greyed
  assert.deepEqual(clockEffects(effects), [false]);
});

test("a line that comes expired (a page read after its time, or a live one past it) is expired at once", () => {
  const state = run(inOps([msg(1, "B", "old", { expires_at: T + 5, expired: true })]),
                    frame(msg(3, "B", "skewed", { expires_at: T + 1 }), T + 3)).state;
  assert.equal(entry(state, "B:1").expired, true);
  assert.equal(entry(state, "B:3").expired, true);
  assert.equal(state.expiring.size, 0);
});

test("the composer's expiry goes on every say until changed; /expire sends one line with its own", () => {
  let { state, effects } = run(inOps(), { type: "expires-in", value: 3600 }, { type: "submit", line: "one", clientId: "c1" },
                               { type: "submit", line: "two", clientId: "c2" });
  assert.deepEqual(says(effects).map((f) => [f.text, f.expires_in]), [["one", 3600], ["two", 3600]]);
  ({ state, effects } = run(state, { type: "expires-in", value: null }, { type: "submit", line: "/expire 15m three", clientId: "c3" },
                            { type: "submit", line: "four", clientId: "c4" }, { type: "expires-in", value: 0 }));
  assert.deepEqual(says(effects).map((f) => [f.text, f.expires_in]), [["three", 900], ["four", undefined]]);
  assert.equal(state.expiresIn, null);                                       // 0 is not a valid expiry
  ({ state, effects } = run(state, { type: "submit", line: "/expire soon four", clientId: "c5" }));
  assert.deepEqual(says(effects), []);
  assert.match(state.rooms.get("ops").entries.filter((e) => e.kind === "notice").at(-1).text, /usage: \/expire TIME TEXT/);
  assert.deepEqual(["90", "90s", "2h", "1d", "8d", "0", "x"].map(parseDuration), [90, 90, 7200, 86400, null, null, null]);
});

test("a missing notice answered by expired stubs says they expired, not that they were recovered", () => {
  const { state } = run(inOps(), frame({ type: "missing", origin: "B", count: 2, ranges: [[3, 4]], more: false }),
                        frame({ type: "missing", origin: "B", count: 0, ranges: [], more: false, expired: 1, recovered: 1 }));
  assert.deepEqual(state.losses.get("B"), { lost: 0, back: 1, gone: 1 });
  const [text, kind] = lossWords("B", { lost: 0, back: 0, gone: 2 });
  assert.equal(kind, "recovered");
  assert.match(text, /2 messages expired before reaching this site \(not lost, not shown\)/);
  assert.doesNotMatch(text, /Recovered/);
});
