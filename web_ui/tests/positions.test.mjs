// Units' positions in the reducer (web_ui/static/js/positions.js), the plot's geometry (plot.js) and the
// browser's location in the effects layer, without a browser. Run with `node --test web_ui/tests/`.

import assert from "node:assert/strict";
import { test } from "node:test";

import { createEffects } from "../static/js/effects.js";
import { degreeLabel, layout, lonLabelsShown, niceStep } from "../static/js/plot.js";
import { ageOf, decodePosition, MAX_UNITS, parseReport, unitList } from "../static/js/positions.js";
import { initialState, reduce } from "../static/js/state.js";
import { fmtAge } from "../static/js/words.js";
import { frame, run, T } from "./reducer.mjs";

const WELCOME = { type: "welcome", user: "alice", site: "A", sites: { A: "connected", B: "connected" }, rooms: [],
                  presence: {}, session: "tok", n: 0 };

/** A position frame of `unit` at `site`, reported at T + dt, living 60 s. */
function pos(site, unit, dt, extra = {}) {
  return { type: "position", site, unit, user: extra.user ?? unit, lat: 51.5, lon: -0.12, at: T + dt, expires_at: T + dt + 60,
           ...extra };
}

const signedIn = () => run(initialState(), frame(WELCOME)).state;
const requests = (effects) => effects.filter((e) => e.type === "request").map((e) => e.frame);
const shown = (state) => unitList(state).map((p) => `${p.unit}@${p.site} ${p.lat},${p.lon} +${p.at - T}`);
const tick = (seconds) => ({ type: "tick", now: seconds * 1000 });            // ticks count ms (precedence.js)

test("welcome asks for every unit's position; a position frame shows the unit and starts the clock", () => {
  const { state: s0, effects: e0 } = run(initialState(), frame(WELCOME));
  assert.deepEqual(e0.find((e) => e.type === "request" && e.frame.type === "positions"),
                   { type: "request", frame: { type: "positions" }, failed: { what: "positions" } });
  const { state, effects } = run(s0, frame(pos("B", "bravo-1", 0, { alt: 12.5, course: 90, speed: 3 }), T + 2));
  assert.deepEqual(shown(state), ["bravo-1@B 51.5,-0.12 +0"]);
  const p = state.positions.units.get("B\nbravo-1");
  assert.deepEqual([p.user, p.alt, p.course, p.speed, p.expiresAt], ["bravo-1", 12.5, 90, 3, T + 60]);
  assert.ok(Object.isFrozen(p));
  assert.equal(ageOf(p, state.positions.now), 2);
  assert.deepEqual(effects.filter((e) => e.type === "clock"), [{ type: "clock", on: true }]);
});

test("a unit's newer report supersedes; an older or equal one never does; units are per site", () => {
  let { state } = run(signedIn(), frame(pos("B", "bravo-1", 10, { lat: 1 }), T + 11));
  const before = state.positions;
  ({ state } = run(state, frame(pos("B", "bravo-1", 5, { lat: 2 }), T + 12), frame(pos("B", "bravo-1", 10, { lat: 3 }), T + 12)));
  assert.deepEqual(shown(state), ["bravo-1@B 1,-0.12 +10"]);        // late and repeated reports are ignored
  assert.equal(state.positions.units, before.units);                  // and change nothing the view would redraw
  ({ state } = run(state, frame(pos("B", "bravo-1", 20, { lat: 4 }), T + 21), frame(pos("C", "bravo-1", 1, { lat: 5 }), T + 21),
                   frame(pos("A", "alpha", 3, { lon: 7 }), T + 21), frame(pos("A", "Zulu", 3), T + 21)));
  assert.deepEqual(shown(state), ["alpha@A 51.5,7 +3", "bravo-1@B 4,-0.12 +20", "bravo-1@C 5,-0.12 +1",    // by unit, then site
                                  "Zulu@A 51.5,-0.12 +3"]);
});

test("a tick past a report's expiry drops it; one already expired is never shown; the clock stops when none is left", () => {
  let { state } = run(signedIn(), frame(pos("B", "b", 0), T + 1), frame(pos("C", "c", 30), T + 31));
  let effects;
  ({ state, effects } = run(state, tick(T + 59)));
  assert.deepEqual(shown(state).length, 2);
  assert.equal(state.positions.now, T + 59);
  ({ state, effects } = run(state, tick(T + 60)));                   // b's expires_at
  assert.deepEqual(shown(state), ["c@C 51.5,-0.12 +30"]);
  ({ state } = run(state, frame(pos("D", "d", 0), T + 61)));         // expired on arrival (a slow link)
  assert.deepEqual(shown(state), ["c@C 51.5,-0.12 +30"]);
  ({ state, effects } = run(state, tick(T + 95)));
  assert.equal(state.positions.units.size, 0);
  assert.deepEqual(effects.filter((e) => e.type === "clock"), [{ type: "clock", on: false }]);
});

