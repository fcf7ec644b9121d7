// Precedence and acknowledgements: FLASH and IMMEDIATE messages alert until the user acknowledges them.
//
// Theory of operation
// -------------------
// Every message has a precedence, `flash > immediate > priority > routine` (absent:
// routine). PRECEDENCES, URGENT and DEFAULT are the browser's copy of
// contracts/precedence.py, the one home of the levels: one spelling each, and a
// level's index in PRECEDENCES is its one integer code (0 flash .. 3 routine); the
// copy is tested against it (tests/web_ui/test_web_contracts.py). A flash or immediate message of someone else, in a room the user is in,
// that the user has not acknowledged, is an *alert*: it is kept in `state.alerts`
// (msg_id -> alert), shown in the alert bar and on its line, and notified: at once
// when it arrives live, at the next tick when it came in a page of history (signing
// in after it was sent), then again every REPEAT_MS[precedence] until acknowledged.
// Ticks (`{type: "tick", now}`) come from the effects layer once a second while
// there are alerts (the `clock` effect switches them on and off; state.js).
//
// Acknowledging sends `acknowledge {msg_id}`; the server's `acknowledging` ends the
// alert here; every site then tells the room `acknowledged {msg_id, user, site, at}`,
// which adds to the message's acknowledgement list (shown on the line: who, at which
// site, when, for the sender as for everyone) and ends the alert in the user's other
// sessions. History pages carry the list as `acknowledgements`.

import { announce, effect, mapWith, mapWithout, request, updateMessage } from "./draft.js";

export const PRECEDENCES = ["flash", "immediate", "priority", "routine"];   // highest first; index = code
export const URGENT = ["flash", "immediate"];                               // delivered on arrival, acknowledged
export const DEFAULT = "routine";
/** The levels above routine: the composer's /flash, /immediate, /priority and the lines' badges. */
export const RAISED = PRECEDENCES.filter((p) => p !== DEFAULT);
export const ASKS_ACK = new Set(URGENT);
export const REPEAT_MS = { flash: 15000, immediate: 60000 };

/** The precedence a frame is shown at: its level's name; routine when absent or not a level. */
export function precedenceOf(f) {
  return PRECEDENCES.includes(f.precedence) ? f.precedence : DEFAULT;
}

function validAck(a) {
  return a && typeof a.user === "string" && typeof a.site === "string";
}

/** Add acknowledgements to the known list of `msgId` (once per user and site); the list. */
export function addAcks(s, msgId, acks) {
  const known = s.acks.get(msgId) || [];
  const seen = new Set(known.map((a) => `${a.user}@${a.site}`));
  const more = [];
  for (const a of acks) {
    if (!validAck(a) || seen.has(`${a.user}@${a.site}`)) continue;
    seen.add(`${a.user}@${a.site}`);
    more.push({ user: a.user, site: a.site, at: Number(a.at) || 0 });
  }
  if (!more.length) return known;
  const list = [...known, ...more].sort((a, b) => a.at - b.at);
  s.acks = mapWith(s.acks, msgId, list);
  return list;
}

export function ackedByMe(s, msgId) {
  return (s.acks.get(msgId) || []).some((a) => a.user === s.user && a.site === s.site);
}

/** The fields a message entry carries for its precedence. */
export function precedenceFields(s, f, mine) {
  const precedence = precedenceOf(f);
  if (!ASKS_ACK.has(precedence)) return { precedence };
  const acks = Array.isArray(f.acknowledgements) ? addAcks(s, f.msg_id, f.acknowledgements) : (s.acks.get(f.msg_id) || []);
  return { precedence, acks, alert: !mine && !ackedByMe(s, f.msg_id) };
}

/** A message entry was added: start its alert if it is one (`live`: notify now). */
export function onMessageAdded(s, room, entry, live) {
  if (!entry.alert || !room.joined || s.alerts.has(entry.id)) return;
  const f = entry.frame;
  const alert = { msgId: entry.id, room: room.name, precedence: entry.precedence, user: f.user, origin: f.origin,
                  text: f.text, sentAt: f.sent_at, notified: live, at: null, acking: false };
  s.alerts = mapWith(s.alerts, entry.id, alert);
  if (live) {
    notifyAlert(s, alert);
    announce(s, `${alert.precedence.toUpperCase()} from ${f.user}@${f.origin} in ${room.name}: ${f.text}`);
  }
}

function notifyAlert(s, a) {
  effect(s, "notify", { title: `${a.precedence.toUpperCase()} from ${a.user}@${a.origin} in ${a.room}`, body: a.text,
                        tag: a.msgId, urgent: true, room: a.room, msgId: a.msgId });
}

/** Once a second while alerts are outstanding: notify the new ones, repeat the due ones. */
export function onTick(s, e) {
  const now = Number(e.now) || 0;
  let alerts = s.alerts;
  for (const a of s.alerts.values()) {
    if (a.acking) continue;
    let next = a;
    if (!a.notified) { notifyAlert(s, a); next = { ...a, notified: true, at: now }; }
    else if (a.at === null) next = { ...a, at: now };
    else if (now - a.at >= REPEAT_MS[a.precedence]) { notifyAlert(s, a); next = { ...a, at: now }; }
    if (next !== a) alerts = mapWith(alerts, a.msgId, next);
  }
  s.alerts = alerts;
}

/** The user acknowledges one alert (or `all`). */
export function acknowledge(s, msgId) {
  const a = s.alerts.get(msgId);
  if (!a || a.acking) return;
  s.alerts = mapWith(s.alerts, msgId, { ...a, acking: true });
  updateMessage(s, msgId, (e) => ({ ...e, acking: true }));
  request(s, { type: "acknowledge", msg_id: msgId }, { what: "acknowledge", msgId });
}

export function acknowledgeFailed(s, e) {
  const a = s.alerts.get(e.msgId);
  if (a) s.alerts = mapWith(s.alerts, e.msgId, { ...a, acking: false, at: null, notified: true });
  updateMessage(s, e.msgId, (x) => ({ ...x, acking: false }));
}

/** `acknowledging`: the server took our acknowledgement; the alert ends here. */
export function onAcknowledging(s, f) {
  if (typeof f.msg_id !== "string") return;
  endAlert(s, f.msg_id);
}

function endAlert(s, msgId) {
  if (s.alerts.has(msgId)) s.alerts = mapWithout(s.alerts, msgId);
  updateMessage(s, msgId, (e) => ({ ...e, alert: false, acking: false }));
}

/** `acknowledged {msg_id, user, site, at}`: someone acknowledged, at some site. */
export function onAcknowledged(s, f) {
  if (typeof f.msg_id !== "string" || !validAck(f)) return;
  const list = addAcks(s, f.msg_id, [f]);
  updateMessage(s, f.msg_id, (e) => ({ ...e, acks: list }));
  if (f.user === s.user && f.site === s.site) endAlert(s, f.msg_id);
  else announce(s, `${f.user}@${f.site} acknowledged a message`);
}

/** Alerts, most urgent first (flash before immediate), oldest first within a level. */
export function alertList(state) {
  return [...state.alerts.values()].sort((a, b) => PRECEDENCES.indexOf(a.precedence) - PRECEDENCES.indexOf(b.precedence)
                                                  || a.sentAt - b.sentAt);
}
