// Security labels in the page: the mission's scheme, dominance, the labels a user may send, how a label reads
// and which colours its banner wears.
//
// Theory of operation
// -------------------
// A mission with labels says so in `welcome`: `labels {levels (lowest first), caveats, default}` and the user's
// `clearance {level, caveats}`; without them the mission is unlabeled and the page shows nothing of labels
// (`schemeOf` gives null, and every function here takes a null scheme as "no labels"). A label in the page is
// `{level, rank, caveats}` (rank: the level's place in the scheme, 0 the lowest; caveats sorted), read once from
// the server's JSON (`labelOf`, which also takes the people's spelling) or from what the user typed (`parseLabel`).
// A room's label is its floor (`joined`, `rooms` and `directory` entries carry it); a message's label is at or
// above its room's; the composer offers `sendable(scheme, clearance, floor)`: the labels the clearance dominates
// that dominate the floor, in the order contracts/labels.py `Scheme.sendable` gives them (the same rule, tested
// against it: tests/web_ui/test_web_labels.py).
//
// Colours: the conventional banner colours by level name (UNCLASSIFIED green, CONFIDENTIAL blue, SECRET red,
// TOP SECRET orange; CUI and RESTRICTED purple), any other level by its place in the scheme along the same
// ladder; the text is black or white, whichever contrasts more (WCAG relative luminance). The table's Python
// copy is chat_tui/labels.py, compared value for value by the same test.
//
// Pure: no DOM, no state; the reducer (state.js, rooms.js) and the view use it.

export const LEVEL_COLOURS = {
  UNCLASSIFIED: "#007a33",
  OFFICIAL: "#007a33",
  CUI: "#502b85",
  RESTRICTED: "#502b85",
  CONFIDENTIAL: "#0033a0",
  SECRET: "#c8102e",
  "TOP SECRET": "#ff8c00",
};
/** Levels the table does not name, by their place in the scheme (lowest to highest). */
export const RANK_COLOURS = ["#007a33", "#502b85", "#0033a0", "#c8102e", "#ff8c00"];
export const UNKNOWN_COLOUR = "#5f6b76";        // a label the scheme does not know (shown, never trusted)
export const REL_TO = "REL TO";
const MAX_LEVELS = 16;
const MAX_CAVEATS = 64;
const NAME = /^[A-Z0-9][A-Z0-9_ -]{0,31}$/;

function luminance(hex) {
  const lin = (i) => {
    const c = parseInt(hex.slice(i, i + 2), 16) / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  };
  return 0.2126 * lin(1) + 0.7152 * lin(3) + 0.0722 * lin(5);
}

/** "#000000" or "#ffffff": the text colour that contrasts more with the background `bg` ("#rrggbb"). */
export function textColour(bg) {
  const l = luminance(bg);
  return (l + 0.05) / 0.05 >= 1.05 / (l + 0.05) ? "#000000" : "#ffffff";
}

/** The banner colours of a level: {bg, fg}. `rank` and `count` place a level the table does not name. */
export function levelColours(level, rank, count) {
  let bg = LEVEL_COLOURS[level];
  if (!bg) {
    if (typeof rank !== "number" || rank < 0 || !(count > 0)) bg = UNKNOWN_COLOUR;
    else {
      const place = count > 1 ? Math.min(rank, count - 1) / (count - 1) : 0;
      bg = RANK_COLOURS[Math.round(place * (RANK_COLOURS.length - 1))];
    }
  }
  return { bg, fg: textColour(bg) };
}

/** The colours of a label of `scheme`. */
export function labelColours(scheme, label) {
  if (!label || label.unknown) return { bg: UNKNOWN_COLOUR, fg: textColour(UNKNOWN_COLOUR) };
  return levelColours(label.level, label.rank, scheme ? scheme.levels.length : 0);
}

/** A label as people write it: "SECRET" or "SECRET//REL TO GBR, USA". */
export function labelText(label) {
  if (!label) return "";
  return label.caveats.length ? `${label.level}//${REL_TO} ${label.caveats.join(", ")}` : label.level;
}

/** The label in the chat protocol: {level, caveats}. */
export function labelJson(label) {
  return { level: label.level, caveats: [...label.caveats] };
}

export function sameLabel(a, b) {
  if (!a || !b) return a === b;
  return a.level === b.level && a.caveats.length === b.caveats.length && a.caveats.every((c, i) => c === b.caveats[i]);
}

/** Does clearance `c` dominate label `l` (its level at least l's, every caveat of l held)? */
export function dominates(c, l) {
  if (!c || !l || c.unknown || l.unknown) return false;
  return c.rank >= l.rank && l.caveats.every((x) => c.caveats.includes(x));
}

function build(scheme, level, caveats) {
  if (typeof level !== "string") return null;
  const lv = level.trim().toUpperCase();
  const rank = scheme.levels.indexOf(lv);
  if (rank < 0 || !Array.isArray(caveats) || caveats.length > MAX_CAVEATS) return null;
  const cvs = new Set();
  for (const c of caveats) {
    if (typeof c !== "string") return null;
    const cu = c.trim().toUpperCase();
    if (!scheme.caveats.includes(cu)) return null;
    cvs.add(cu);
  }
  return { level: lv, rank, caveats: [...cvs].sort() };
}

