// Helpers the reducer's tests share (not a test file: `node --test web_ui/tests/` runs *.test.mjs).
import { reduce } from "../static/js/state.js";

/** A chat message frame of room ops: `ts` is its Lamport timestamp and its seconds after T. */
export const T = 1_800_000_000;
export function msg(ts, origin, text, extra = {}) {
  return { type: "message", room: "ops", msg_id: `${origin}:${ts}`, origin, user: extra.user || "bob", text,
           sent_at: T + ts, order: [ts, origin], late: false, ...extra };
}

/** Run events from `state`; returns the last state and every effect on the way. */
export function run(state, ...events) {
  const effects = [];
  for (const e of events) {
    state = reduce(state, e);
    effects.push(...state.effects);
  }
  return { state, effects };
}

/** A server frame as the reducer receives it (at `now`, when given). */
export const frame = (f, now) => (now === undefined ? { type: "frame", frame: f } : { type: "frame", frame: f, now });
