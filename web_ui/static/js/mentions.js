// A message's text cut into runs for drawing: search highlights and @mentions (pure, no DOM).
//
// `@user` names that user at any site, `@user@site` only at that site (the chat
// server's rule, chat_server/protocol.py `mentioned`; the server lists the users of
// its own site a message names in `message.mentions`). Search highlights are
// `[start, end)` spans counted in Unicode code points (the server is Python), which
// are not JavaScript's UTF-16 string indices: they are converted here. The view turns
// each run into a text node inside a span, never into markup.

const MENTION = /(?<![\p{L}\p{N}_@])@([A-Za-z][A-Za-z0-9_.-]{0,31})(?:@([A-Za-z][A-Za-z0-9_.-]{0,31}))?/gu;

/** The mentions in `text`: [{start, end, user, site, me}] (UTF-16 indices); `me` when it names `user` at `site`. */
export function findMentions(text, user = null, site = null) {
  const out = [];
  for (const m of String(text).matchAll(MENTION)) {
    const name = m[1].replace(/[.-]+$/, "");
    const at = m[2] === undefined ? "" : m[2].replace(/[.-]+$/, "");
    if (!name) continue;
    const length = 1 + name.length + (m[2] !== undefined && at ? 1 + at.length : 0);
    out.push({ start: m.index, end: m.index + length, user: name, site: at || null,
               me: user !== null && name === user && (!at || at === site) });
  }
  return out;
}

/** UTF-16 index of each code point index of `text` (one more entry for the end). */
function codePointOffsets(text) {
  const offsets = [];
  let i = 0;
  for (const ch of text) {
    offsets.push(i);
    i += ch.length;
  }
  offsets.push(i);
  return offsets;
}

/**
 * Runs of `text`: [{text, mark, mention}] where `mark` says a search highlight covers it and `mention` is
 * "me" | "other" | null. `highlights` are code point spans, as the server sends them; bad spans are ignored.
 */
export function segments(text, { highlights = [], user = null, site = null } = {}) {
  text = String(text);
  const n = text.length;
  const mark = new Uint8Array(n);
  const mention = new Uint8Array(n);           // 0 none, 1 other, 2 me
  const offsets = codePointOffsets(text);
  const points = offsets.length - 1;
  for (const span of Array.isArray(highlights) ? highlights : []) {
    if (!Array.isArray(span) || span.length !== 2) continue;
    const [a, b] = span;
    if (!Number.isInteger(a) || !Number.isInteger(b) || a < 0 || b > points || a >= b) continue;
    mark.fill(1, offsets[a], offsets[b]);
  }
  for (const m of findMentions(text, user, site)) mention.fill(m.me ? 2 : 1, m.start, m.end);
  const runs = [];
  let start = 0;
  for (let i = 1; i <= n; i++) {
    if (i === n || mark[i] !== mark[start] || mention[i] !== mention[start]) {
      runs.push({ text: text.slice(start, i), mark: mark[start] === 1,
                  mention: mention[start] === 2 ? "me" : mention[start] === 1 ? "other" : null });
      start = i;
    }
  }
  return runs;
}
