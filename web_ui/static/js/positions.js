// Units' positions: the newest report of each unit, as the chat server tells it, and the user's own reports.
//
// Theory of operation
// -------------------
// The slice lives in `state.positions` (see `emptyPositions`) and only this module
// replaces it. At every `welcome` (a sign-in or a resume) the page asks `positions {}`;
// the server answers `positions {units: [position...]}` and from then on sends
// `position {site, unit, user?, lat, lon, alt?, course?, speed?, at, expires_at}`
// whenever a unit's newest report changes (docs/chat-protocol.md). Every frame is
// decoded once (`decodePosition`) into a frozen record with explicit bounds
// (latitude -90..90, longitude -180..180, names of at most MAX_NAME characters
// without control characters, finite times); a report that fails is not shown and
// is counted (`rejected`), one whose optional field (alt, course, speed) is bad
// keeps the rest. Bad input never changes what is already shown.
//
// A unit is known by (site, unit): a report replaces the one held only if its `at`
// is newer (a report that arrives late never hides a newer one), and a report past
// its `expires_at` is gone: dropped at the `tick` that passes it, never shown when it
// comes already expired. A `positions` snapshot is the server's whole set: units it
// does not list are dropped, those it lists keep whichever report is newer. The
// reducer never reads the clock: `now` (Unix seconds) comes in with frames and ticks,
// and the age shown is `now - at` (`ageOf`), never negative (the server's and the
// browser's clocks may differ a little).
//
// The user reports a position by hand (`position-submit`: the form's lat, lon and
// optional unit, validated by `parseReport`, which says what is wrong with each
// field), or with the browser's location (`locate` asks the effects layer, which
// answers `located` or `locate-failed` with a reason: the browser has no
// geolocation, the page is not a secure context, the user refused, no fix, too slow).
// Either way the page sends `position {unit?, lat, lon, alt?, course?, speed?, at}`
// (no unit: the server uses the user's name) as a request, so a report made while
// the connection is down goes out at the resume, and a refusal is shown by the form.

import { effect, mapWith, request } from "./draft.js";

export const MAX_NAME = 64;           // characters in a unit or site name the page shows
export const MAX_UNITS = 10000;       // units kept; past it, the oldest reports make room for the newest
// A unit the user reports for: the server's rule (chat_server/protocol.py UNIT_NAME; tests/web_ui/test_web_contracts.py
// checks that both take the same names). Units shown may have been named elsewhere (TAK): MAX_NAME bounds those.
export const UNIT_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9 _.#:+-]{0,30}[A-Za-z0-9_.#:+-])?$/;
const MAX_UNIT = 32;
const MAX_ALT = 100000;               // metres, either side of sea level: the server's bound for a report's altitude
const MAX_SPEED = 10000;              // metres per second: the server's bound
const CONTROL = /[\u0000-\u001f\u007f-\u009f]/;

/** The slice before anything is known. */
export function emptyPositions() {
  return {
    units: new Map(),                 // "site\nunit" -> position (frozen, see decodePosition)
    now: null,                        // the latest time the reducer was told (Unix seconds), for ages
    shown: false,                     // the panel is open
    selected: null,                   // the key of the unit picked in the plot or the table
    rejected: 0,                      // reports not shown because they were malformed
    unavailable: "",                  // why the server refused `positions {}`, if it did
    errors: {},                       // {lat?, lon?, unit?}: what is wrong with the form's fields
    note: null,                       // {text, kind: "info" | "ok" | "error"}: the last report's outcome
    locating: false,                  // the browser is finding the location
  };
}

// --- decoding --------------------------------------------------------------------------------

const finite = (v) => (typeof v === "number" && Number.isFinite(v) ? v : null);
const within = (v, lo, hi) => (v !== null && v >= lo && v <= hi ? v : null);

