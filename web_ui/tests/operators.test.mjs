// The operators' features in the reducer (issues 21 and 19): directory, search, mentions, read markers,
// replies, jumps and gaps, precedence alerts and acknowledgements. Run with `node --test web_ui/tests/`.

import assert from "node:assert/strict";
import { test } from "node:test";

import { findMentions, segments } from "../static/js/mentions.js";
import { mergePage } from "../static/js/pages.js";
import { initialState, reduce } from "../static/js/state.js";
import { frame, msg, run } from "./reducer.mjs";
import { parseSearch } from "../static/js/finding.js";

const WELCOME = { type: "welcome", user: "alice", site: "A", sites: { A: "connected", B: "connected" },
                  rooms: [], presence: {}, session: "tok", n: 0 };



const requests = (effects) => effects.filter((e) => e.type === "request");

function signedIn(welcome = {}) {
  return run(initialState(), { type: "conn", kind: "online" }, frame({ ...WELCOME, ...welcome })).state;
}

function inRooms(rooms, welcome = {}) {
  let state = signedIn({ rooms: Object.keys(rooms), ...welcome });
  for (const [room, history] of Object.entries(rooms)) {
    state = reduce(state, frame({ type: "joined", room, history: history.map((m) => ({ ...m, room })), more: false }));
  }
  return state;
}

function texts(state, room = "ops") {
  return state.rooms.get(room).entries.map((e) => (e.kind === "message" ? e.frame.text : `${e.kind}:${e.beforeId || e.text}`));
}

// --- text ------------------------------------------------------------------------------------------

test("mentions: @user at any site, @user@site only at that site; search spans count code points", () => {
  const at = (text, user, site) => findMentions(text, user, site).map((m) => [text.slice(m.start, m.end), m.me]);
  assert.deepEqual(at("@bob please, and @bob@A, @bob@B, mail@bob, @bobby.", "bob", "B"),
                   [["@bob", true], ["@bob@A", false], ["@bob@B", true], ["@bobby", false]]);
  const runs = segments("🚁 grid @alice from 0300", { highlights: [[2, 6], [19, 23]], user: "alice", site: "A" });
  assert.deepEqual(runs.map((r) => [r.text, r.mark, r.mention]),
                   [["🚁 ", false, null], ["grid", true, null], [" ", false, null], ["@alice", false, "me"],
                    [" from ", false, null], ["0300", true, null]]);
  assert.deepEqual(segments("x", { highlights: [[0, 9], [-1, 1], "no", [1, 0]] }).map((r) => r.mark), [false]);
});

test("search text: in:ROOM and by:USER narrow it; nothing else is a filter", () => {
  assert.deepEqual(parseSearch(' "grid from" in:ops by:bob 03*'), { query: '"grid from" 03*', room: "ops", user: "bob" });
  assert.deepEqual(parseSearch("in:bad/room word"), { query: "in:bad/room word" });
  assert.ok(parseSearch("in:ops").error);
});

// --- pages and gaps ------------------------------------------------------------------------------------

const entry = (ts, origin = "A") => ({ kind: "message", key: `m:${origin}:${ts}`, group: 0, sub: 0, seq: 0, id: `${origin}:${ts}`,
                                       order: [ts, origin], frame: msg(ts, origin, `m${ts}`) });
const ids = (room) => room.entries.map((e) => (e.kind === "gap" ? `gap<${e.beforeId}` : e.id));

