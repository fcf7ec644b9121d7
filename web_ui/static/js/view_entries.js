// The elements of the message list: one per entry (message, own message on its way, notice, gap).
//
// Pure functions of an entry (and the few state values a line shows), called by view.js
// when an entry is new or changed. Every string from the server becomes a text node
// (dom.js); mentions and search highlights are spans around text nodes (mentions.js).

import { h } from "./dom.js";
import { segments } from "./mentions.js";
import { notSentTo } from "./messages.js";
import { DEFAULT, RAISED } from "./precedence.js";
import { labelTag } from "./view_labels.js";
import { fmtDateTime, fmtTime, lateFigure } from "./words.js";

export { fmtTime } from "./words.js";

const PENDING_LABELS = { sending: "sending…", queued: "waiting for the connection…", accepted: "accepted, in order soon…" };
export const PRECEDENCE_WORDS = Object.fromEntries(RAISED.map((level) => [level, level.toUpperCase()]));  // badges

/** A text with its mentions (and search highlights) marked, as spans of text nodes. */
export function richText(text, { user = null, site = null, highlights = [] } = {}) {
  return segments(text, { user, site, highlights }).map((run) => {
    const cls = [run.mark ? "hit" : "", run.mention === "me" ? "mention me" : run.mention ? "mention" : ""].filter(Boolean);
    if (!cls.length) return run.text;
    return run.mark ? h("mark", { class: cls.join(" ") }, run.text) : h("span", { class: cls.join(" ") }, run.text);
  });
}

export function precedenceBadge(precedence) {
  const word = PRECEDENCE_WORDS[precedence];
  return word ? h("span", { class: `prec-badge prec-${precedence}`, title: `${word} precedence` }, word) : null;
}

function quoteElement(dispatch, roomName, e) {
  const q = e.quote;
  if (q.state === "loaded") {
    return h("button", { type: "button", class: "quote", "data-reply-to": q.msgId,
                         title: "Go to the line this answers", onclick: () => dispatch({ type: "jump", room: roomName, msgId: q.msgId }) },
      h("span", { class: "quote-mark", "aria-hidden": "true" }, "↩ "),
      h("span", { class: "quote-author" }, `${q.user}@${q.origin}`),
      q.late ? h("span", { class: "quote-late" }, "late") : null,
      precedenceBadge(q.precedence),
      h("span", { class: "quote-text" }, q.text.length > 140 ? `${q.text.slice(0, 140)}…` : q.text));
  }
  const text = q.state === "missing" ? `in reply to ${q.msgId}, which has not reached this site yet`
                                     : `in reply to ${q.msgId} (loading…)`;
  return h("span", { class: `quote quote-${q.state}`, "data-reply-to": q.msgId }, h("span", { "aria-hidden": "true" }, "↩ "), text);
}

function acksElement(e) {
  if (!e.acks) return null;
  if (!e.acks.length) return h("div", { class: "acks none" }, e.mine ? "Not acknowledged yet" : "Nobody has acknowledged yet");
  return h("div", { class: "acks", "data-acks": e.acks.map((a) => `${a.user}@${a.site}`).join(",") },
    "Acknowledged by ",
    e.acks.map((a, i) => [i ? ", " : "", h("span", { class: "ack", "data-ack": `${a.user}@${a.site}` },
      `${a.user}@${a.site}`, " ", h("time", { datetime: new Date(a.at * 1000).toISOString() }, fmtTime(new Date(a.at * 1000))))]));
}

/** An expiring message's mark: "expired" once past its time, else when it will expire. */
function expiryBadge(e) {
  if (e.expiresAt === null || e.expiresAt === undefined) return null;
  const at = new Date(e.expiresAt * 1000);
  if (e.expired) {
    return h("span", { class: "expiry-badge expired", "data-expired": "true",
                       title: `Expired ${fmtDateTime(at)}: no longer sent to sites that do not have it yet.` }, "expired");
  }
  return h("span", { class: "expiry-badge", title: `Expires ${fmtDateTime(at)}` }, `expires ${fmtTime(at)}`);
}

