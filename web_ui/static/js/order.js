// Order keys and the placement of entries in a room's message list.
//
// A message's `order` is a JSON array whose lexicographic order is its place in
// the global order (for Lamport: [timestamp, origin site]). Elements compare as
// ordering/keys.py (the one home of the order key) does: numbers before strings, numbers by
// value, strings by code point; a key that is a prefix of another sorts first.
// A late message (one that arrived after its place had passed) is inserted at
// its place, not appended.

/** Compare two order elements; numbers sort before strings. */
function compareElement(a, b) {
  const an = typeof a === "number", bn = typeof b === "number";
  if (an !== bn) return an ? -1 : 1;
  if (an) return a < b ? -1 : a > b ? 1 : 0;
  const as = String(a), bs = String(b);
  // Compare by code point (as the server does), not by UTF-16 unit.
  const ai = as[Symbol.iterator](), bi = bs[Symbol.iterator]();
  for (;;) {
    const x = ai.next(), y = bi.next();
    if (x.done || y.done) return x.done === y.done ? 0 : x.done ? -1 : 1;
    const cx = x.value.codePointAt(0), cy = y.value.codePointAt(0);
    if (cx !== cy) return cx < cy ? -1 : 1;
  }
}

/** Lexicographic comparison of two order keys (arrays); missing keys sort first. */
export function compareOrder(a, b) {
  const x = Array.isArray(a) ? a : [], y = Array.isArray(b) ? b : [];
  const n = Math.min(x.length, y.length);
  for (let i = 0; i < n; i++) {
    const c = compareElement(x[i], y[i]);
    if (c !== 0) return c;
  }
  return x.length - y.length < 0 ? -1 : x.length > y.length ? 1 : 0;
}

// Entries of a room: delivered messages and notices ("group" 0, by order key;
// a notice sits after the message it was anchored to), then the user's own
// messages still on their way ("group" 1, in the order they were typed).
export function compareEntries(a, b) {
  if (a.group !== b.group) return a.group - b.group;
  const c = compareOrder(a.order, b.order);
  if (c !== 0) return c;
  if (a.sub !== b.sub) return a.sub - b.sub;
  if (a.kind === "message" && b.kind === "message") return a.id < b.id ? -1 : a.id > b.id ? 1 : 0;
  return a.seq - b.seq;
}

/** Index at which `entry` goes into the sorted array `entries` (after equal ones). */
export function insertIndex(entries, entry, cmp = compareEntries) {
  let lo = 0, hi = entries.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (cmp(entries[mid], entry) <= 0) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}
