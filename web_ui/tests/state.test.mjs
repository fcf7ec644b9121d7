// The web client's reducer (web_ui/static/js/state.js, rooms.js), without a browser:
// events in, state and effects out. Run with `node --test web_ui/tests/` (tests/web_ui/test_web_node.py does).

import assert from "node:assert/strict";
import { test } from "node:test";

import { initialState, reduce } from "../static/js/state.js";
import { frame, msg, run } from "./reducer.mjs";

const WELCOME = { type: "welcome", user: "alice", site: "A", sites: { A: "connected", B: "connected", C: "connected" },
                  rooms: [], presence: { A: ["alice"], B: ["bob"] }, session: "tok", n: 0 };




/** Alice signed in at A, in room ops with the given history. */
function inOps(history = []) {
  return run(initialState(), frame(WELCOME), frame({ type: "joined", room: "ops", history, more: false })).state;
}

function entries(state, room = "ops") {
  return state.rooms.get(room).entries.map((e) => (e.kind === "message" ? e.frame.text : `${e.kind}:${e.text}`));
}

/** A plain-data picture of a state (Maps and Sets spelled out), to see that nothing changed it. */
function picture(value) {
  return JSON.stringify(value, (k, v) => (v instanceof Map ? ["Map", [...v]] : v instanceof Set ? ["Set", [...v]] : v));
}

test("reduce never changes the state it is given", () => {
  let state = initialState();
  const events = [
    frame(WELCOME), frame({ type: "joined", room: "ops", history: [msg(1, "A", "one")], more: true }),
    frame(msg(3, "B", "three")), frame(msg(2, "C", "two", { late: true })),
    { type: "submit", line: "mine", clientId: "c1" }, frame({ type: "ack", client_id: "c1", msg_id: "A:9" }),
    frame({ type: "receipt", msg_id: "A:9", site: "B" }), frame(msg(9, "A", "mine", { user: "alice" })),
    frame({ type: "missing", origin: "C", count: 2 }), frame({ type: "presence", site: "B", online: ["carol"], offline: ["bob"] }),
    frame({ type: "site_status", site: "C", status: "suspected" }), { type: "load-older" },
    { type: "conn", kind: "reconnecting", info: { delay: 500, attempt: 1, reason: "lost" } },
    { type: "submit", line: "/who", clientId: "c2" }, { type: "logout", all: false },
  ];
  for (const e of events) {
    const before = picture(state);
    const next = reduce(state, e);
    assert.equal(picture(state), before, `reduce changed its input on ${JSON.stringify(e)}`);
    assert.notEqual(next, state);
    state = next;
  }
});

test("welcome shows the chat and joins the rooms the server remembers; a resume does not join again", () => {
  const { state, effects } = run(initialState(), frame({ ...WELCOME, rooms: ["ops", "intel"] }));
  assert.equal(state.screen, "chat");
  assert.equal(state.user, "alice");
  assert.deepEqual(effects.filter((e) => e.type === "request").map((e) => e.frame),
                   [{ type: "join", room: "ops" }, { type: "join", room: "intel" }, { type: "directory" }, { type: "positions" }]);
  const joined = run(state, frame({ type: "joined", room: "ops", history: [] }), frame({ type: "joined", room: "intel", history: [] }));
  assert.equal(joined.state.current, "ops");
  const resumed = run(joined.state, frame({ ...WELCOME, rooms: ["ops"] }));
  assert.deepEqual(resumed.effects.filter((e) => e.type === "request").map((e) => e.frame), [{ type: "directory" }, { type: "positions" }]);
  assert.equal(resumed.state.rooms.get("intel").joined, false);
});