test("a positions snapshot is the server's whole set: the newer report of each unit, unlisted ones dropped", () => {
  let { state } = run(signedIn(), frame(pos("B", "held-newer", 50), T + 51), frame(pos("B", "held-older", 1), T + 51),
                      frame(pos("B", "gone", 1), T + 51));
  ({ state } = run(state, frame({ type: "positions", units: [
    pos("B", "held-newer", 40, { lat: 9 }), pos("B", "held-older", 45, { lat: 8 }), pos("C", "new", 30),
    pos("C", "expired", -30), { site: "C", unit: "broken", lat: 91, lon: 0, at: T, expires_at: T + 60 }, null, "x",
  ] }, T + 52)));
  assert.deepEqual(shown(state), ["held-newer@B 51.5,-0.12 +50", "held-older@B 8,-0.12 +45", "new@C 51.5,-0.12 +30"]);
  assert.equal(state.positions.rejected, 3);                          // the bad latitude, null and "x"
  ({ state } = run(state, frame({ type: "positions", units: [] }, T + 53)));
  assert.equal(state.positions.units.size, 0);
});

test("at most MAX_UNITS units are kept: the oldest report makes room", () => {
  let state = signedIn();
  const many = Array.from({ length: MAX_UNITS }, (_, i) => pos("B", `u${i}`, i % 50));
  ({ state } = run(state, frame({ type: "positions", units: [...many, pos("C", "one-too-many", 0)] }, T)));
  assert.equal(state.positions.units.size, MAX_UNITS);
  ({ state } = run(state, frame(pos("C", "newest", 55), T)));
  assert.equal(state.positions.units.size, MAX_UNITS);
  assert.ok(state.positions.units.has("C\nnewest"));
});

test("decoding: bounds on every field; a bad optional field is dropped, a bad required one drops the report", () => {
  const base = { site: "B", unit: "u", lat: 0, lon: 0, at: T, expires_at: T + 60 };
  for (const bad of [{ lat: 90.01 }, { lon: -180.5 }, { lat: "1" }, { at: NaN }, { expires_at: undefined }, { site: "" },
                     { unit: "a\u0007b" }, { unit: "x".repeat(65) }, { site: 7 }, { lon: Infinity }]) {
    assert.equal(decodePosition({ ...base, ...bad }), null, JSON.stringify(bad));
  }
  const p = decodePosition({ ...base, lat: -90, lon: 180, course: 400, speed: -1, alt: "high", user: "\u0000" });
  assert.deepEqual([p.lat, p.lon, p.course, p.speed, p.alt, p.user, p.unit], [-90, 180, null, null, null, null, "u"]);
  assert.equal(decodePosition({ ...base, unit: "𝔘".repeat(64) }).unit.length, 128);   // 64 characters, not code units
  let { state } = run(signedIn(), frame(pos("B", "ok", 0), T));
  const units = state.positions.units;
  ({ state } = run(state, frame({ ...pos("B", "ok", 5), lat: 200 }, T + 1)));
  assert.equal(state.positions.units, units);                         // what was shown stays
  assert.equal(state.positions.rejected, 1);
});