test("pages: a page far from the loaded stretch leaves a gap; filling it page by page closes it", () => {
  let room = { name: "ops", entries: [90, 91, 92].map((t) => entry(t)), more: true };
  room = mergePage(room, [10, 11, 12].map((t) => entry(t)), { moreBefore: true, moreAfter: true });
  assert.deepEqual(ids(room), ["A:10", "A:11", "A:12", "gap<A:90", "A:90", "A:91", "A:92"]);
  assert.equal(room.more, true);
  room = mergePage(room, [60, 70, 80].map((t) => entry(t)), { moreBefore: true, contiguousWith: "A:90" });
  assert.deepEqual(ids(room), ["A:10", "A:11", "A:12", "gap<A:60", "A:60", "A:70", "A:80", "A:90", "A:91", "A:92"]);
  room = mergePage(room, [11, 12, 30].map((t) => entry(t)), { moreBefore: true, contiguousWith: "A:60" });
  assert.deepEqual(ids(room), ["A:10", "A:11", "A:12", "A:30", "A:60", "A:70", "A:80", "A:90", "A:91", "A:92"]);
  room = mergePage(room, [1, 2].map((t) => entry(t)), { moreBefore: false, contiguousWith: "A:10" });
  assert.equal(room.more, false);
  assert.deepEqual(ids(room).slice(0, 3), ["A:1", "A:2", "A:10"]);
});

test("pages: an around page that overlaps the loaded stretch leaves no gap", () => {
  let room = { name: "ops", entries: [50, 60, 70].map((t) => entry(t)), more: true };
  room = mergePage(room, [40, 45, 50, 60].map((t) => entry(t)), { moreBefore: true, moreAfter: true });
  assert.deepEqual(ids(room), ["A:40", "A:45", "A:50", "A:60", "A:70"]);
});

// --- directory ---------------------------------------------------------------------------------------

const row = (room, extra = {}) => ({ room, private: false, members: 2, last_at: 1_800_000_000, joined: false, ...extra });

test("directory: asked for at sign-in, every page followed, joined flags follow joins and leaves", () => {
  let { state, effects } = run(initialState(), frame({ ...WELCOME, rooms: ["ops"] }),
                               frame({ type: "joined", room: "ops", history: [], more: false }));
  const ask = requests(effects).find((e) => e.frame.type === "directory");
  assert.deepEqual(ask.reply, { type: "directory-page", sofar: [], show: false, now: 0 });
  ({ state, effects } = run(state, { ...ask.reply, frame: { type: "directory", rooms: [row("alpha"), row("cell", { private: true })], more: true } }));
  const next = requests(effects)[0];
  assert.deepEqual(next.frame, { type: "directory", after: "cell" });
  ({ state } = run(state, { ...next.reply, frame: { type: "directory", rooms: [row("ops", { joined: true })], more: false } }));
  assert.deepEqual(state.directory.rooms.map((r) => r.room), ["alpha", "cell", "ops"]);
  ({ state, effects } = run(state, { type: "join", room: "alpha" }));
  assert.deepEqual(requests(effects).map((e) => e.frame), [{ type: "join", room: "alpha" }]);
  ({ state } = run(state, frame({ type: "joined", room: "alpha", history: [], more: false })));
  assert.equal(state.current, "alpha");
  assert.equal(state.directory.rooms[0].joined, true);
  ({ state } = run(state, frame({ type: "left", room: "alpha" })));
  assert.equal(state.directory.rooms[0].joined, false);
  ({ state, effects } = run(state, { type: "submit", line: "/directory", clientId: "x", now: 1_800_000_600 }));
  const shown = requests(effects)[0];
  ({ state } = run(state, { ...shown.reply, frame: { type: "directory", rooms: [row("alpha"), row("ops", { joined: true, members: 1 })], more: false } }));
  assert.deepEqual(texts(state).at(-1).split("\n"),
                   ["notice:Room directory (2):", "alpha: 2 members · 10 min ago", "ops (joined): 1 member · 10 min ago"]);
});

// --- search ------------------------------------------------------------------------------------------