test("late messages go to their place by order key, are marked and announced; replays are shown once", () => {
  let state = inOps([msg(1, "A", "one"), msg(3, "A", "three"), msg(5, "B", "five")]);
  let effects;
  ({ state, effects } = run(state, frame(msg(6, "A", "six")), frame(msg(4, "C", "four", { late: true })),
                            frame(msg(2, "B", "two", { late: true })), frame(msg(4, "C", "four", { late: true })),
                            frame(msg(6, "0", "six from 0"))));
  assert.deepEqual(entries(state), ["one", "two", "three", "four", "five", "six from 0", "six"]);
  const late = state.rooms.get("ops").entries.filter((e) => e.placed).map((e) => e.id);
  assert.deepEqual(late, ["B:2", "C:4"]);
  const said = effects.filter((e) => e.type === "announce").map((e) => e.text);
  assert.deepEqual(said, ["Late message from bob@C in ops, placed at its position earlier in the conversation",
                          "Late message from bob@B in ops, placed at its position earlier in the conversation"]);
});

test("own message: pending, accepted, then in its place with receipts and skipped sites", () => {
  let state = inOps([msg(1, "B", "one")]);
  let effects;
  ({ state, effects } = run(state, { type: "conn", kind: "online" }, { type: "submit", line: "from alice", clientId: "c1" }));
  assert.deepEqual(effects.map((e) => e.type), ["clear-input", "request"]);
  assert.deepEqual(effects[1].frame, { type: "say", room: "ops", text: "from alice", client_id: "c1" });
  let pending = state.rooms.get("ops").entries.at(-1);
  assert.equal(pending.kind, "pending");
  assert.equal(pending.state, "sending");
  ({ state } = run(state, frame({ type: "ack", client_id: "c1", msg_id: "A:7", skipped: ["C"] }),
                   frame(msg(2, "B", "two"))));
  pending = state.rooms.get("ops").entries.at(-1);
  assert.equal(pending.state, "accepted");
  assert.deepEqual(entries(state), ["one", "two", "pending:from alice"]);   // pending stays below
  ({ state } = run(state, frame({ type: "receipt", msg_id: "A:7", site: "B" }),
                   frame(msg(7, "A", "from alice", { user: "alice", receipts: ["A"] })),
                   frame({ type: "receipt", msg_id: "A:7", site: "C" })));
  assert.deepEqual(entries(state), ["one", "two", "from alice"]);
  const mine = state.rooms.get("ops").entries.at(-1);
  assert.equal(mine.mine, true);
  assert.deepEqual(mine.receipts, ["A", "B", "C"]);
  assert.deepEqual(mine.skipped, ["C"]);
});

test("own message delivered before its ack: the ack only drops the pending line", () => {
  let { state } = run(inOps(), { type: "submit", line: "quick", clientId: "c1" });
  assert.equal(state.rooms.get("ops").entries[0].state, "queued");      // not online: waits for the connection
  ({ state } = run(state, frame(msg(3, "A", "quick", { user: "alice" })),
                   frame({ type: "ack", client_id: "c1", msg_id: "A:3", skipped: ["C"] })));
  assert.deepEqual(entries(state), ["quick"]);
  assert.deepEqual(state.rooms.get("ops").entries[0].skipped, ["C"]);
  assert.equal(state.acked.size, 0);
});

test("a say that fails is marked, and Retry sends it again with the same client id", () => {
  let { state } = run(inOps(), { type: "submit", line: "hello", clientId: "c1" },
                      { type: "request-failed", what: "say", room: "ops", clientId: "c1", message: "rate limited" });
  assert.deepEqual([state.rooms.get("ops").entries[0].state, state.rooms.get("ops").entries[0].error], ["failed", "rate limited"]);
  let effects;
  ({ state, effects } = run(state, { type: "retry", room: "ops", clientId: "c1" }));
  assert.equal(state.rooms.get("ops").entries[0].state, "queued");
  assert.deepEqual(effects[0].frame, { type: "say", room: "ops", text: "hello", client_id: "c1" });
});