test("the report form: each field says what is wrong with it", () => {
  assert.deepEqual(parseReport({ lat: " 51.5012 ", lon: "-0.1245", unit: "" }), { ok: true, report: { lat: 51.5012, lon: -0.1245 } });
  assert.deepEqual(parseReport({ lat: "51.5 N", lon: "0.12W", unit: " hq-1 " }), { ok: true, report: { lat: 51.5, lon: -0.12, unit: "hq-1" } });
  assert.deepEqual(parseReport({ lat: "33.9°S", lon: "151.2 E", unit: "" }).report, { lat: -33.9, lon: 151.2 });
  assert.deepEqual(parseReport({ lat: "-0", lon: ".5", unit: "" }).report, { lat: 0, lon: 0.5 });
  const errors = (fields) => parseReport({ lat: "1", lon: "1", unit: "", ...fields }).errors;
  assert.deepEqual(errors({ lat: "" }), { lat: "Give a latitude in degrees (-90 to 90)." });
  assert.deepEqual(errors({ lat: "91" }), { lat: "The latitude must be between -90 and 90 degrees." });
  assert.deepEqual(errors({ lon: "-180.001" }), { lon: "The longitude must be between -180 and 180 degrees." });
  assert.deepEqual(errors({ lat: "north" }), { lat: "The latitude must be a number of degrees, like 51.5012 or 51.5012 N." });
  assert.deepEqual(errors({ lon: "12 N" }), { lon: "The longitude must be a number of degrees, like -0.1245 or 0.1245 W." });
  assert.deepEqual(errors({ lat: "-12 S" }), { lat: "The latitude has a sign and S: give one of them." });
  assert.deepEqual(errors({ lat: "1e3" }).lat.startsWith("The latitude must be a number"), true);
  assert.deepEqual(errors({ unit: "u".repeat(33) }), { unit: "A unit name has at most 32 characters." });
  const callsign = "A unit name is a callsign: letters, digits, spaces inside and _ . # : + - (starting with a letter or digit).";
  for (const bad of ["a\tb", "-lead", "bravo/2", "ünit"]) assert.deepEqual(errors({ unit: bad }), { unit: callsign }, bad);
  assert.deepEqual(parseReport({ lat: "1", lon: "1", unit: " Bravo 2-1#A " }).report.unit, "Bravo 2-1#A");
  assert.deepEqual(Object.keys(errors({ lat: "x", lon: "", unit: "\u0001" })), ["lat", "lon", "unit"]);
});

test("submitting the form sends a position (the user's unit when none is given), or shows the errors and sends nothing", () => {
  let { state, effects } = run(signedIn(), { type: "position-submit", lat: "95", lon: "abc", unit: "", now: T });
  assert.deepEqual(requests(effects), []);
  assert.deepEqual(Object.keys(state.positions.errors), ["lat", "lon"]);
  assert.deepEqual(effects.filter((e) => e.type === "focus"), [{ type: "focus", target: "position-lat" }]);
  ({ state, effects } = run(state, { type: "position-submit", lat: "51.5", lon: "-0.12", unit: "", now: T + 3 }));
  assert.deepEqual(requests(effects), [{ type: "position", lat: 51.5, lon: -0.12, at: T + 3 }]);
  assert.deepEqual(effects.find((e) => e.type === "request").failed, { what: "position" });
  assert.deepEqual(effects.filter((e) => e.type === "clear-input").map((e) => e.id), ["position-lat", "position-lon"]);
  assert.deepEqual([state.positions.errors, state.positions.note],
                   [{}, { text: "Position of alice sent: 51.50000, -0.12000.", kind: "ok" }]);
  ({ state, effects } = run(state, { type: "position-submit", lat: "1", lon: "2", unit: "truck 4", now: T + 4 }));
  assert.deepEqual(requests(effects), [{ type: "position", unit: "truck 4", lat: 1, lon: 2, at: T + 4 }]);
  ({ state } = run(state, { type: "request-failed", what: "position", message: "position: unit 'truck 4' is not yours",
                            request: "position" }));
  assert.deepEqual(state.positions.note, { text: "The position was not sent: unit 'truck 4' is not yours", kind: "error" });
});

test("use my location: one request at a time; the fix is sent with what the browser knows; a failure says why", () => {
  let { state, effects } = run(signedIn(), { type: "locate", unit: " " });
  assert.deepEqual(effects.filter((e) => e.type === "locate"), [{ type: "locate", unit: null }]);
  assert.equal(state.positions.locating, true);
  ({ effects } = run(state, { type: "locate", unit: "" }));
  assert.deepEqual(effects, []);                                       // already asking
  ({ state, effects } = run(state, { type: "located", lat: 48.85, lon: 2.35, alt: 35, course: null, speed: 0, accuracy: 12.4,
                                     at: T + 7.5, unit: null, now: T + 8 }));
  assert.deepEqual(requests(effects), [{ type: "position", lat: 48.85, lon: 2.35, alt: 35, speed: 0, at: T + 7.5 }]);
  assert.deepEqual([state.positions.locating, state.positions.note.text], [false, "Location of alice sent: 48.85000, 2.35000 (within 12 m)."]);
  ({ effects } = run(state, { type: "locate", unit: "walker" }, { type: "located", lat: 1, lon: 2, alt: -2e5, course: 360, speed: 2e4,
                                                                   at: T, unit: "walker", now: T }));
  assert.deepEqual(requests(effects), [{ type: "position", unit: "walker", lat: 1, lon: 2, at: T }]);   // outside the server's bounds: left out
  for (const [reason, words] of [["denied", /refused/], ["insecure", /HTTPS/], ["unsupported", /cannot give its location/],
                                 ["timeout", /too long/], ["unavailable", /could not find/], ["odd", /\(it broke\)/]]) {
    const r = run(state, { type: "locate" }, { type: "locate-failed", reason, message: "it broke" });
    assert.match(r.state.positions.note.text, words);
    assert.deepEqual([r.state.positions.locating, r.state.positions.note.kind], [false, "error"]);
  }
  ({ state, effects } = run(state, { type: "locate", unit: "x".repeat(33) }));
  assert.deepEqual([effects.filter((e) => e.type === "locate"), state.positions.errors.unit],
                   [[], "A unit name has at most 32 characters."]);
});

