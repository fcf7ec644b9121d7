// Pages of a room's history merged into its entries, with a "gap" entry wherever messages
// between two loaded stretches are not loaded.
//
// Theory of operation
// -------------------
// A room's log starts as one stretch (the last messages, from `joined`) and grows at
// the old end (`history {before}`). A jump to a message that is not loaded (a search
// result, the line a reply answers) fetches the page around it (`history {around}`),
// which may sit far from what is loaded: between the two stretches a gap entry says
// that messages are missing there and fetches them (`history {before: the message
// after the gap}`) a page at a time, until the page reaches the older stretch and
// the gap closes. A page knows from the server whether more messages exist before
// and after it (`more_before`, `more_after`); one fetched `before` a loaded message
// is contiguous with it. The rules, for a page P (oldest F, newest L):
//
//   * a gap before a message inside P (other than F), or before the message P was
//     fetched before, is filled: it goes;
//   * before F: a gap if more exist before P, F was not loaded, and something older is;
//   * after L: a gap before the next loaded message if more exist after P and L was
//     not loaded (a page fetched before a message has nothing missing after it).
//
// Everything here is a pure function of a room (see draft.js for the shapes).

import { compareEntries, compareOrder } from "./order.js";

export function gapEntry(next) {
  return { kind: "gap", key: `g:${next.id}`, group: 0, sub: -1, order: next.order, seq: 0, beforeId: next.id, loading: false };
}

/** Merge message entries of one page into `room`; returns the new room (with `more` updated). */
export function mergePage(room, pageEntries, { moreBefore = false, moreAfter = false, contiguousWith = null } = {}) {
  const page = pageEntries.slice().sort(compareEntries);
  const loaded = new Map(room.entries.filter((e) => e.kind === "message").map((e) => [e.id, e]));
  const pageIds = new Set(page.map((e) => e.id));
  const first = page[0], last = page[page.length - 1];
  const filled = (g) => g.beforeId === contiguousWith || (pageIds.has(g.beforeId) && (!first || g.beforeId !== first.id));
  let entries = room.entries.filter((e) => !(e.kind === "gap" && filled(e)));
  const fresh = page.filter((e) => !loaded.has(e.id));
  entries = entries.concat(fresh);
  const gaps = [];
  if (first && moreBefore && !loaded.has(first.id) &&
      [...loaded.values()].some((e) => compareOrder(e.order, first.order) < 0)) gaps.push(gapEntry(first));
  if (last && moreAfter && contiguousWith === null && !loaded.has(last.id)) {
    let next = null;
    for (const e of loaded.values()) {
      if (compareOrder(e.order, last.order) > 0 && (!next || compareEntries(e, next) < 0)) next = e;
    }
    if (next) gaps.push(gapEntry(next));
  }
  for (const g of gaps) if (!entries.some((e) => e.key === g.key)) entries.push(g);
  entries.sort(compareEntries);
  const oldest = entries.find((e) => e.kind === "message");
  const more = first && oldest && oldest.id === first.id ? moreBefore : room.more;
  return { ...room, entries, more };
}

/** Is the message `msgId` loaded in the room? */
export function hasMessage(room, msgId) {
  return !!room && room.entries.some((e) => e.kind === "message" && e.id === msgId);
}
