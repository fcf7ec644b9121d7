// The operators' panels: the room directory, search results, the alert bar, the reply bar.
//
// Each function draws one part of the page from the state and nothing else; the
// handlers it creates only dispatch. Server strings reach the page as text nodes.

import { clear, h } from "./dom.js";
import { describeRoom } from "./finding.js";
import { labelOf } from "./labels.js";
import { alertList } from "./precedence.js";
import { precedenceBadge, richText } from "./view_entries.js";
import { labelTag } from "./view_labels.js";
import { fmtDateTime, plural } from "./words.js";

const $ = (id) => document.getElementById(id);
const DIRECTORY_SHOWN = 200;    // rows drawn in the side panel; the join box narrows the rest

export function renderDirectory(s, dispatch) {
  const list = $("directory-list");
  clear(list);
  const d = s.directory;
  const filter = (s.directoryFilter || "").trim().toLowerCase();
  $("directory-count").textContent = d ? `(${d.rooms.length})` : "";
  if (!d) { list.append(h("li", { class: "room-none" }, "Loading…")); return; }
  const now = Date.now() / 1000;
  const rows = d.rooms.filter((r) => !filter || r.room.toLowerCase().includes(filter));
  if (!d.rooms.length) list.append(h("li", { class: "room-none" }, "No rooms yet: type a name above to create one."));
  else if (!rows.length) list.append(h("li", { class: "room-none" }, "No room matches."));
  for (const r of rows.slice(0, DIRECTORY_SHOWN)) {
    const joined = !!(s.rooms.get(r.room) || {}).joined;
    list.append(h("li", { "data-room": r.room, "data-joined": joined ? "true" : "false" },
      h("button", { type: "button", class: `directory-button${joined ? " joined" : ""}`,
                    title: joined ? `Show ${r.room}` : `Join ${r.room}`,
                    onclick: () => dispatch(joined ? { type: "select-room", room: r.room } : { type: "join", room: r.room }) },
        h("span", { class: "room-name" }, r.room),
        h("span", { class: "directory-meta" }, labelTag(s.labels, null, labelOf(s.labels, r.label)), describeRoom(r, now)),
        h("span", { class: "directory-action" }, joined ? "joined" : "Join"))));
  }
  if (rows.length > DIRECTORY_SHOWN) {
    list.append(h("li", { class: "room-none" }, `${rows.length - DIRECTORY_SHOWN} more: type above to narrow, or /directory`));
  }
  if (d.note) list.append(h("li", { class: "room-none" }, `(${d.note})`));
}

export function renderSearch(s, dispatch) {
  const panel = $("search-panel");
  document.body.classList.toggle("searching", !!s.search);
  if (!s.search) { panel.hidden = true; return; }
  panel.hidden = false;
  const q = s.search;
  const status = $("search-status");
  const list = $("search-results");
  clear(list);
  if (q.status === "searching") status.textContent = `Searching for ${q.text}…`;
  else if (q.status === "error") status.textContent = `Search failed: ${q.error}`;
  else status.textContent = q.results.length ? `${plural(q.results.length, "result")} for ${q.text}` : `No results for ${q.text}`;
  for (const m of q.results) {
    const sent = new Date(Number(m.sent_at) * 1000);
    list.append(h("li", { class: "result", "data-msg-id": m.msg_id, "data-room": m.room },
      h("button", { type: "button", class: "result-button", onclick: () => dispatch({ type: "jump", room: m.room, msgId: m.msg_id }) },
        h("span", { class: "result-head" },
          h("span", { class: "result-room" }, m.room), " ",
          h("time", { datetime: sent.toISOString() }, fmtDateTime(sent)), " ",
          h("span", { class: "result-author" }, `${m.user}@${m.origin}`),
          m.late ? h("span", { class: "late-badge" }, "late") : null,
          m.repaired ? h("span", { class: "late-badge repaired-badge" }, "repaired") : null,
          precedenceBadge(m.precedence), " ", labelTag(s.labels, null, labelOf(s.labels, m.label))),
        h("span", { class: "result-text" }, richText(m.text, { user: s.user, site: s.site, highlights: m.highlights })))));
  }
}

export function renderAlerts(s, dispatch) {
  const bar = $("alert-bar");
  const list = $("alert-list");
  clear(list);
  const alerts = alertList(s);
  bar.hidden = !alerts.length;
  bar.dataset.level = alerts.length ? alerts[0].precedence : "";
  for (const a of alerts.slice(0, 3)) {
    list.append(h("li", { class: `alert-item prec-${a.precedence}`, "data-msg-id": a.msgId },
      precedenceBadge(a.precedence),
      h("span", { class: "alert-from" }, `${a.user}@${a.origin} in ${a.room}`), " ",
      h("span", { class: "alert-text" }, a.text.length > 200 ? `${a.text.slice(0, 200)}…` : a.text),
      h("button", { type: "button", class: "alert-show", onclick: () => dispatch({ type: "jump", room: a.room, msgId: a.msgId }) }, "Show"),
      h("button", { type: "button", class: "alert-ack", disabled: a.acking,
                    onclick: () => dispatch({ type: "acknowledge", msgId: a.msgId }) }, a.acking ? "Acknowledging…" : "Acknowledge")));
  }
  if (alerts.length > 3) list.append(h("li", { class: "alert-more" }, `and ${alerts.length - 3} more: /ack all acknowledges every one`));
}

export function renderReply(s) {
  const bar = $("reply-bar");
  const r = s.replyTo;
  bar.hidden = !r;
  $("reply-text").textContent = r ? `Replying to ${r.user}@${r.origin}: ${r.text.length > 120 ? `${r.text.slice(0, 120)}…` : r.text}` : "";
}
