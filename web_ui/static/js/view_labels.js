// The view's part for security labels: the room's classification banners (top and bottom), the composer's label
// menu, the new-room form's label menu, and the small label tag of a line.
//
// Drawn from the state only (classification.js keeps it); in an unlabeled mission (`state.labels` null) every
// element here stays hidden and the page looks as it always did. A banner's colours come from labels.js (by level,
// text black or white by contrast) and are set through the CSSOM (`style.setProperty` of two custom properties,
// which the page's Content-Security-Policy allows; no style attribute is ever written).

import { clear, h } from "./dom.js";
import { labelToSend, sendableIn } from "./classification.js";
import { currentRoom } from "./draft.js";
import { labelColours, labelText, sameLabel, sendable } from "./labels.js";

const $ = (id) => document.getElementById(id);

/** Paint `el` in the colours of `label`. */
export function paint(el, scheme, label) {
  const { bg, fg } = labelColours(scheme, label);
  el.style.setProperty("--label-bg", bg);
  el.style.setProperty("--label-fg", fg);
  return el;
}

/** A line's label tag, when it is not the room's floor (the banner says that one). */
export function labelTag(scheme, room, label) {
  if (!scheme || !label || (room && sameLabel(room.label, label))) return null;
  return paint(h("span", { class: "label-tag", "data-label": labelText(label), title: `Security label ${labelText(label)}` },
                 labelText(label)), scheme, label);
}

function banner(el, scheme, room) {
  const label = scheme && room ? room.label : null;
  el.hidden = !label;
  if (!label) return;
  el.textContent = labelText(label);
  el.dataset.level = label.level;
  paint(el, scheme, label);
}

function fillSelect(select, labels, chosen) {
  clear(select);
  for (const l of labels) {
    const text = labelText(l);
    select.append(h("option", { value: text }, text));
  }
  select.value = chosen ? labelText(chosen) : "";
}

export function renderLabels(s) {
  const scheme = s.labels;
  const room = currentRoom(s);
  banner($("label-top"), scheme, room);
  banner($("label-bottom"), scheme, room);
  document.body.classList.toggle("labelled", !!scheme);
  const select = $("send-label");
  const choices = sendableIn(s, room);
  select.hidden = !scheme || !room || !room.label;
  select.disabled = choices.length < 2;
  fillSelect(select, choices, labelToSend(s, room));
  if (select.hidden) return;
  paint(select, scheme, labelToSend(s, room));
  select.title = choices.length ? `Security label of the messages you send in ${room.name} (until you change room)`
                                : `You are not cleared to send in ${room.name}`;
}

/** The new-room form: offered in labelled missions, its menu the labels the user's clearance dominates. */
export function renderCreateForm(s) {
  const scheme = s.labels;
  $("create-box").hidden = !scheme;
  if (!scheme) return;
  const select = $("create-label");
  const keep = select.value;
  const lowest = { level: scheme.levels[0], rank: 0, caveats: [] };
  fillSelect(select, sendable(scheme, scheme.clearance, lowest), scheme.default);
  if (keep && [...select.options].some((o) => o.value === keep)) select.value = keep;
}
