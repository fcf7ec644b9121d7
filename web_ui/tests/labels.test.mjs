// Security labels in the page (web_ui/static/js/labels.js, classification.js): the scheme from welcome, a room's
// floor from joined, each line's label, the composer's choice (only sendable labels, back to the floor when the
// room changes), say and create with labels, and the server's forbidden. Run with `node --test web_ui/tests/`.

import assert from "node:assert/strict";
import { test } from "node:test";

import { splitCreate } from "../static/js/classification.js";
import { labelColours, labelOf, labelText, levelColours, parseLabel, schemeOf, sendable, textColour } from "../static/js/labels.js";
import { initialState } from "../static/js/state.js";
import { frame, msg, run } from "./reducer.mjs";

const LABELS = { levels: ["UNCLASSIFIED", "RESTRICTED", "CONFIDENTIAL", "SECRET"], caveats: ["AUS", "GBR", "USA"],
                 default: { level: "RESTRICTED", caveats: [] } };      // (as chat_server's welcome spells it)
const WELCOME = { type: "welcome", user: "alice", site: "A", sites: { A: "connected", B: "connected" }, rooms: [],
                  presence: {}, session: "tok", n: 0, labels: LABELS, clearance: { level: "SECRET", caveats: ["GBR", "USA"] } };
const UNLABELED = { ...WELCOME, labels: undefined, clearance: undefined };
const L = (level, caveats = []) => ({ level, caveats });
const joined = (room, label, history = []) => frame({ type: "joined", room, history, more: false, label });
const says = (effects) => effects.filter((e) => e.type === "request" && e.frame.type === "say").map((e) => e.frame);
const notices = (state, room = "ops") => state.rooms.get(room).entries.filter((e) => e.kind === "notice").map((e) => e.text);
const scheme = schemeOf(WELCOME);

test("a label reads as people write it, caveats sorted; the people's spelling and JSON both parse", () => {
  assert.equal(labelText(labelOf(scheme, L("secret", ["USA", "GBR"]))), "SECRET//REL TO GBR, USA");
  assert.equal(labelText(labelOf(scheme, "SECRET//gbr/usa")), "SECRET//REL TO GBR, USA");
  assert.equal(labelText(labelOf(scheme, L("CONFIDENTIAL"))), "CONFIDENTIAL");
  assert.equal(labelText(scheme.default), "RESTRICTED");
  assert.deepEqual(parseLabel(scheme, "SECRET//REL TO NZL"), { ok: false, error: "unknown caveat NZL (caveats: AUS, GBR, USA)" });
  assert.equal(parseLabel(scheme, "COSMIC").ok, false);
  assert.equal(parseLabel(scheme, "SECRET//").ok, false);
  const odd = labelOf(scheme, L("COSMIC", ["NZL"]));
  assert.equal(odd.unknown, true);                               // shown as it came, in grey; trusted for nothing
  assert.equal(labelOf(null, L("SECRET")), null);                 // an unlabeled mission: no labels at all
  assert.equal(schemeOf(UNLABELED), null);
  assert.equal(schemeOf({ ...WELCOME, labels: { levels: ["<b>"] } }), null);
});

test("banner colours: the conventional ones by name, others by rank, text black or white by contrast", () => {
  assert.deepEqual(levelColours("UNCLASSIFIED", 0, 4), { bg: "#007a33", fg: "#ffffff" });
  assert.deepEqual(levelColours("CONFIDENTIAL", 2, 4), { bg: "#0033a0", fg: "#ffffff" });
  assert.deepEqual(levelColours("SECRET", 3, 4), { bg: "#c8102e", fg: "#ffffff" });
  assert.deepEqual(levelColours("TOP SECRET", 4, 5), { bg: "#ff8c00", fg: "#000000" });
  assert.deepEqual(levelColours("LEVEL9", 9, 10).bg, "#ff8c00");   // an unnamed top level wears the top colour
  assert.deepEqual(levelColours("LEVEL0", 0, 10).bg, "#007a33");
  assert.equal(textColour("#ffff00"), "#000000");
  assert.equal(labelColours(scheme, labelOf(scheme, L("COSMIC"))).bg, "#5f6b76");
});