test("search: results of the latest search only; a failure says why; Escape closes", () => {
  let { state, effects } = run(inRooms({ ops: [] }), { type: "search-submit", text: "grid in:ops" });
  const first = requests(effects)[0];
  assert.deepEqual(first.frame, { type: "search", query: "grid", limit: 50, room: "ops" });
  ({ state, effects } = run(state, { type: "submit", line: "/search tanker", clientId: "x" }));
  const second = requests(effects)[0];
  const hit = { ...msg(5, "B", "tanker on station"), highlights: [[0, 6]] };
  ({ state } = run(state, { ...first.reply, frame: { type: "results", query: "grid", messages: [msg(1, "B", "grid")] } }));
  assert.equal(state.search.status, "searching");                        // the older search's results are dropped
  ({ state } = run(state, { ...second.reply, frame: { type: "results", query: "tanker", messages: [hit, { bad: 1 }] } }));
  assert.equal(state.search.status, "done");
  assert.deepEqual(state.search.results.map((m) => m.text), ["tanker on station"]);
  ({ state } = run(state, { type: "escape" }));
  assert.equal(state.search, null);
  ({ state, effects } = run(state, { type: "search-submit", text: "x" }));
  ({ state } = run(state, { ...requests(effects)[0].failed, type: "request-failed", message: "query too long" }));
  assert.deepEqual([state.search.status, state.search.error], ["error", "query too long"]);
});

// --- mentions, unread counts, read markers -------------------------------------------------------------

test("welcome counts are shown at sign-in; a resume keeps the page's own counts", () => {
  let state = inRooms({ alpha: [], ops: [] }, { unread: { ops: 3 }, mentions: { ops: 1 } });
  assert.equal(state.current, "alpha");
  assert.deepEqual([state.rooms.get("ops").unread, state.rooms.get("ops").mentions], [3, 1]);
  ({ state } = run(state, frame({ ...WELCOME, rooms: ["alpha", "ops"], unread: { ops: 9 } })));
  assert.equal(state.rooms.get("ops").unread, 3);
});

test("a live mention in a room not read counts, notifies and is announced; reading the room marks it read", () => {
  let state = inRooms({ alpha: [], ops: [msg(1, "B", "old")] });
  let effects;
  ({ state, effects } = run(state, frame(msg(2, "B", "@alice grid ready?", { mentions: ["alice"] })),
                            frame(msg(3, "B", "@alice@B is someone else"))));
  const ops = state.rooms.get("ops");
  assert.deepEqual([ops.unread, ops.mentions], [2, 1]);
  assert.equal(ops.entries.find((e) => e.id === "B:2").mentionsMe, true);
  const notes = effects.filter((e) => e.type === "notify");
  assert.deepEqual(notes.map((n) => [n.title, n.body, n.room, n.msgId]),
                   [["bob@B mentioned you in ops", "@alice grid ready?", "ops", "B:2"]]);
  ({ state, effects } = run(state, { type: "select-room", room: "ops" }));
  assert.deepEqual(effects.filter((e) => e.type === "mark-read"), [{ type: "mark-read", room: "ops", order: [3, "B"] }]);
  assert.deepEqual([state.rooms.get("ops").unread, state.rooms.get("ops").mentions], [0, 0]);
  // While reading at the bottom, every new message (a late one too) marks the room again.
  ({ effects } = run(state, frame(msg(2, "C", "late", { late: true }))));
  assert.deepEqual(effects.filter((e) => e.type === "mark-read"), [{ type: "mark-read", room: "ops", order: [3, "B"] }]);
  // Scrolled up: not read; back at the bottom: read.
  ({ state, effects } = run(state, { type: "viewport", atBottom: false }, frame(msg(4, "B", "while scrolled up"))));
  assert.equal(state.rooms.get("ops").unread, 1);
  assert.equal(effects.filter((e) => e.type === "mark-read").length, 0);
  ({ state, effects } = run(state, { type: "viewport", atBottom: true }));
  assert.deepEqual(effects.filter((e) => e.type === "mark-read"), [{ type: "mark-read", room: "ops", order: [4, "B"] }]);
  // A hidden page reads nothing.
  ({ state, effects } = run(state, { type: "visibility", hidden: true }, frame(msg(5, "B", "hidden"))));
  assert.equal(state.rooms.get("ops").unread, 1);
  ({ effects } = run(state, { type: "visibility", hidden: false }));
  assert.equal(effects.filter((e) => e.type === "mark-read").length, 1);
});