/** A name the page may show: a non-empty string of at most MAX_NAME characters without control characters. */
function nameOf(v) {
  return typeof v === "string" && v.length > 0 && [...v].length <= MAX_NAME && !CONTROL.test(v) ? v : null;
}

export const keyOf = (site, unit) => `${site}\n${unit}`;

/** A `position` frame (or an entry of `positions.units`) as a frozen record, or null when it is malformed. */
export function decodePosition(f) {
  if (!f || typeof f !== "object") return null;
  const site = nameOf(f.site);
  const unit = nameOf(f.unit);
  const lat = within(finite(f.lat), -90, 90);
  const lon = within(finite(f.lon), -180, 180);
  const at = finite(f.at);
  const expiresAt = finite(f.expires_at);
  if (site === null || unit === null || lat === null || lon === null || at === null || expiresAt === null) return null;
  return Object.freeze({
    key: keyOf(site, unit), site, unit, user: nameOf(f.user), lat, lon,
    alt: finite(f.alt), course: within(finite(f.course), 0, 360), speed: within(finite(f.speed), 0, Infinity),
    at, expiresAt,
  });
}

// --- queries (also used by the view) ---------------------------------------------------------

/** Seconds since the report was made, at `now` (never negative); null when the time is not known yet. */
export function ageOf(p, now) {
  return typeof now === "number" ? Math.max(0, now - p.at) : null;
}

/** How far the report is through its life, 0 (just made) to 1 (expiring): the plot fades it. */
export function lifeSpent(p, now) {
  const life = p.expiresAt - p.at;
  if (typeof now !== "number" || !(life > 0)) return 0;
  return Math.min(1, Math.max(0, (now - p.at) / life));
}

/** The units shown, sorted by unit (ignoring case, then as written), then site. */
export function unitList(state) {
  const cmp = (a, b) => (a < b ? -1 : a > b ? 1 : 0);
  return [...state.positions.units.values()]
    .sort((a, b) => cmp(a.unit.toLowerCase(), b.unit.toLowerCase()) || cmp(a.unit, b.unit) || cmp(a.site, b.site));
}

export function hasUnits(state) {
  return !!state.positions && state.positions.units.size > 0;
}

// --- the reducer's part ----------------------------------------------------------------------

function edit(s, patch) {
  s.positions = { ...s.positions, ...patch };
}

const isNewer = (p, held) => !held || p.at > held.at;
const alive = (p, now) => typeof now !== "number" || p.expiresAt > now;
const nowOf = (s, now) => (typeof now === "number" && Number.isFinite(now) ? now : s.positions.now);

/** `welcome`: ask for every unit's newest report (again at a resume: what changed meanwhile comes with it). */
export function askPositions(s) {
  edit(s, { unavailable: "" });
  request(s, { type: "positions" }, { what: "positions" });
}

/** `position`: one unit's newest report. */
export function onPosition(s, f, now) {
  const t = nowOf(s, now);
  const p = decodePosition(f);
  if (!p) { edit(s, { rejected: s.positions.rejected + 1, now: t }); return; }
  const held = s.positions.units.get(p.key);
  if (!isNewer(p, held) || !alive(p, t)) { if (t !== s.positions.now) edit(s, { now: t }); return; }
  let units = mapWith(s.positions.units, p.key, p);
  if (units.size > MAX_UNITS) units = newest(units);
  edit(s, { units, now: t, selected: units.has(s.positions.selected) ? s.positions.selected : null });
}

/** The MAX_UNITS newest reports of `units`. */
function newest(units) {
  return new Map([...units].sort(([, a], [, b]) => b.at - a.at).slice(0, MAX_UNITS));
}

