// The store and the effects layer (web_ui/static/js/effects.js) with a fake connection and view.

import assert from "node:assert/strict";
import { test } from "node:test";

import { createEffects, createStore } from "../static/js/effects.js";
import { initialState, reduce } from "../static/js/state.js";

test("the store draws every step, performs its effects once, and never keeps them", () => {
  const drawn = [];
  const performed = [];
  let store;
  const perform = (e) => {
    performed.push(e.type);
    if (e.type === "login") store.dispatch({ type: "conn", kind: "connecting" });    // answers at once: queued
  };
  store = createStore(reduce, initialState(), { render: (prev, next) => drawn.push([prev.conn.kind, next.conn.kind]), perform });
  store.dispatch({ type: "login-submit", user: "alice", password: "pw" });
  assert.deepEqual(performed, ["clear-input", "login"]);
  assert.deepEqual(drawn, [["offline", "offline"], ["offline", "connecting"]]);
  assert.deepEqual(store.getState().effects, []);
});

test("effects: requests report their failure as the event the reducer asked for", async () => {
  const sent = [];
  const events = [];
  const conn = {
    request: (frame) => { sent.push(frame); return Promise.reject(new Error("not a member")); },
    logout: ({ all }) => Promise.resolve({ confirmed: true, all, reason: "" }),
    login: () => Promise.reject(Object.assign(new Error("no"), { code: "auth_failed" })),
    retryNow: () => sent.push("retry"),
  };
  const view = { focus: (t) => events.push(["focus", t]), announce: (t) => events.push(["announce", t]),
                 clearInput: (id) => events.push(["clear", id]) };
  const stored = {};
  const perform = createEffects({ conn, view, dispatch: (e) => events.push(e), storage: { setItem: (k, v) => { stored[k] = v; } } });
  perform({ type: "request", frame: { type: "leave", room: "ops" }, failed: { what: "leave", room: "ops" } });
  perform({ type: "logout", all: true });
  perform({ type: "login", user: "a", password: "b" });
  perform({ type: "save-theme", theme: "dark" });
  perform({ type: "retry-now" });
  perform({ type: "focus", target: "composer" });
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(sent, [{ type: "leave", room: "ops" }, "retry"]);
  assert.deepEqual(stored, { "rcm-theme": "dark" });
  assert.deepEqual(events, [
    ["focus", "composer"],
    { what: "leave", room: "ops", type: "request-failed", message: "not a member", request: "leave" },
    { type: "logged-out", confirmed: true, all: true, reason: "" },
    { type: "login-failed", code: "auth_failed", message: "no" },
  ]);
});

test("effects: replies asked for as events skip the frame path; read markers coalesce; alert ticks", async () => {
  const sent = [];
  const events = [];
  const conn = { request: (frame, opts) => { sent.push([frame, opts]); return Promise.resolve({ type: "results", messages: [] }); } };
  const timers = { timeouts: [], intervals: [],
                   setTimeout(fn) { this.timeouts.push(fn); return this.timeouts.length; },
                   setInterval(fn) { this.intervals.push(fn); return 7; },
                   clearInterval(id) { this.cleared = id; } };
  const notes = [];
  const perform = createEffects({ conn, view: {}, dispatch: (e) => events.push(e), storage: null, timers,
                                  notifier: (n) => notes.push(n.title), now: () => 42 });
  perform({ type: "request", frame: { type: "search", query: "x" }, failed: { what: "search" }, reply: { type: "search-results", seq: 3 } });
  perform({ type: "mark-read", room: "ops", order: [1, "A"] });
  perform({ type: "mark-read", room: "ops", order: [2, "A"] });
  perform({ type: "notify", title: "FLASH from bob@B in ops" });
  perform({ type: "clock", on: true });
  perform({ type: "clock", on: true });
  await new Promise((r) => setTimeout(r, 0));
  assert.deepEqual(sent, [[{ type: "search", query: "x" }, { quiet: true }]]);
  assert.equal(timers.timeouts.length, 1);                  // one marker in flight per room: the latest order goes
  timers.timeouts[0]();
  assert.deepEqual(sent[1], [{ type: "mark_read", room: "ops", order: [2, "A"] }, { quiet: true }]);
  assert.equal(timers.intervals.length, 1);
  timers.intervals[0]();
  perform({ type: "clock", on: false });
  assert.equal(timers.cleared, 7);
  assert.deepEqual(notes, ["FLASH from bob@B in ops"]);
  assert.deepEqual(events, [{ type: "tick", now: 42 }, { type: "search-results", seq: 3, frame: { type: "results", messages: [] } },
                            { type: "tick", now: 42 }]);
});