test("unread counts: other rooms, and the room shown while the page is hidden", () => {
  let { state } = run(inOps(), frame({ type: "joined", room: "intel", history: [] }),
                      frame({ ...msg(2, "B", "in intel"), room: "intel", msg_id: "B:2" }));
  assert.equal(state.rooms.get("intel").unread, 1);
  ({ state } = run(state, { type: "visibility", hidden: true }, frame(msg(3, "B", "while away")),
                   frame(msg(4, "A", "my other tab", { user: "alice" }))));
  assert.equal(state.rooms.get("ops").unread, 1);                        // own messages are not unread
  ({ state } = run(state, { type: "visibility", hidden: false }));
  assert.equal(state.rooms.get("ops").unread, 0);
  let effects;
  ({ state, effects } = run(state, { type: "cycle-room", step: 1 }));    // rooms by name: intel, ops; after ops comes intel
  assert.equal(state.current, "intel");
  assert.equal(state.rooms.get("intel").unread, 0);                     // read: the server is told so
  assert.deepEqual(effects, [{ type: "mark-read", room: "intel", order: [2, "B"] }, { type: "announce", text: "Room intel" }]);
  ({ state, effects } = run(state, { type: "select-room", room: "ops" }));
  assert.equal(state.current, "ops");
  assert.deepEqual(effects, [{ type: "focus", target: "composer" }]);
});

test("recovered replaces lost: one notice per origin, revised in place of the red one, the repaired message in place", () => {
  let { state } = run(inOps([msg(1, "A", "one"), msg(5, "A", "five")]), frame({ type: "missing", origin: "C", count: 2 }));
  assert.deepEqual(entries(state).at(-1), "notice:2 messages from site C were lost while C was disconnected; repair " +
                                            "brings them back if another site holds them.");
  ({ state } = run(state, frame({ ...msg(3, "C", "three", { late: true }), repaired: true }),
                   frame({ type: "missing", origin: "C", count: 1, recovered: 1, ranges: [[2, 2]] })));
  const notices = () => state.rooms.get("ops").entries.filter((e) => e.kind === "notice").map((e) => [e.text, e.cls]);
  assert.deepEqual(entries(state).slice(0, 3), ["one", "three", "five"]);
  assert.deepEqual(notices(), [["Recovered 1 message from site C, shown in place, marked repaired; up to 1 message " +
                                "still missing.", "partly"]]);
  assert.equal(state.rooms.get("ops").entries.find((e) => e.frame && e.frame.text === "three").frame.repaired, true);
  ({ state } = run(state, frame({ type: "missing", origin: "C", count: 0, recovered: 1, ranges: [] })));
  assert.deepEqual(notices(), [["Recovered 2 messages from site C: shown in place, marked repaired.", "recovered"]]);
});

test("a resume drops the notices of origins whose messages came back while the page was away (welcome's missing)", () => {
  let { state } = run(inOps(), frame({ type: "missing", origin: "B", count: 2 }), frame({ type: "missing", origin: "C", count: 3 }));
  ({ state } = run(state, frame({ ...WELCOME, rooms: ["ops"], missing: { C: 1 } })));      // the same user and site: a resume
  const notices = state.rooms.get("ops").entries.filter((e) => e.kind === "notice").map((e) => e.text);
  assert.deepEqual(notices, ["1 message from site C was lost while C was disconnected; repair brings it back if another " +
                             "site holds it."]);
});

test("a site reached only through relays is connected via its next hop, in welcome and site_status", () => {
  let { state } = run(initialState(), frame({ ...WELCOME, sites: { A: "connected", B: "connected", C: "connected" }, via: { C: "B" } }));
  assert.equal(state.via.get("C"), "B");
  ({ state } = run(state, frame({ type: "site_status", site: "C", status: "connected" })));
  assert.equal(state.via.has("C"), false);                               // direct again
  let effects;
  ({ state, effects } = run(state, frame({ type: "site_status", site: "B", status: "connected", via: "C" })));
  assert.equal(state.via.get("B"), "C");
  assert.deepEqual(effects.at(-1), { type: "announce", text: "Site B is connected via C" });
});