test("the panel: /positions shows and hides it, a unit is picked and unpicked; a refused positions request is said", () => {
  let { state, effects } = run(signedIn(), frame(pos("B", "b", 0), T), { type: "submit", line: "/positions", clientId: "c1" });
  assert.equal(state.positions.shown, true);
  assert.deepEqual(effects.filter((e) => e.type === "focus"), [{ type: "focus", target: "positions" }]);
  ({ state } = run(state, { type: "position-select", key: "B\nb" }));
  assert.equal(state.positions.selected, "B\nb");
  ({ state } = run(state, { type: "position-select", key: "B\nb" }));
  assert.equal(state.positions.selected, null);
  ({ state } = run(state, { type: "position-select", key: "B\nb" }, tick(T + 61)));
  assert.equal(state.positions.selected, null);                      // it expired
  ({ state } = run(state, { type: "positions-show", on: false },
                   { type: "request-failed", what: "positions", message: "unknown request type 'positions'", request: "positions" }));
  assert.deepEqual([state.positions.shown, state.positions.unavailable], [false, "unknown request type 'positions'"]);
  ({ state } = run(state, { type: "logout", all: false }));
  assert.equal(state.positions.units.size, 0);
});

test("reduce never changes the positions it is given", () => {
  const picture = (v) => JSON.stringify(v, (k, x) => (x instanceof Map ? ["Map", [...x]] : x));
  let state = signedIn();
  for (const e of [frame(pos("B", "b", 0), T), frame(pos("B", "b", 5), T + 5), frame({ type: "positions", units: [pos("C", "c", 1)] }, T + 6),
                   tick(T + 62), { type: "position-submit", lat: "x", lon: "", now: T }, { type: "locate" },
                   { type: "located", lat: 1, lon: 2, at: T, now: T }, { type: "positions-show", on: true }]) {
    const before = picture(state);
    const next = reduce(state, e);
    assert.equal(picture(state), before, JSON.stringify(e));
    state = next;
  }
});

test("ages read as seconds, minutes, hours", () => {
  assert.deepEqual([0, 12.7, 59, 60, 3599, 3600, 7500, -3, null].map(fmtAge),
                   ["0 s", "12 s", "59 s", "1 min", "59 min", "1 h", "2 h 5 min", "0 s", "?"]);
});

test("the plot keeps the aspect, centres one unit, goes the short way round the antimeridian, labels round values", () => {
  assert.deepEqual([0.013, 0.3, 0.7, 4, 80].map(niceStep), [0.01, 0.2, 0.5, 5, 100]);
  assert.deepEqual([degreeLabel(51.5, "lat", 1), degreeLabel(-0.25, "lon", 2), degreeLabel(0, "lat", 0), degreeLabel(190, "lon", 0)],
                   ["51.5° N", "0.25° W", "0° N", "170° W"]);
  const one = layout([{ key: "a", lat: 51.5, lon: -0.12 }], { width: 600, height: 400, pad: 20 });
  assert.deepEqual(one.points, [{ key: "a", x: 300, y: 200 }]);
  // 0.1° east at 60° N is as long as 0.05° north: the same number of pixels.
  const two = layout([{ key: "a", lat: 60, lon: 10 }, { key: "b", lat: 60.05, lon: 10.1 }], { width: 600, height: 400, pad: 20 });
  const [a, b] = two.points;
  assert.ok(Math.abs((b.x - a.x) - (a.y - b.y)) < 0.5, JSON.stringify(two.points));
  assert.ok(a.x >= 20 && b.x <= 580 && b.y >= 20 && a.y <= 380);
  assert.ok(two.lats.length >= 3 && two.lons.length >= 3);
  for (const l of two.lats) assert.ok(l.y >= 0 && l.y <= 400 && /^\d+\.\d+° N$/.test(l.label), l.label);
  assert.match(two.scale.label, /^\d+(\.\d+)? k?m$/);
  const wrap = layout([{ key: "w", lat: 0, lon: 179.9 }, { key: "e", lat: 0, lon: -179.9 }], { width: 600, height: 400 });
  assert.ok(wrap.points[1].x > wrap.points[0].x && wrap.points[1].x - wrap.points[0].x < 600);   // east of it, close by
  assert.ok(wrap.lons.every((l) => /^\d+(\.\d+)?° [EW]$/.test(l.label)));
  assert.deepEqual(layout([], { width: 10, height: 10 }).points, []);
});

