// The reducer's part for security labels: what the page knows of the mission's labels, each room's floor, the
// composer's choice, and the commands that use them (/label, /create with a label).
//
// Theory of operation
// -------------------
// `state.labels` is the mission's scheme and the user's clearance from `welcome` (labels.js `schemeOf`), or null
// for an unlabeled mission: then nothing here changes anything and the page looks as it always did. A room's
// floor (`room.label`) comes with `joined`; a message entry's `label` with its frame (messages.js). The composer's
// choice, `state.sendLabel`, is null (the room's floor) or one of the labels `sendable` offers in the room shown;
// it goes back to the floor whenever another room is shown (rooms.js `selectRoom`) and after the welcome. A `say`
// carries the chosen label, or the floor; a label the user may not send is refused here before it goes, and the
// server's own refusal (`error {code: "forbidden"}`) is shown on the line and as a notice (state.js).
//
// `/create ROOM [LABEL] [USER...]`: the label is read off the front of what follows the room's name (a level of
// the scheme, then, after "//", caveats joined by "," or "/", "REL TO" allowed), so "TOP SECRET//REL TO GBR, USA
// alice" is the label and one member; without users the room is public, with them private (DESIGN.md).

import { editRoom, effect, notice, request } from "./draft.js";
import { dominates, labelJson, labelOf, labelText, parseLabel, sameLabel, schemeOf, sendable } from "./labels.js";

/** After a welcome: the mission's labels (null: unlabeled); the composer's choice stays only while it may still
 *  be sent in the room shown (a resume), else goes back to the floor. */
export function onWelcomeLabels(s, f) {
  s.labels = schemeOf(f);
  const room = s.current ? s.rooms.get(s.current) : null;
  if (s.sendLabel && !maySend(s, room, s.sendLabel)) s.sendLabel = null;
}

/** A room's floor from a frame that carries it (`joined`). */
export function roomLabelFrom(s, roomName, f) {
  if (!s.labels || f.label === undefined) return;
  const label = labelOf(s.labels, f.label);
  const r = s.rooms.get(roomName);
  if (!r || !sameLabel(r.label, label)) editRoom(s, roomName, { label });
}

/** The labels the user may send in `room` (none when unlabeled or the floor is not known yet). */
export function sendableIn(s, room) {
  if (!s.labels || !room || !room.label || room.label.unknown) return [];
  return sendable(s.labels, s.labels.clearance, room.label);
}

/** May `label` be sent in `room`: between its floor and the user's clearance (`sendableIn` lists the common ones
 *  only when a clearance has many caveats, so it is no test of this). */
export function maySend(s, room, label) {
  return Boolean(s.labels && room && room.label && !room.label.unknown) && dominates(s.labels.clearance, label)
    && dominates(label, room.label);
}

/** The label the next line in `room` goes out with: the composer's choice, else the room's floor (null: none). */
export function labelToSend(s, room) {
  if (!s.labels || !room) return null;
  return s.sendLabel || room.label || null;
}

/** The composer's choice (the people's spelling; "" or null: the room's floor); a label not sendable here is
 *  refused with a notice naming what is. */
export function chooseLabel(s, text) {
  if (!s.labels) return notice(s, "This mission has no security labels.", "error");
  const room = s.current ? s.rooms.get(s.current) : null;
  if (text === null || text === undefined || String(text).trim() === "") { s.sendLabel = null; return undefined; }
  const parsed = parseLabel(s.labels, String(text));
  if (!parsed.ok) return notice(s, `Cannot send at ${text}: ${parsed.error}`, "error");
  if (!maySend(s, room, parsed.label)) {
    const why = !room || !room.label ? "no room with a known label is shown"
      : !dominates(s.labels.clearance, parsed.label) ? `your clearance is ${labelText(s.labels.clearance)}`
      : `the room's floor is ${labelText(room.label)}`;
    return notice(s, `You may not send ${labelText(parsed.label)} here: ${why}.`, "error");
  }
  s.sendLabel = room && sameLabel(parsed.label, room.label) ? null : parsed.label;
  return undefined;
}