test("a site whose chat server is gone is connected with its chat server down, in welcome, site_status, /sites and /who", () => {
  let { state } = run(initialState(), frame({ ...WELCOME, chat_down: ["C"] }), frame({ type: "joined", room: "ops", history: [], more: false }));
  assert.deepEqual([...state.chatDown], ["C"]);
  let effects;
  ({ state, effects } = run(state, frame({ type: "site_status", site: "B", status: "connected", chat_down: true })));
  assert.deepEqual(effects.at(-1), { type: "announce", text: "Site B is connected; its chat server is down" });
  ({ state } = run(state, { type: "submit", line: "/sites", clientId: "x" }));
  assert.equal(entries(state).at(-1), "notice:Sites:\nA: connected (here)\nB: connected, chat server down\nC: connected, chat server down");
  ({ state, effects } = run(state, frame({ type: "site_status", site: "C", status: "connected" })));   // a newer roster came
  assert.deepEqual(effects.at(-1), { type: "announce", text: "Site C is connected; its chat server is back" });
  ({ state, effects } = run(state, frame({ type: "site_status", site: "B", status: "suspected", chat_down: true })));
  assert.deepEqual(effects.at(-1), { type: "announce", text: "Site B is suspected" });      // (said once, above)
  ({ state } = run(state, { type: "submit", line: "/who", clientId: "y" }));
  assert.equal(entries(state).at(-1), "notice:Online:\nA (connected): alice\nB (suspected, chat server down): bob\nC (connected): nobody");
});

test("a status word the client does not know is unknown (contracts/status.py), in welcome, site_status and /sites", () => {
  let { state } = run(initialState(), frame({ ...WELCOME, sites: { A: "connected", B: "up", C: "suspected" } }),
                      frame({ type: "joined", room: "ops", history: [], more: false }));
  assert.deepEqual([...state.sites], [["A", "connected"], ["B", "unknown"], ["C", "suspected"]]);
  let effects;
  ({ state, effects } = run(state, frame({ type: "site_status", site: "C", status: 7 })));
  assert.equal(state.sites.get("C"), "unknown");
  assert.deepEqual(effects.at(-1), { type: "announce", text: "Site C is unknown" });
  ({ state } = run(state, { type: "submit", line: "/sites", clientId: "x" }));
  assert.equal(entries(state).at(-1), "notice:Sites:\nA: connected (here)\nB: unknown\nC: unknown");
});

test("missing messages: a notice in every joined room, after what was shown; the banner when none", () => {
  let { state, effects } = run(inOps([msg(1, "A", "one")]), frame({ type: "missing", origin: "C", count: 2 }));
  assert.deepEqual(entries(state), ["one", "notice:2 messages from site C were lost while C was disconnected; repair brings them back if another site holds them."]);
  assert.equal(state.rooms.get("ops").entries[1].cls, "missing");
  assert.equal(effects.at(-1).type, "announce");
  ({ state } = run(initialState(), frame(WELCOME), frame({ type: "missing", origin: "C", count: 1 })));
  assert.match(state.banner.text, /^1 message from site C was lost/);
});

test("history: one request at a time, from the oldest message; older messages merge in", () => {
  let state = run(initialState(), frame(WELCOME), frame({ type: "joined", room: "ops", history: [msg(5, "A", "five")], more: true })).state;
  let effects;
  ({ state, effects } = run(state, { type: "load-older" }, { type: "load-older" }));
  assert.deepEqual(effects.map((e) => e.frame), [{ type: "history", room: "ops", limit: 50, before: "A:5" }]);
  ({ state, effects } = run(state, frame({ type: "history", room: "ops", messages: [msg(2, "B", "two"), msg(1, "A", "one")], more: false })));
  assert.deepEqual(entries(state), ["one", "two", "five"]);
  assert.equal(state.rooms.get("ops").loading, false);
  ({ state } = run(state, { type: "submit", line: "/history", clientId: "x" }));
  assert.equal(entries(state).at(-1), "notice:No older messages.");
});