/** `positions {units}`: the server's whole set, the answer to `positions {}`. */
export function onPositionsSnapshot(s, f, now) {
  const t = nowOf(s, now);
  const listed = Array.isArray(f.units) ? f.units : [];
  const held = s.positions.units;
  const units = new Map();
  let rejected = 0;
  for (const entry of listed) {
    const p = decodePosition(entry);
    if (!p) { rejected += 1; continue; }
    if (!alive(p, t)) continue;
    const mine = units.get(p.key) || held.get(p.key);
    units.set(p.key, isNewer(p, mine) ? p : mine);
  }
  const kept = units.size > MAX_UNITS ? newest(units) : units;
  const selected = kept.has(s.positions.selected) ? s.positions.selected : null;
  edit(s, { units: kept, now: t, selected, rejected: s.positions.rejected + rejected, unavailable: "" });
}

/** A tick (`now`): drop the reports past their expiry; the ages move on. */
export function onPositionsTick(s, now) {
  const t = nowOf(s, now);
  if (t === s.positions.now) return;
  let units = s.positions.units;
  for (const [key, p] of s.positions.units) {
    if (alive(p, t)) continue;
    if (units === s.positions.units) units = new Map(units);
    units.delete(key);
  }
  const selected = units.has(s.positions.selected) ? s.positions.selected : null;
  edit(s, { units, now: t, selected });
}

export function showPositions(s, on) {
  edit(s, { shown: !!on });
  if (on) effect(s, "focus", { target: "positions" });
}

export function selectUnit(s, key) {
  edit(s, { selected: s.positions.units.has(key) && s.positions.selected !== key ? key : null });
}

// --- the user's reports ----------------------------------------------------------------------

const NUMBER = /^([+-]?)(\d+(?:\.\d*)?|\.\d+)\s*([a-z]?)$/i;

/** Degrees typed in a field: "51.5012", "-0.12", "51.5012 N", "0.12 W"; {value} or {error}. */
function parseDegrees(text, { name, limit, positive, negative }) {
  const t = String(text ?? "").trim().replace(/°/g, "");
  if (!t) return { error: `Give a ${name} in degrees (${-limit} to ${limit}).` };
  const m = NUMBER.exec(t);
  const hemisphere = m ? m[3].toUpperCase() : "";
  if (!m || (hemisphere && hemisphere !== positive && hemisphere !== negative)) {
    return { error: `The ${name} must be a number of degrees, like ${name === "latitude" ? "51.5012 or 51.5012 N" : "-0.1245 or 0.1245 W"}.` };
  }
  if (hemisphere && m[1]) return { error: `The ${name} has a sign and ${hemisphere}: give one of them.` };
  const value = Number(m[2]) * (m[1] === "-" || hemisphere === negative ? -1 : 1);
  if (Math.abs(value) > limit) return { error: `The ${name} must be between ${-limit} and ${limit} degrees.` };
  return { value: value === 0 ? 0 : value };            // never -0 on the wire
}

/** The report form's fields: {ok: true, report: {lat, lon, unit?}} or {ok: false, errors: {lat?, lon?, unit?}}. */
export function parseReport({ lat, lon, unit }) {
  const errors = {};
  const la = parseDegrees(lat, { name: "latitude", limit: 90, positive: "N", negative: "S" });
  const lo = parseDegrees(lon, { name: "longitude", limit: 180, positive: "E", negative: "W" });
  if (la.error) errors.lat = la.error;
  if (lo.error) errors.lon = lo.error;
  const u = parseUnit(unit);
  if (u.error) errors.unit = u.error;
  if (Object.keys(errors).length) return { ok: false, errors };
  const report = { lat: la.value, lon: lo.value };
  if (u.value) report.unit = u.value;
  return { ok: true, report };
}

/** The form's unit field: {value} ("" for none: the server reports the user) or {error}. */
function parseUnit(text) {
  const u = String(text ?? "").trim();
  if (!u) return { value: "" };
  if ([...u].length > MAX_UNIT) return { error: `A unit name has at most ${MAX_UNIT} characters.` };
  if (!UNIT_NAME.test(u)) {
    return { error: "A unit name is a callsign: letters, digits, spaces inside and _ . # : + - (starting with a letter or digit)." };
  }
  return { value: u };
}