/**
 * A label as people write it, read against `scheme`: "SECRET", "SECRET//REL TO GBR, USA", "secret//gbr/usa".
 * {ok: true, label} or {ok: false, error} naming what is wrong.
 */
export function parseLabel(scheme, text) {
  if (!scheme) return { ok: false, error: "this mission has no labels" };
  if (typeof text !== "string" || text.length > 512) return { ok: false, error: "a label is text such as SECRET//REL TO GBR, USA" };
  const cut = text.indexOf("//");
  const level = (cut < 0 ? text : text.slice(0, cut)).trim();
  let caveats = [];
  if (cut >= 0) {
    let rest = text.slice(cut + 2).trim();
    if (rest.toUpperCase().startsWith(REL_TO)) rest = rest.slice(REL_TO.length);
    caveats = rest.split(/[,/\s]+/).filter(Boolean);
    if (!caveats.length) return { ok: false, error: `no caveat after "//" in ${text.slice(0, 40)}` };
  }
  if (!scheme.levels.includes(level.toUpperCase())) {
    return { ok: false, error: `unknown level ${level.slice(0, 40) || "(none)"} (levels: ${scheme.levels.join(", ")})` };
  }
  const bad = caveats.find((c) => !scheme.caveats.includes(c.toUpperCase()));
  if (bad !== undefined) {
    return { ok: false, error: `unknown caveat ${bad.slice(0, 40)} (caveats: ${scheme.caveats.join(", ") || "none"})` };
  }
  return { ok: true, label: build(scheme, level, caveats) };
}

/**
 * A label from the server ({level, caveats} or the people's text) read against `scheme`; null when the mission
 * is unlabeled or the value is absent. A label the scheme does not know comes back `unknown` (shown as it came,
 * in grey; it dominates nothing and nothing dominates it).
 */
export function labelOf(scheme, value) {
  if (!scheme || value === undefined || value === null) return null;
  if (typeof value === "string") {
    const p = parseLabel(scheme, value);
    return p.ok ? p.label : { level: value.slice(0, 64), rank: -1, caveats: [], unknown: true };
  }
  if (typeof value !== "object" || Array.isArray(value)) return null;
  const label = build(scheme, value.level, value.caveats === undefined ? [] : value.caveats);
  if (label) return label;
  const caveats = Array.isArray(value.caveats) ? value.caveats.filter((c) => typeof c === "string").slice(0, 8) : [];
  return { level: String(value.level).slice(0, 64), rank: -1, caveats: caveats.map((c) => c.slice(0, 16)).sort(),
           unknown: true };
}

/**
 * The mission's labels from a `welcome` frame: {levels, caveats, default, clearance}, or null for an unlabeled
 * mission (no `labels`, or one that is not well formed: the page then shows no labels rather than wrong ones).
 */
export function schemeOf(welcome) {
  const t = welcome && welcome.labels;
  if (!t || typeof t !== "object" || !Array.isArray(t.levels) || !t.levels.length || t.levels.length > MAX_LEVELS) return null;
  const caveats = Array.isArray(t.caveats) ? t.caveats : [];
  if (caveats.length > MAX_CAVEATS) return null;
  if (![...t.levels, ...caveats].every((n) => typeof n === "string" && NAME.test(n))) return null;
  const scheme = { levels: [...t.levels], caveats: [...caveats], default: null, clearance: null };
  scheme.default = labelOf(scheme, t.default) || { level: scheme.levels[0], rank: 0, caveats: [] };
  if (scheme.default.unknown) scheme.default = { level: scheme.levels[0], rank: 0, caveats: [] };
  const clearance = labelOf(scheme, welcome.clearance);
  scheme.clearance = clearance && !clearance.unknown ? clearance : scheme.default;
  return scheme;
}

function subsetsOf(extra) {
  if (extra.length <= 6) {
    const out = [];
    for (let mask = 0; mask < 1 << extra.length; mask++) out.push(extra.filter((_, i) => (mask >> i) & 1));
    return out;
  }
  return [[], ...extra.map((c) => [c]), extra];       // many caveats: none of them, each alone, or all of them
}

function compareLists(a, b) {
  for (let i = 0; i < Math.min(a.length, b.length); i++) if (a[i] !== b[i]) return a[i] < b[i] ? -1 : 1;
  return a.length - b.length;
}

/**
 * Every label a holder of `clearance` may put on a message in a room whose floor is `floor`: dominated by the
 * clearance, dominating the floor; lowest level first, fewer caveats first (contracts.labels Scheme.sendable).
 */
export function sendable(scheme, clearance, floor) {
  if (!scheme || !dominates(clearance, floor)) return [];
  const extra = clearance.caveats.filter((c) => !floor.caveats.includes(c)).sort();
  const out = [];
  for (let r = floor.rank; r <= clearance.rank; r++) {
    for (const sub of subsetsOf(extra)) {
      out.push({ level: scheme.levels[r], rank: r, caveats: [...new Set([...floor.caveats, ...sub])].sort() });
    }
  }
  return out.sort((a, b) => a.rank - b.rank || a.caveats.length - b.caveats.length || compareLists(a.caveats, b.caveats));
}