test("the connection: banner while reconnecting, cleared when online; an expired session asks to sign in", () => {
  let { state } = run(inOps(), { type: "conn", kind: "reconnecting", info: { delay: 400, attempt: 1, reason: "server shutting down" } });
  assert.equal(state.banner.kind, "reconnecting");
  assert.match(state.banner.text, /\(server shutting down\)\. Reconnecting in 0\.4 s \(attempt 1\)/);
  ({ state } = run(state, { type: "conn", kind: "online" }));
  assert.equal(state.banner, null);
  let effects;
  ({ state, effects } = run(state, { type: "conn", kind: "expired", info: { reason: "auth_failed" } }));
  assert.equal(state.screen, "login");
  assert.match(state.login.error, /could not be resumed \(auth_failed\)/);
  assert.deepEqual(effects, [{ type: "focus", target: "login-user" }]);
});

test("signing in: checked, the session emptied, the password only in the login effect", () => {
  let { state, effects } = run(initialState(), { type: "login-submit", user: "  ", password: "x" });
  assert.equal(state.login.error, "Give a user name and a password.");
  assert.deepEqual(effects, []);
  ({ state, effects } = run(inOps(), { type: "login-submit", user: " bob ", password: "pw secret" }));
  assert.equal(state.rooms.size, 0);
  assert.equal(state.user, null);
  assert.equal(state.login.busy, true);
  assert.deepEqual(effects, [{ type: "clear-input", id: "login-password" }, { type: "login", user: "bob", password: "pw secret" }]);
  assert.ok(!picture({ ...state, effects: [] }).includes("pw secret"));
  ({ state } = run(state, { type: "login-failed", code: "auth_failed", message: "no" }));
  assert.equal(state.login.error, "Unknown user or wrong password.");
  assert.equal(state.login.busy, false);
});

test("signing out: the session is emptied at once and the logout effect asks the server", () => {
  let { state, effects } = run(inOps([msg(1, "A", "one")]), { type: "submit", line: "/logout all", clientId: "x" });
  assert.equal(state.screen, "login");
  assert.equal(state.rooms.size, 0);
  assert.equal(state.login.note, "Signing out…");
  assert.deepEqual(effects.map((e) => e.type), ["clear-input", "focus", "logout"]);
  assert.equal(effects[2].all, true);
  ({ state } = run(state, { type: "logged-out", confirmed: true, all: true }));
  assert.equal(state.login.note, "Signed out of every session at this site.");
  assert.equal(state.login.busy, false);
  ({ state } = run(inOps(), { type: "logout", all: false }, { type: "logged-out", confirmed: false, all: false, reason: "no answer within 3 s" }));
  assert.equal(state.login.note, "Signed out of this page; the chat server did not confirm (no answer within 3 s).");
});

test("commands: listings, errors that keep what was typed, theme", () => {
  let { state, effects } = run(inOps(), { type: "submit", line: "/who", clientId: "x" }, { type: "submit", line: "/sites", clientId: "x" });
  assert.deepEqual(entries(state), ["notice:Online:\nA (connected): alice\nB (connected): bob\nC (connected): nobody",
                                    "notice:Sites:\nA: connected (here)\nB: connected\nC: connected"]);
  ({ state, effects } = run(state, { type: "submit", line: "/nonsense", clientId: "x" }));
  assert.deepEqual(effects, []);                                          // what was typed stays in the box
  assert.match(entries(state).at(-1), /unknown command \/nonsense/);
  ({ state, effects } = run(state, { type: "submit", line: "/switch intel", clientId: "x" }));
  assert.deepEqual(effects, [{ type: "clear-input", id: "composer-input" }]);
  assert.equal(entries(state).at(-1), "notice:Not in intel: /join intel first.");
  ({ state, effects } = run(state, { type: "submit", line: "/theme dark", clientId: "x" }));
  assert.equal(state.theme, "dark");
  assert.deepEqual(effects.at(-1), { type: "save-theme", theme: "dark" });
  ({ state, effects } = run(state, { type: "toggle-theme" }));
  assert.equal(state.theme, "light");
  ({ state } = run(initialState(), frame(WELCOME)));
  ({ state, effects } = run(state, { type: "submit", line: "no room", clientId: "x" }));
  assert.equal(state.banner.text, "Join a room first: /join ROOM");
  assert.deepEqual(effects, []);
});

