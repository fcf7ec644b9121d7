// Words the page puts around numbers and times: the one home of plural phrases, times, ages and the marks' figures.
//
// Every count a user reads ("1 message", "3 members") goes through `plural`, so no line says "1 messages".
// Times are the same everywhere on the page, 24-hour and whatever the browser's locale: `fmtTime` in the
// message list, `fmtDateTime` where a date matters (search results, tooltips). The lateness figure and the
// order-against-time figure follow the terminal clients and IRC (chat_tui/words.py):
//   - `late +22s`: seconds from sending to arrival at this site, rounded; known for a line that arrived while
//     the page was connected (a line from history shows "late" alone);
//   - `order -62s`: how many whole seconds a line's time reads earlier than the line above it, yet it is placed
//     after it (chat_server.protocol.out_of_time; docs/chat-protocol.md "Order against time").

/** "1 message", "2 messages" (`many`: the plural when it is not `noun` + "s"). */
export function plural(n, noun, many) {
  return `${n} ${n === 1 ? noun : many || `${noun}s`}`;
}

const pad = (n) => String(n).padStart(2, "0");

/** 14:05:09, local time, 24-hour, in any locale. */
export function fmtTime(d) {
  return `${pad(d.getHours())}:${pad(d.getMinutes())}:${pad(d.getSeconds())}`;
}

/** 2026-01-01 14:05:09, local time. */
export function fmtDateTime(d) {
  return `${d.getFullYear()}-${pad(d.getMonth() + 1)}-${pad(d.getDate())} ${fmtTime(d)}`;
}

/** Seconds from sending to arrival here, for a line that arrived late while the page was connected; else null. */
export function lateness(f, now) {
  return f.late && typeof now === "number" && typeof f.sent_at === "number" ? Math.max(0, now - f.sent_at) : null;
}

/** "+22s" for a known delay, "" when it is not known. */
export function lateFigure(lateBy) {
  return typeof lateBy === "number" ? `+${Math.round(lateBy)}s` : "";
}

/** Whole seconds a line sent at `sentAt` reads earlier than the line above it (0: in time order, or no line). */
export function outOfTime(sentAt, aboveSentAt) {
  if (typeof aboveSentAt !== "number" || typeof sentAt !== "number") return 0;
  return Math.max(0, Math.floor(aboveSentAt) - Math.floor(sentAt));
}

/** A server's error message without the request's name it starts with ("join: room 'x' is private" after
 *  "Cannot join x" would name the request twice). */
export function errorReason(message, request) {
  const text = String(message || "error");
  return request && text.startsWith(`${request}: `) ? text.slice(request.length + 2) : text;
}

/** How old a report is, for a table cell: "12 s", "4 min", "2 h 5 min"; "?" when not known. */
export function fmtAge(seconds) {
  if (typeof seconds !== "number" || !Number.isFinite(seconds)) return "?";
  const s = Math.max(0, Math.floor(seconds));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  const m = Math.floor((s % 3600) / 60);
  return `${Math.floor(s / 3600)} h${m ? ` ${m} min` : ""}`;
}
