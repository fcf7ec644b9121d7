// Slash commands typed in the message box (the same set as the terminal client).

import { RAISED } from "./precedence.js";

export const COMMANDS = [
  ["/join ROOM", "join a room (created when new) and show it"],
  ["/leave [ROOM]", "leave the room (default: the one shown)"],
  ["/rooms", "list the rooms you may join, with members and who is online"],
  ["/create ROOM [LABEL] [USER...]", "create a room at a label (labelled missions): public, or private for you and the users named"],
  ["/label [LABEL]", "send at LABEL in this room until you change room (alone: what you may send here)"],
  ["/history [N]", "load N older messages of the room shown (default 50)"],
  ["/directory", "list every room you may join, with members and last activity"],
  ["/search WORDS", "search the site's history (\"a phrase\", pre*, in:ROOM, by:USER)"],
  ["/reply [TEXT]", "answer the line chosen with Reply (else the newest line of someone else)"],
  ["/me TEXT", "say TEXT as an action: \"* you TEXT\" (IRC users see it as their /me)"],
  ["/flash TEXT", "send at FLASH precedence (everyone must acknowledge); also /immediate, /priority"],
  ["/immediate TEXT", "send at IMMEDIATE precedence (everyone must acknowledge)"],
  ["/priority TEXT", "send at PRIORITY precedence"],
  ["/expire TIME TEXT", "send one line that expires after TIME (90, 90s, 15m, 2h, 1d; at most 7 days)"],
  ["/ack [all]", "acknowledge the most urgent FLASH/IMMEDIATE alert (all: every one)"],
  ["/switch ROOM", "show a joined room (also: click it, or Alt+Up/Alt+Down)"],
  ["/who", "who is online, per site"],
  ["/sites", "the status of every site"],
  ["/positions", "show or hide the units' positions (a plot and a table) and the report form"],
  ["/theme light|dark", "switch the colour theme"],
  ["/logout [all]", "log out (all: end every session of yours at this site)"],
  ["/help", "this list"],
];

const ARITY = {
  join: [1, 1], leave: [0, 1], rooms: [0, 0], create: [1, Infinity], history: [0, 1], switch: [1, 1], who: [0, 0],
  sites: [0, 0], theme: [1, 1], logout: [0, 1], help: [0, 0], directory: [0, 0], search: [1, Infinity],
  reply: [0, Infinity], me: [1, Infinity], ack: [0, 1], positions: [0, 0], expire: [2, Infinity], label: [0, Infinity],
  ...Object.fromEntries(RAISED.map((level) => [level, [1, Infinity]])),     // /flash TEXT ... /priority TEXT
};

/**
 * Parse what the user typed: {kind: "say", text} | {kind: "command", name, args, rest} | {kind: "error", message}.
 * `rest` is the text after the command word as typed (for commands that send text: line breaks kept).
 * A line starting with "//" sends the text with one "/" removed.
 */
export function parseInput(line) {
  const text = line.replace(/\s+$/, "");
  if (!text.trim()) return { kind: "empty" };
  if (text.startsWith("//")) return { kind: "say", text: text.slice(1) };
  if (!text.startsWith("/")) return { kind: "say", text };
  const [head, ...args] = text.slice(1).trim().split(/\s+/);
  const rest = text.slice(1).replace(/^\s*\S+\s?/, "");
  const name = head.toLowerCase();
  const arity = ARITY[name];
  if (!arity) return { kind: "error", message: `unknown command /${head} (type /help; start with // to send a "/")` };
  if (args.length < arity[0] || args.length > arity[1]) {
    const usage = COMMANDS.find(([u]) => u.split(" ")[0] === `/${name}`)[0];
    return { kind: "error", message: `usage: ${usage}` };
  }
  if (name === "history" && args.length && !/^[1-9][0-9]{0,3}$/.test(args[0])) {
    return { kind: "error", message: "/history takes a positive number of messages" };
  }
  if (name === "theme" && !["light", "dark"].includes(args[0])) return { kind: "error", message: "usage: /theme light|dark" };
  if (name === "logout" && args.length && args[0] !== "all") return { kind: "error", message: "usage: /logout [all]" };
  if (name === "ack" && args.length && args[0] !== "all") return { kind: "error", message: "usage: /ack [all]" };
  return { kind: "command", name, args, rest };
}