const fmt = (v) => v.toFixed(5);

function sendReport(s, report, at, how, extra = "") {
  const frame = { type: "position", ...(report.unit ? { unit: report.unit } : {}), lat: report.lat, lon: report.lon };
  for (const k of ["alt", "course", "speed"]) if (typeof report[k] === "number") frame[k] = report[k];
  frame.at = at;
  request(s, frame, { what: "position" });
  const who = report.unit || s.user || "you";
  edit(s, { errors: {}, note: { text: `${how} ${who} sent: ${fmt(report.lat)}, ${fmt(report.lon)}${extra}.`, kind: "ok" } });
}

/** The form was submitted: send the report, or say what is wrong with it. */
export function submitReport(s, e) {
  const parsed = parseReport(e);
  if (!parsed.ok) {
    edit(s, { errors: parsed.errors, note: null });
    const first = ["lat", "lon", "unit"].find((k) => parsed.errors[k]);
    effect(s, "focus", { target: `position-${first}` });
    return;
  }
  sendReport(s, parsed.report, Number(e.now) || 0, "Position of");
  effect(s, "clear-input", { id: "position-lat" });
  effect(s, "clear-input", { id: "position-lon" });
}

/** "Use my location": ask the browser (once at a time). */
export function locate(s, e) {
  if (s.positions.locating) return;
  const unit = parseUnit(e.unit);
  if (unit.error) {
    edit(s, { errors: { unit: unit.error }, note: null });
    effect(s, "focus", { target: "position-unit" });
    return;
  }
  edit(s, { locating: true, errors: {}, note: { text: "Asking the browser for this device's location…", kind: "info" } });
  effect(s, "locate", { unit: unit.value || null });
}

/** The browser's location came: send it (`at`: when the browser took the fix). */
export function located(s, e) {
  edit(s, { locating: false });
  const lat = within(finite(e.lat), -90, 90);
  const lon = within(finite(e.lon), -180, 180);
  if (lat === null || lon === null) {
    edit(s, { note: { text: "The browser gave a location that is not a position on Earth; nothing was sent.", kind: "error" } });
    return;
  }
  // What the server takes (chat_server/protocol.py): a field the browser gives outside it is left out, not refused.
  const course = finite(e.course);
  const report = { lat, lon, alt: within(finite(e.alt), -MAX_ALT, MAX_ALT), course: course !== null && course >= 0 && course < 360 ? course : null,
                   speed: within(finite(e.speed), 0, MAX_SPEED) };
  if (e.unit) report.unit = e.unit;
  const at = finite(e.at) ?? (Number(e.now) || 0);
  const accuracy = finite(e.accuracy);
  sendReport(s, report, at, "Location of", accuracy !== null && accuracy >= 0 ? ` (within ${Math.round(accuracy)} m)` : "");
}

const LOCATE_WORDS = {
  unsupported: "This browser cannot give its location: enter the position by hand.",
  insecure: "The browser gives its location only to pages served over HTTPS (or from this machine): " +
            "enter the position by hand, or use the site's https address.",
  denied: "The location was refused (by you or the browser's settings): allow it for this site, or enter the position by hand.",
  unavailable: "The device could not find its location: enter the position by hand.",
  timeout: "The device took too long to find its location: try again, or enter the position by hand.",
};

/** The browser gave no location: say why (`reason`: one of LOCATE_WORDS' keys). */
export function locateFailed(s, e) {
  const text = LOCATE_WORDS[e.reason] || `The browser gave no location (${e.message || "no reason given"}): enter the position by hand.`;
  edit(s, { locating: false, note: { text, kind: "error" } });
}

/** A request of this module was refused or cut off. */
export function positionsFailed(s, e, message) {
  if (e.what === "positions") edit(s, { unavailable: message });
  else edit(s, { note: { text: `The position was not sent: ${message}`, kind: "error" } });
}
