// Messages lost in a disconnection and brought back by repair, as the user reads them.
//
// Recovered replaces lost (docs/chat-protocol.md, `missing`): each origin has one notice in
// every joined room (key `n:missing:<origin>`), which every report replaces (removed, then put
// at the bottom, where the user looks):
//   - a first report (`missing` without `recovered`) adds to what is still missing from that
//     origin (one disconnection may come as several frames);
//   - a revision (`recovered`: how many came back since the last one; `expired`: how many
//     repair answered with an expired stub, messages that existed and expired before they
//     reached this site, neither lost nor shown) says what is still missing, and what came
//     back or expired adds up;
//   - the notice reads "N messages from site C were lost..." (red), then "Recovered N ...; up to
//     M still missing" (amber), then "Recovered N messages from site C" (green: all came back);
//   - `welcome`'s `missing` ({origin: count}, what is still missing after repair) reconciles a
//     page that was away when a revision went out: an origin not listed loses its notice, one
//     whose count changed is revised.
// The same rules as the terminal clients (chat_tui/losses.py).

import { addNotice, announce, joinedRooms, mapWith, mapWithout, putRoom, removeEntry } from "./draft.js";
import { plural } from "./words.js";

const countOf = (v) => (Number.isInteger(v) && v > 0 ? v : 0);

/** A `missing` frame: a report of lost messages, or a revision after repair brought some back. */
export function onMissing(s, f) {
  const origin = String(f.origin);
  const count = countOf(f.count);
  let { lost, back, gone } = s.losses.get(origin) || { lost: 0, back: 0, gone: 0 };
  gone = gone || 0;
  if ("recovered" in f || "expired" in f) {
    lost = count;
    back += countOf(f.recovered);
    gone += countOf(f.expired);
  } else {
    if (lost === 0) { back = 0; gone = 0; }     // a new loss after everything came back: a new story
    lost += count;
  }
  s.losses = mapWith(s.losses, origin, { lost, back, gone });
  showLoss(s, origin, true);
}

/** `welcome`'s `missing` after a resume: what is still missing now, per origin. */
export function reconcileLosses(s, missing) {
  if (!missing || typeof missing !== "object") return;
  for (const [origin, { lost, back, gone }] of [...s.losses]) {
    const count = countOf(missing[origin]);
    if (count === 0) {
      s.losses = mapWithout(s.losses, origin);
      dropNotices(s, origin);
    } else if (count !== lost) {
      s.losses = mapWith(s.losses, origin, { lost: count, back, gone });
      showLoss(s, origin, false);
    }
  }
}

/** The words and the class of an origin's notice. */
export function lossWords(origin, { lost, back, gone = 0 }) {
  const one = lost === 1;
  if (back && !gone && !lost) return [`Recovered ${plural(back, "message")} from site ${origin}: shown in place, marked repaired.`, "recovered"];
  if (back || gone) {
    const parts = [];
    if (back) parts.push(`Recovered ${plural(back, "message")} from site ${origin}, shown in place, marked repaired`);
    if (gone) parts.push(`${back ? "" : `From site ${origin}: `}${plural(gone, "message")} expired before ` +
                         `reaching this site (not lost, not shown)`);
    const text = parts.join("; ");
    return lost ? [`${text}; up to ${plural(lost, "message")} still missing.`, "partly"] : [`${text}.`, "recovered"];
  }
  return [`${plural(lost, "message")} from site ${origin} ${one ? "was" : "were"} lost while ${origin} was ` +
          `disconnected; repair brings ${one ? "it" : "them"} back if another site holds ${one ? "it" : "them"}.`, "missing"];
}

function dropNotices(s, origin) {
  const key = `n:missing:${origin}`;
  for (const r of [...s.rooms.values()]) if (r.entries.some((e) => e.key === key)) putRoom(s, removeEntry(r, key));
}

function showLoss(s, origin, tell) {
  const [text, kind] = lossWords(origin, s.losses.get(origin));
  dropNotices(s, origin);
  const rooms = joinedRooms(s);
  for (const r of rooms) addNotice(s, r.name, text, kind, `n:missing:${origin}`);
  if (!rooms.length) s.banner = { text, kind: "info" };
  if (tell) announce(s, text);
}