test("sendable: dominated by the clearance, dominating the floor, lowest first", () => {
  const c = labelOf(scheme, L("SECRET", ["GBR", "USA"]));
  assert.deepEqual(sendable(scheme, c, labelOf(scheme, L("CONFIDENTIAL", ["GBR"]))).map(labelText),
                   ["CONFIDENTIAL//REL TO GBR", "CONFIDENTIAL//REL TO GBR, USA", "SECRET//REL TO GBR", "SECRET//REL TO GBR, USA"]);
  assert.deepEqual(sendable(scheme, c, labelOf(scheme, L("SECRET", ["AUS"]))), []);      // not cleared for the room
});

test("welcome, joined and message frames carry labels; an unlabeled mission shows none", () => {
  let { state } = run(initialState(), frame(WELCOME), joined("ops", L("CONFIDENTIAL")),
                      frame(msg(1, "B", "hello", { label: L("SECRET", ["USA"]) })));
  assert.equal(labelText(state.labels.clearance), "SECRET//REL TO GBR, USA");
  assert.equal(labelText(state.rooms.get("ops").label), "CONFIDENTIAL");
  assert.equal(labelText(state.rooms.get("ops").entries.find((e) => e.id === "B:1").label), "SECRET//REL TO USA");
  ({ state } = run(state, frame({ type: "rooms", more: false, rooms: [{ room: "ops", members: 2, online: 1, joined: true,
                                                                        label: L("CONFIDENTIAL") }] })));
  assert.match(notices(state).at(-1), /ops \[CONFIDENTIAL\]: 2 members, 1 online, joined/);
  ({ state } = run(initialState(), frame(UNLABELED), joined("ops", L("SECRET")), frame(msg(1, "B", "hi", { label: L("SECRET") }))));
  assert.equal(state.labels, null);
  assert.equal(state.rooms.get("ops").label, null);
  assert.equal(state.rooms.get("ops").entries.find((e) => e.id === "B:1").label, null);
});

test("a say carries the room's floor, or the composer's choice until another room is shown", () => {
  let { state, effects } = run(initialState(), frame(WELCOME), joined("ops", L("CONFIDENTIAL", ["GBR"])),
                               { type: "submit", line: "one", clientId: "c1" },
                               { type: "send-label", value: "SECRET//REL TO GBR, USA" },
                               { type: "submit", line: "two", clientId: "c2" });
  assert.deepEqual(says(effects).map((f) => [f.text, f.label]),
                   [["one", L("CONFIDENTIAL", ["GBR"])], ["two", L("SECRET", ["GBR", "USA"])]]);
  assert.equal(labelText(state.rooms.get("ops").entries.find((e) => e.key === "p:c2").label), "SECRET//REL TO GBR, USA");
  ({ state, effects } = run(state, joined("logs", L("UNCLASSIFIED")), { type: "select-room", room: "logs" },
                            { type: "select-room", room: "ops" },
                            { type: "submit", line: "three", clientId: "c3" }));
  assert.deepEqual(says(effects).map((f) => f.label), [L("CONFIDENTIAL", ["GBR"])]);     // back at the floor
  assert.equal(state.sendLabel, null);
  ({ state, effects } = run(initialState(), frame(UNLABELED), joined("ops"), { type: "submit", line: "plain", clientId: "c4" }));
  assert.equal("label" in says(effects)[0], false);
});