/** `/label [LABEL]`: choose, or list what may be sent here. */
export function labelCommand(s, rest) {
  if (!s.labels) return notice(s, "This mission has no security labels.", "error");
  if (rest.trim()) return chooseLabel(s, rest.trim());
  const room = s.current ? s.rooms.get(s.current) : null;
  const choices = sendableIn(s, room);
  const now = labelToSend(s, room);
  const lines = [`Your clearance: ${labelText(s.labels.clearance)}`];
  if (room && room.label) {
    lines.push(`${room.name}: floor ${labelText(room.label)}; sending at ${labelText(now)}`);
    lines.push(choices.length ? `You may send: ${choices.map(labelText).join(" · ")}` : "You may not send here.");
  }
  return notice(s, lines.join("\n"), "listing");
}

/** Split "LABEL USER..." (a labelled mission) into {label, members}, or {error}. */
export function splitCreate(scheme, words) {
  if (!scheme || !words.length) return { label: null, members: words };
  const text = words.join(" ");
  const upper = text.toUpperCase();
  const level = [...scheme.levels].sort((a, b) => b.length - a.length)
    .find((lv) => upper.startsWith(lv) && /^(\s|\/\/|$)/.test(text.slice(lv.length)));
  if (!level) return { label: null, members: words };
  let end = level.length;
  if (text.startsWith("//", end)) {
    const m = /^\/\/\s*(REL TO\s+)?[A-Za-z0-9_-]+(\s*[,/]\s*[A-Za-z0-9_-]+)*/i.exec(text.slice(end));
    if (!m) return { error: `no caveat after "//" in ${text.slice(0, 60)}` };
    end += m[0].length;
  }
  const parsed = parseLabel(scheme, text.slice(0, end));
  if (!parsed.ok) return { error: parsed.error };
  return { label: parsed.label, members: text.slice(end).split(/\s+/).filter(Boolean) };
}

/** `/create ROOM [LABEL] [USER...]`. */
export function createCommand(s, room, words) {
  const split = splitCreate(s.labels, words);
  if (split.error) return notice(s, `Cannot create ${room}: ${split.error}`, "error");
  if (split.label && !dominates(s.labels.clearance, split.label)) {
    return notice(s, `Cannot create ${room} at ${labelText(split.label)}: your clearance is ` +
                     `${labelText(s.labels.clearance)}.`, "error");
  }
  const frame = { type: "create", room };
  if (split.label) frame.label = labelJson(split.label);
  if (split.members.length) frame.members = split.members;
  editRoom(s, room, { wanted: true });
  return request(s, frame, { what: "create", room });
}

/** The new-room form: a name, a label (the people's spelling), members separated by spaces or commas. */
export function createSubmit(s, e) {
  const room = String(e.room || "").trim();
  if (!room) return notice(s, "Give the new room a name.", "error");
  const members = String(e.members || "").split(/[\s,]+/).filter(Boolean);
  const parsed = parseLabel(s.labels, String(e.label || ""));
  if (!parsed.ok) return notice(s, `Cannot create ${room}: ${parsed.error}`, "error");
  effect(s, "clear-input", { id: "create-room" });
  effect(s, "clear-input", { id: "create-members" });
  return createCommand(s, room, [labelText(parsed.label), ...members]);
}

/** The `created` reply: a private room for its members, or a public one at its label. */
export function onCreated(s, f) {
  const label = labelOf(s.labels, f.label);
  const at = label ? ` at ${labelText(label)}` : "";
  if (Array.isArray(f.members) && f.members.length) {
    return notice(s, `Private room ${f.room}${at} created for ${f.members.join(", ")}`);
  }
  return notice(s, `Room ${f.room}${at} created`);
}