test("a read marker from another session lowers the counts to what is after it", () => {
  let state = inRooms({ alpha: [], ops: [msg(1, "B", "one")] });
  ({ state } = run(state, frame(msg(2, "B", "two", { mentions: ["alice"] })), frame(msg(3, "B", "three")),
                   frame(msg(4, "A", "mine", { user: "alice" }))));
  assert.deepEqual([state.rooms.get("ops").unread, state.rooms.get("ops").mentions], [2, 1]);
  ({ state } = run(state, frame({ type: "read", room: "ops", order: [2, "B"] })));
  assert.deepEqual([state.rooms.get("ops").unread, state.rooms.get("ops").mentions], [1, 0]);
  ({ state } = run(state, frame({ type: "read", room: "ops", order: [1, "B"] })));     // never back
  assert.deepEqual(state.rooms.get("ops").read, [2, "B"]);
  ({ state } = run(state, frame({ type: "read", room: "ops", order: [4, "A"] })));
  assert.equal(state.rooms.get("ops").unread, 0);
});

// --- replies -----------------------------------------------------------------------------------------

test("a reply quotes its original; one not loaded is fetched alone; one not here yet is shown when it comes", () => {
  let state = inRooms({ ops: [msg(1, "B", "grid from 0300")] });
  let effects;
  ({ state, effects } = run(state, { type: "reply", room: "ops", msgId: "B:1" },
                            { type: "submit", line: "copy that", clientId: "c1" }));
  assert.deepEqual(requests(effects)[0].frame, { type: "say", room: "ops", text: "copy that", client_id: "c1", reply_to: "B:1" });
  assert.equal(state.replyTo, null);
  ({ state, effects } = run(state, frame(msg(2, "B", "answering", { reply_to: "B:1" }))));
  assert.deepEqual(state.rooms.get("ops").entries.at(-2).quote,
                   { state: "loaded", msgId: "B:1", user: "bob", origin: "B", text: "grid from 0300", late: false, precedence: "routine" });
  // The original of this reply is not loaded: asked for alone, and the server does not have it yet (late).
  ({ state, effects } = run(state, frame(msg(9, "B", "re: the late one", { reply_to: "C:4" }))));
  const ask = requests(effects)[0];
  assert.deepEqual(ask.frame, { type: "history", room: "ops", around: "C:4", limit: 1 });
  assert.equal(state.rooms.get("ops").entries.find((e) => e.id === "B:9").quote.state, "loading");
  ({ state } = run(state, { ...ask.failed, type: "request-failed", message: "history: no message 'C:4' in room 'ops'" }));
  assert.equal(state.rooms.get("ops").entries.find((e) => e.id === "B:9").quote.state, "missing");
  ({ state } = run(state, frame(msg(4, "C", "the original, late", { late: true, user: "carol" }))));
  const quote = state.rooms.get("ops").entries.find((e) => e.id === "B:9").quote;
  assert.deepEqual([quote.state, quote.text, quote.late], ["loaded", "the original, late", true]);
  // A reply to a line loaded only through the fetch.
  ({ state, effects } = run(state, frame(msg(10, "B", "re: old", { reply_to: "A:0" }))));
  const fetch = requests(effects)[0];
  ({ state } = run(state, { ...fetch.reply, frame: { type: "history", room: "ops", messages: [msg(0, "A", "ancient", { user: "alice" })],
                                                     more_before: false, more_after: true } }));
  assert.equal(state.rooms.get("ops").entries.find((e) => e.id === "B:10").quote.text, "ancient");
  assert.ok(!state.rooms.get("ops").entries.some((e) => e.id === "A:0"));     // a quote, not a line of the log
});

test("/reply answers the newest line of someone else; Escape forgets the reply", () => {
  let state = inRooms({ ops: [msg(1, "B", "question"), msg(2, "A", "mine", { user: "alice" })] });
  let effects;
  ({ state, effects } = run(state, { type: "submit", line: "/reply yes, confirmed", clientId: "c1" }));
  assert.equal(requests(effects)[0].frame.reply_to, "B:1");
  assert.equal(requests(effects)[0].frame.text, "yes, confirmed");
  ({ state } = run(state, { type: "submit", line: "/reply", clientId: "c2" }));
  assert.equal(state.replyTo.msgId, "B:1");
  ({ state } = run(state, { type: "escape" }));
  assert.equal(state.replyTo, null);
});