test("the composer refuses a label above the clearance or below the floor, saying why; /label lists the choices", () => {
  let { state } = run(initialState(), frame(WELCOME), joined("ops", L("CONFIDENTIAL", ["GBR"])),
                      { type: "send-label", value: "SECRET//REL TO AUS" }, { type: "send-label", value: "RESTRICTED" },
                      { type: "submit", line: "/label", clientId: "c0" });
  assert.equal(state.sendLabel, null);
  const [above, below, listing] = notices(state);
  assert.match(above, /You may not send SECRET\/\/REL TO AUS here: your clearance is SECRET\/\/REL TO GBR, USA/);
  assert.match(below, /You may not send RESTRICTED here: the room's floor is CONFIDENTIAL\/\/REL TO GBR/);
  assert.match(listing, /You may send: CONFIDENTIAL\/\/REL TO GBR · CONFIDENTIAL\/\/REL TO GBR, USA · SECRET/);
  ({ state } = run(state, { type: "submit", line: "/label secret//gbr", clientId: "c1" }));
  assert.equal(labelText(state.sendLabel), "SECRET//REL TO GBR");
});

test("with many caveats the menu lists the common choices, yet any label between floor and clearance may be chosen", () => {
  const many = ["A", "B", "C", "D", "E", "F", "G"];
  const wide = { ...WELCOME, labels: { levels: ["U", "S"], caveats: many, default: "U" }, clearance: L("S", many) };
  const { state } = run(initialState(), frame(wide), joined("ops", L("U")),
                        { type: "submit", line: "/label S//A,B", clientId: "c0" });
  assert.equal(labelText(state.sendLabel), "S//REL TO A, B");
  assert.equal(sendable(state.labels, state.labels.clearance, L("U")).some((l) => labelText(l) === "S//REL TO A, B"),
               false);    // (not in the menu's list: the choice is judged by dominance, not by that list)
});

test("a say the server refuses as forbidden is marked on its line and in a notice", () => {
  const { state } = run(initialState(), frame(WELCOME), joined("ops", L("CONFIDENTIAL")), { type: "conn", kind: "online" },
                        { type: "submit", line: "secret stuff", clientId: "c1" },
                        { type: "request-failed", what: "say", room: "ops", clientId: "c1", code: "forbidden",
                          message: "say: label above your clearance", request: "say" });
  const line = state.rooms.get("ops").entries.find((e) => e.key === "p:c1");
  assert.deepEqual([line.state, line.error], ["failed", "label above your clearance"]);
  assert.match(notices(state).at(-1), /Not sent at CONFIDENTIAL: refused by the server \(label above your clearance\)/);
});

test("/create ROOM [LABEL] [USER...]: the label read off the front, public without users, private with them", () => {
  assert.deepEqual(splitCreate(scheme, ["TOP"]), { label: null, members: ["TOP"] });
  const s = splitCreate(scheme, ["SECRET//REL", "TO", "GBR,", "USA", "bob", "carol"]);
  assert.deepEqual([labelText(s.label), s.members], ["SECRET//REL TO GBR, USA", ["bob", "carol"]]);
  assert.deepEqual(splitCreate(scheme, ["secret//gbr/usa"]).members, []);
  assert.match(splitCreate(scheme, ["SECRET//NZL", "bob"]).error, /unknown caveat NZL/);
  assert.deepEqual(splitCreate(null, ["bob"]), { label: null, members: ["bob"] });
  const creates = (effects) => effects.filter((e) => e.type === "request" && e.frame.type === "create").map((e) => e.frame);
  let { state, effects } = run(initialState(), frame(WELCOME), joined("ops", L("UNCLASSIFIED")),
                               { type: "submit", line: "/create plans SECRET//GBR", clientId: "x" },
                               { type: "submit", line: "/create cell CONFIDENTIAL bob", clientId: "y" },
                               { type: "submit", line: "/create top SECRET//AUS", clientId: "z" });
  assert.deepEqual(creates(effects), [{ type: "create", room: "plans", label: L("SECRET", ["GBR"]) },
                                      { type: "create", room: "cell", label: L("CONFIDENTIAL"), members: ["bob"] }]);
  assert.match(notices(state).at(-1), /Cannot create top at SECRET\/\/REL TO AUS: your clearance is SECRET\/\/REL TO GBR, USA/);
  ({ state } = run(state, frame({ type: "created", room: "plans", label: L("SECRET", ["GBR"]) })));
  assert.match(notices(state).at(-1), /Room plans at SECRET\/\/REL TO GBR created/);
});