/** The element of one entry; `highlighted` remembers late messages highlighted once. */
export function entryElement(dispatch, room, e, { user, site, highlighted, labels = null }) {
  if (e.kind === "notice") {
    return h("li", { class: `notice ${e.cls}`.trim() }, h("span", { class: "notice-text" }, e.text));
  }
  if (e.kind === "gap") {
    return h("li", { class: "gap", "data-before": e.beforeId },
      h("button", { type: "button", class: "gap-button", disabled: e.loading,
                    onclick: () => dispatch({ type: "fill-gap", room: room.name, beforeId: e.beforeId }) },
        e.loading ? "Loading…" : "Messages missing here: load them"));
  }
  if (e.kind === "pending") {
    const label = e.state === "failed" ? `not sent: ${e.error}` : PENDING_LABELS[e.state];
    return h("li", { class: `msg mine pending state-${e.state}`, "data-client-id": e.clientId },
      h("span", { class: "time" }, ""),
      h("span", { class: "author" }, e.author),
      h("div", { class: "body" },
        labelTag(labels, room, e.label),
        precedenceBadge(e.precedence),
        h("span", { class: "text" }, e.text),
        h("span", { class: "meta" }, label,
          e.state === "failed" ? h("button", { type: "button", class: "retry",
                                               onclick: () => dispatch({ type: "retry", room: room.name, clientId: e.clientId }) },
                                   "Retry") : null)));
  }
  const f = e.frame;
  const cls = ["msg"];
  if (e.late) cls.push("late");
  if (e.outOfTime) cls.push("out-of-time");
  if (e.mine) cls.push("mine");
  if (e.mentionsMe) cls.push("mentions-me");
  if (e.precedence !== DEFAULT) cls.push(`prec-${e.precedence}`);
  if (e.alert) cls.push("alert");
  if (e.expired) cls.push("expired");
  if (e.placed && !highlighted.has(e.key)) {
    highlighted.add(e.key);
    cls.push("just-placed");
  }
  const orderText = JSON.stringify(f.order);
  const sent = new Date(f.sent_at * 1000);
  const via = Array.isArray(f.via) && f.via.length ? ` · relayed via ${f.via.join(" → ")}` : "";
  const missed = notSentTo(e);          // until repair brings it there (its receipt then comes)
  return h("li", { class: cls.join(" "), "data-msg-id": f.msg_id, "data-order": orderText, "data-late": e.late ? "true" : "false",
                   "data-precedence": e.precedence },
    h("time", { class: "time", datetime: sent.toISOString(), title: `sent ${fmtDateTime(sent)} · ${f.msg_id} · order ${orderText}${via}` },
      fmtTime(sent)),
    h("span", { class: "author" }, `${f.user}@${f.origin}`),
    h("div", { class: "body" },
      e.quote ? quoteElement(dispatch, room.name, e) : null,
      e.outOfTime ? h("span", { class: "order-badge", "data-out-of-time": String(e.outOfTime),
                                title: `Sent ${fmtTime(sent)}, ${e.outOfTime} s before the line above, yet placed after it: ` +
                                       "lines follow the global order every site agrees on, not the senders' clocks." },
                      "order", h("span", { class: "figure" }, ` -${e.outOfTime}s`)) : null,
      e.late ? h("span", { class: "late-badge", "data-late-by": lateFigure(e.lateBy) || null,
                           title: "Arrived after its place in the global order had passed; shown at its place." +
                                  (e.lateBy === null ? "" : ` It arrived ${Math.round(e.lateBy)} s after it was sent.`) },
                 "late", lateFigure(e.lateBy) ? h("span", { class: "figure" }, ` ${lateFigure(e.lateBy)}`) : null) : null,
      f.repaired ? h("span", { class: "late-badge repaired-badge", title: "Reported missing at this site, then recovered from another site." }, "repaired") : null,
      expiryBadge(e),
      labelTag(labels, room, e.label),
      precedenceBadge(e.precedence),
      e.mentionsMe ? h("span", { class: "mention-badge", title: "This message names you" }, "@you") : null,
      h("span", { class: "text" }, richText(f.text, { user, site })),
      acksElement(e),
      e.mine ? h("span", { class: "meta receipts", "data-receipts": e.receipts.join(","),
                           title: e.receipts.length ? `Delivered at ${e.receipts.join(", ")}` : "Not yet delivered elsewhere" },
        e.receipts.length ? `✓ ${e.receipts.join(" ")}` : "✓",
        missed.length ? h("span", { class: "skipped" }, ` · not sent to ${missed.join(", ")} (disconnected)`) : null) : null),
    h("span", { class: "actions" },
      e.alert ? h("button", { type: "button", class: "ack-button", disabled: e.acking,
                              onclick: () => dispatch({ type: "acknowledge", msgId: f.msg_id }) },
                  e.acking ? "Acknowledging…" : "Acknowledge") : null,
      room.joined ? h("button", { type: "button", class: "reply-button", title: "Reply to this line",
                                  "aria-label": `Reply to ${f.user}@${f.origin}`,
                                  onclick: () => dispatch({ type: "reply", room: room.name, msgId: f.msg_id }) }, "Reply") : null));
}