// --- going to a message -----------------------------------------------------------------------------------

test("a jump to a message not loaded fetches the page around it, with a gap, and completes when it comes", () => {
  let state = inRooms({ ops: [msg(90, "B", "ninety"), msg(91, "B", "ninety-one")] });
  let effects;
  ({ state, effects } = run(state, { type: "jump", room: "ops", msgId: "B:10" }));
  const ask = requests(effects)[0];
  assert.deepEqual(ask.frame, { type: "history", room: "ops", around: "B:10", limit: 50 });
  assert.equal(state.jump.loading, true);
  ({ state } = run(state, { ...ask.reply, frame: { type: "history", room: "ops", messages: [msg(9, "B", "nine"), msg(10, "B", "ten")],
                                                   more_before: true, more_after: true } }));
  assert.deepEqual(texts(state), ["nine", "ten", "gap:B:90", "ninety", "ninety-one"]);
  assert.equal(state.jump.msgId, "B:10");
  assert.ok(!state.jump.loading);
  assert.equal(state.following, false);
  ({ state, effects } = run(state, { type: "fill-gap", room: "ops", beforeId: "B:90" }));
  const fill = requests(effects)[0];
  assert.deepEqual(fill.frame, { type: "history", room: "ops", before: "B:90", limit: 50 });
  ({ state } = run(state, { ...fill.reply, frame: { type: "history", room: "ops", messages: [msg(10, "B", "ten"), msg(50, "B", "fifty")], more: true } }));
  assert.deepEqual(texts(state), ["nine", "ten", "fifty", "ninety", "ninety-one"]);
  // A search result in a public room one has not joined: shown as a preview.
  ({ state, effects } = run(state, { type: "jump", room: "intel", msgId: "C:3" }));
  assert.equal(state.current, "intel");
  assert.equal(state.rooms.get("intel").joined, false);
});

// --- precedence ------------------------------------------------------------------------------------------

test("/flash and the selector send a precedence; the selector goes back to routine after a FLASH", () => {
  let state = inRooms({ ops: [] });
  let effects;
  ({ state, effects } = run(state, { type: "submit", line: "/flash MEDEVAC grid 123", clientId: "c1" }));
  assert.deepEqual(requests(effects)[0].frame, { type: "say", room: "ops", text: "MEDEVAC grid 123", client_id: "c1", precedence: "flash" });
  ({ state, effects } = run(state, { type: "precedence", value: "immediate" }, { type: "submit", line: "abort", clientId: "c2" }));
  assert.equal(requests(effects)[0].frame.precedence, "immediate");
  assert.equal(state.precedence, "routine");
  ({ state, effects } = run(state, { type: "submit", line: "/priority fuel state", clientId: "c3" }, { type: "submit", line: "chatter", clientId: "c4" }));
  assert.deepEqual(requests(effects).map((e) => e.frame.precedence), ["priority", undefined]);
});

test("/me says the line as an action, as an IRC user's /me is said; alone it is refused with its usage", () => {
  let state = inRooms({ ops: [] });
  let effects;
  ({ state, effects } = run(state, { type: "submit", line: "/me checks the map", clientId: "c1" }));
  assert.deepEqual(requests(effects)[0].frame, { type: "say", room: "ops", text: "* alice checks the map", client_id: "c1" });
  ({ state, effects } = run(state, { type: "submit", line: "/me", clientId: "c2" }));
  assert.equal(requests(effects).length, 0);
  assert.match(state.rooms.get("ops").entries.filter((e) => e.kind === "notice").at(-1).text, /usage: \/me TEXT/);
});