test("join and create: the room is shown once the server says joined", () => {
  let { state, effects } = run(inOps(), { type: "join-submit", room: " intel " });
  assert.deepEqual(effects.map((e) => e.type), ["clear-input", "request"]);
  assert.equal(state.current, "ops");
  ({ state } = run(state, frame({ type: "joined", room: "intel", history: [] })));
  assert.equal(state.current, "intel");
  ({ state, effects } = run(state, { type: "submit", line: "/create secret bob", clientId: "x" }));
  assert.deepEqual(effects.at(-1).frame, { type: "create", room: "secret", members: ["bob"] });
  ({ state } = run(state, frame({ type: "joined", room: "secret", private: true, members: ["alice", "bob"], history: [] })));
  assert.equal(state.current, "secret");
  ({ state } = run(state, frame({ type: "left", room: "secret", reason: "removed" })));
  assert.equal(state.current, "intel");
  assert.equal(state.banner.text, "You left secret: removed");
  ({ state } = run(state, { type: "request-failed", what: "join", room: "nope", message: "bad room name" }));
  assert.equal(entries(state, "intel").at(-1), "notice:Cannot join nope: bad room name");
});

const room = (name, extra = {}) => ({ room: name, private: false, members: 1, online: 1, joined: false, ...extra });

test("/rooms follows the server's pages: each `more` asks for the rooms after the last one, then one listing", () => {
  let { state, effects } = run(inOps(), { type: "submit", line: "/rooms", clientId: "x" });
  assert.deepEqual(effects.at(-1).frame, { type: "rooms" });
  ({ state, effects } = run(state, frame({ type: "rooms", rooms: [room("a"), room("b")], more: true })));
  assert.deepEqual(effects.map((e) => e.frame), [{ type: "rooms", after: "b" }]);
  assert.equal(entries(state).filter((t) => t.startsWith("notice:Rooms")).length, 0);    // nothing shown yet
  ({ state, effects } = run(state, frame({ type: "rooms", rooms: [room("c"), room("d", { private: true })], more: true })));
  assert.deepEqual(effects.map((e) => e.frame), [{ type: "rooms", after: "d" }]);
  ({ state, effects } = run(state, frame({ type: "rooms", rooms: [room("ops", { joined: true, members: 2 })], more: false })));
  assert.deepEqual(effects.filter((e) => e.type === "request"), []);
  const listing = entries(state).at(-1);
  assert.match(listing, /^notice:Rooms \(5\):/);
  for (const name of ["a", "b", "c", "d (private)", "ops"]) assert.match(listing, new RegExp(`\\n${name.replace(/[()]/g, "\\$&")}: `));
  assert.match(listing, /ops: 2 members, 1 online, joined/);
  assert.equal(state.listing, null);
});

test("/rooms: a failed next page shows what came and says so; a new /rooms starts from the first page", () => {
  let { state } = run(inOps(), { type: "submit", line: "/rooms", clientId: "x" },
                      frame({ type: "rooms", rooms: [room("a")], more: true }));
  ({ state } = run(state, { type: "request-failed", what: "rooms", message: "rate limited" }));
  const [listing, error] = entries(state).slice(-2);
  assert.match(listing, /^notice:Rooms \(1\):\na: .*\n\(incomplete: the next page failed: rate limited\)$/);
  assert.equal(error, "notice:Cannot list rooms: rate limited");
  let effects;
  ({ state } = run(state, { type: "submit", line: "/rooms", clientId: "x" },
                   frame({ type: "rooms", rooms: [room("a")], more: true })));
  ({ state, effects } = run(state, { type: "submit", line: "/rooms", clientId: "x" }));
  assert.equal(state.listing, null);
  assert.deepEqual(effects.at(-1).frame, { type: "rooms" });
  ({ state } = run(state, frame({ type: "rooms", rooms: [], more: false })));
  assert.equal(entries(state).at(-1), "notice:No rooms yet: /join ROOM creates one.");
});
