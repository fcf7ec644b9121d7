// Message expiry: a message may expire; past its `expires_at` the page shows it as expired.
//
// Theory of operation
// -------------------
// A `say` may carry `expires_in` (seconds, EXPIRES_IN_MIN..EXPIRES_IN_MAX, the server's
// bounds: chat_server/protocol.py); the composer's "expires in" choice (`state.expiresIn`,
// null: never) sets it for every line sent until the user changes it back, and
// `/expire SECONDS TEXT` sends one line with it. The server hands the message to RCM with
// `expires_at` (Unix seconds) and every `message` frame carries it; a frame the server
// built after it (history, search, a resume) says `expired: true` too.
//
// A message entry holds `expiresAt` (a finite number, or null: never) and `expired`. The
// reducer never reads the clock: an entry is built expired when its frame says so or when
// `now` (the frame's arrival) is past `expiresAt`, and the `tick` that passes `expiresAt`
// marks it (`onExpiryTick`); `state.expiring` lists the entries still to mark ("room\nmsg_id"
// -> expiresAt), so ticks run while it is not empty and cost nothing until the first is due.
//
// What an expired line shows (docs/web-ui.md): greyed, with an "expired" mark; its text stays
// readable for those who already had it (the server keeps serving it, marked, in history
// and search). A message that expired before it reached this site never comes here: the
// server shows nothing of it (a `missing` notice it answers counts it as `expired`, losses.js).

import { findEntry, mapWith, mapWithout, replaceEntry } from "./draft.js";

export const EXPIRES_IN_MIN = 1;
export const EXPIRES_IN_MAX = 7 * 86400;
/** The composer's choices: [seconds or null, label]. */
export const EXPIRY_CHOICES = [[null, "Never"], [300, "5 min"], [3600, "1 hour"], [86400, "1 day"], [EXPIRES_IN_MAX, "7 days"]];

/** A frame's `expires_at` as a finite number of Unix seconds, or null. */
export function expiresAtOf(f) {
  return typeof f.expires_at === "number" && Number.isFinite(f.expires_at) ? f.expires_at : null;
}

/** A valid `expires_in` (seconds), or null. */
export function validExpiresIn(v) {
  return typeof v === "number" && Number.isFinite(v) && v >= EXPIRES_IN_MIN && v <= EXPIRES_IN_MAX ? v : null;
}

/** `/expire SECONDS TEXT`'s seconds: "90", "90s", "15m", "2h", "1d" -> seconds, or null when not a valid duration. */
export function parseDuration(word) {
  const m = /^([1-9][0-9]{0,6})([smhd]?)$/.exec(String(word || "").trim());
  if (!m) return null;
  const unit = { "": 1, s: 1, m: 60, h: 3600, d: 86400 }[m[2]];
  return validExpiresIn(Number(m[1]) * unit);
}

/** The entry fields of a message frame seen at `now` (Unix seconds; undefined: not known). */
export function expiryFields(f, now) {
  const expiresAt = expiresAtOf(f);
  const expired = f.expired === true || (expiresAt !== null && typeof now === "number" && now >= expiresAt);
  return { expiresAt, expired };
}

const keyOf = (room, msgId) => `${room}\n${msgId}`;

/** After an entry was put in its room: remember it until it expires. */
export function trackExpiry(s, roomName, entry) {
  if (entry.expiresAt === null || entry.expired) return;
  s.expiring = mapWith(s.expiring, keyOf(roomName, entry.id), entry.expiresAt);
}

/** A tick (`now`: Unix seconds): the entries whose `expiresAt` it passed are marked expired. */
export function onExpiryTick(s, now) {
  if (!s.expiring.size || !Number.isFinite(now)) return;
  let due = false;
  for (const at of s.expiring.values()) if (now >= at) { due = true; break; }
  if (!due) return;
  let expiring = s.expiring;
  for (const [key, at] of s.expiring) {
    if (now < at) continue;
    expiring = mapWithout(expiring, key);
    const [roomName, msgId] = key.split("\n");
    const r = s.rooms.get(roomName);
    const e = r ? findEntry(r, `m:${msgId}`) : null;
    if (e && !e.expired) replaceEntry(s, roomName, { ...e, expired: true });
  }
  s.expiring = expiring;
}

/** Does the page need ticks for expiry? */
export const expiryTicking = (s) => !!s.expiring && s.expiring.size > 0;