test("longitude labels never run into one another: at a unit's zoom every other one is left out", () => {
  // One unit at 51.6° N in the panel's 412 x 265 box: longitude lines every 0.002° (about 40 px), labels
  // "0.206° W" about 52 px wide (they were all drawn, on top of each other).
  const g = layout([{ key: "a", lat: 51.6, lon: -0.2 }], { width: 412, height: 265, pad: 28 });
  const shown = lonLabelsShown(g.lons, { width: 412, charWidth: 6.5 });
  const drawn = g.lons.filter((_, i) => shown[i]);
  assert.ok(drawn.length >= 2 && drawn.length < g.lons.length, JSON.stringify(g.lons));
  for (let i = 1; i < drawn.length; i++) {
    assert.ok(drawn[i].x + 3 >= drawn[i - 1].x + 3 + drawn[i - 1].label.length * 6.5 + 8, JSON.stringify(drawn));
  }
  assert.ok(drawn.every((l) => l.x + 3 + l.label.length * 6.5 < 412));
  // Wide apart, every one is drawn.
  const lons = [{ x: 10, label: "1° E" }, { x: 100, label: "2° E" }, { x: 190, label: "3° E" }];
  assert.deepEqual(lonLabelsShown(lons, { width: 300, charWidth: 6.5 }), [true, true, true]);
  assert.deepEqual(lonLabelsShown(lons, { width: 200, charWidth: 6.5 }), [true, true, false]);
});

test("effects: locate asks the injected geolocation once and reports the fix, a refusal, or that there is none", async () => {
  const events = [];
  const dispatch = (e) => events.push(e);
  const fix = { coords: { latitude: 1.5, longitude: 2.5, altitude: null, heading: 90, speed: 1, accuracy: 8 }, timestamp: 1_700_000_000_500 };
  const asked = [];
  const geolocation = { getCurrentPosition: (ok, fail, options) => { asked.push(options); ok(fix); } };
  createEffects({ conn: {}, view: {}, dispatch, storage: null, geolocation, now: () => 1_700_000_001_000 })({ type: "locate", unit: "u" });
  assert.deepEqual(events.pop(), { type: "located", lat: 1.5, lon: 2.5, alt: null, course: 90, speed: 1, accuracy: 8,
                                   at: 1_700_000_000.5, unit: "u", now: 1_700_000_001 });
  assert.equal(asked.length, 1);
  const refusing = { getCurrentPosition: (ok, fail) => fail({ code: 1, message: "User denied Geolocation" }) };
  createEffects({ conn: {}, view: {}, dispatch, storage: null, geolocation: refusing })({ type: "locate", unit: null });
  assert.deepEqual(events.pop(), { type: "locate-failed", reason: "denied", message: "User denied Geolocation", unit: null });
  createEffects({ conn: {}, view: {}, dispatch, storage: null, geolocation: refusing, secure: false })({ type: "locate" });
  assert.equal(events.pop().reason, "insecure");                       // plain http: the browser says "denied"
  createEffects({ conn: {}, view: {}, dispatch, storage: null, geolocation: null })({ type: "locate" });
  assert.equal(events.pop().reason, "unsupported");
  const slow = { getCurrentPosition: (ok, fail) => fail({ code: 3, message: "Timeout expired" }) };
  createEffects({ conn: {}, view: {}, dispatch, storage: null, geolocation: slow })({ type: "locate" });
  assert.equal(events.pop().reason, "timeout");
  // The reducer turns them into a sent report or a message.
  const { effects } = run(signedIn(), { type: "locate" }, { type: "located", lat: 1.5, lon: 2.5, at: 5, now: 6 });
  assert.deepEqual(requests(effects), [{ type: "position", lat: 1.5, lon: 2.5, at: 5 }]);
});