test("FLASH from someone else alerts at once and again until acknowledged; the acknowledgement list grows", () => {
  let state = inRooms({ ops: [] });
  let effects;
  ({ state, effects } = run(state, frame(msg(5, "B", "MEDEVAC grid 123", { precedence: "flash" }))));
  assert.deepEqual(effects.filter((e) => e.type === "notify").map((n) => [n.title, n.urgent]), [["FLASH from bob@B in ops", true]]);
  assert.deepEqual(effects.filter((e) => e.type === "clock"), [{ type: "clock", on: true }]);
  assert.equal(state.alerts.get("B:5").precedence, "flash");
  assert.equal(state.rooms.get("ops").entries[0].alert, true);
  ({ state, effects } = run(state, { type: "tick", now: 1000 }, { type: "tick", now: 10_000 }));
  assert.equal(effects.filter((e) => e.type === "notify").length, 0);
  ({ state, effects } = run(state, { type: "tick", now: 16_000 }));
  assert.equal(effects.filter((e) => e.type === "notify").length, 1);    // repeated after 15 s
  ({ state, effects } = run(state, { type: "submit", line: "/ack", clientId: "x" }));
  assert.deepEqual(requests(effects)[0].frame, { type: "acknowledge", msg_id: "B:5" });
  assert.equal(state.alerts.get("B:5").acking, true);
  ({ state, effects } = run(state, { type: "tick", now: 60_000 }));
  assert.equal(effects.filter((e) => e.type === "notify").length, 0);    // not while it is on its way
  ({ state, effects } = run(state, frame({ type: "acknowledging", msg_id: "B:5", ref: "A:7" })));
  assert.equal(state.alerts.size, 0);
  assert.deepEqual(effects.filter((e) => e.type === "clock"), [{ type: "clock", on: false }]);
  ({ state } = run(state, frame({ type: "acknowledged", msg_id: "B:5", user: "alice", site: "A", at: 1_800_000_010 }),
                   frame({ type: "acknowledged", msg_id: "B:5", user: "carol", site: "A", at: 1_800_000_020 }),
                   frame({ type: "acknowledged", msg_id: "B:5", user: "alice", site: "A", at: 1_800_000_030 })));
  assert.deepEqual(state.rooms.get("ops").entries[0].acks.map((a) => `${a.user}@${a.site}`), ["alice@A", "carol@A"]);
});

test("alerts: history ones alert at the next tick, acknowledged ones and own ones never; other sessions end them", () => {
  const flash = (ts, extra = {}) => msg(ts, "B", `flash ${ts}`, { precedence: "flash", ...extra });
  let state = inRooms({ ops: [flash(1), flash(2, { acknowledgements: [{ user: "alice", site: "A", at: 1 }] }),
                              msg(3, "A", "my flash", { user: "alice", precedence: "flash", acknowledgements: [] }),
                              msg(4, "B", "immediate", { precedence: "immediate" }), msg(5, "B", "priority", { precedence: "priority" })] });
  assert.deepEqual([...state.alerts.keys()].sort(), ["B:1", "B:4"]);
  let effects;
  ({ state, effects } = run(state, { type: "tick", now: 5 }));
  assert.deepEqual(effects.filter((e) => e.type === "notify").map((n) => n.title),
                   ["FLASH from bob@B in ops", "IMMEDIATE from bob@B in ops"]);
  ({ state } = run(state, frame({ type: "acknowledged", msg_id: "B:1", user: "alice", site: "A", at: 9 })));
  assert.deepEqual([...state.alerts.keys()], ["B:4"]);
  const mine = state.rooms.get("ops").entries.find((e) => e.id === "A:3");
  assert.deepEqual([mine.alert, mine.acks], [false, []]);
  ({ state } = run(state, frame({ type: "acknowledged", msg_id: "A:3", user: "bob", site: "B", at: 12 })));
  assert.deepEqual(state.rooms.get("ops").entries.find((e) => e.id === "A:3").acks, [{ user: "bob", site: "B", at: 12 }]);
  ({ state } = run(state, { type: "acknowledge", msgId: "B:4" }, { type: "request-failed", what: "acknowledge", msgId: "B:4", message: "no" }));
  assert.equal(state.alerts.get("B:4").acking, false);                   // refused: it alerts again
});
