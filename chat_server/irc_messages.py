"""A chat message as IRC lines: the marks every client reads, and the IRCv3 tags for clients that asked.

One home for how the IRC front end writes a ``message`` frame (live, echoed,
replayed on join, or answering ``CHATHISTORY``). Pure functions, no state but
:class:`Quotes`, the few recent messages a reply's mark quotes.

Every client reads the marks, in the text: in a labeled mission first the
message's security label, ``[SECRET//REL TO GBR]`` (front_end_labels.py), then
``[FLASH A:90]`` / ``[IMMEDIATE A:90]``
(with the msg_id ``!ack`` takes), ``[LATE +12s]``, ``[REPAIRED +300s]`` (``+Ns``:
how long after it was sent it arrived; replayed lines say ``[LATE]``),
``[ORDER -62s]`` (sent that long before the line above it in the channel, yet
placed after it: docs/chat-protocol.md, "Order against time"), ``[re bob: first
words]`` (a reply; the quote only for a reader cleared for the original's
label, else ``[re A:17]``). A line with an alert mark (urgent, late or
repaired) is a ``NOTICE`` of its author, the others ``PRIVMSG`` s. A sender's
own line is never marked late (docs/ordering.md, "Urgent messages"): it was in
place when it was sent.

A client that negotiated ``server-time`` gets each line at its original time
(``time=``, the message's ``sent_at``); one that negotiated ``message-tags``
gets ``msgid`` and the marks as tags: ``rcm.example/precedence=flash`` (not for
routine), ``rcm.example/late``, ``rcm.example/repaired``, ``+reply=<msgid>``
(IRCv3's reply tag) and, in a labeled mission, ``rcm.example/label=SECRET//REL
TO GBR``. Replayed history for a client without server-time is the
server's ``NOTICE [history 12:03:01Z] <bob@B> ...`` as before.
"""
from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Callable, Collection, Mapping
from typing import Any, NamedTuple

from contracts.precedence import DEFAULT, PRECEDENCES, URGENT
from contracts.text import action_of

from .front_end_labels import NO_LABELS, LabelView
from .ircline import channel_of, format_action, format_line, irc_time, split_text
from .protocol import out_of_time

VENDOR = "rcm.example"                      # the vendor namespace of our tags (IRCv3: a DNS name; .example is reserved)
PRECEDENCE_TAG = f"{VENDOR}/precedence"
LATE_TAG = f"{VENDOR}/late"
REPAIRED_TAG = f"{VENDOR}/repaired"
LABEL_TAG = f"{VENDOR}/label"
REPLY_TAG = "+reply"                        # IRCv3 client tag (ratified); "+draft/reply" read as well
QUOTE_CHARS = 40


class Style(NamedTuple):
    """What one connection negotiated that changes how messages are written. Immutable, and a tuple: it is
    part of the key of a fan-out's rendering cache (irc_fanout.py ``FanLine``), looked up once per recipient, where a
    dataclass's hash (a Python call) cost three times a tuple's."""

    tags: bool = False          # message-tags: msgid and the rcm.example tags
    time: bool = False          # server-time: each line at its original time

    @staticmethod
    def of(caps: Collection[str]) -> Style:
        """The style of a connection that negotiated ``caps`` (one shared instance of each style)."""
        return _STYLES["message-tags" in caps, "server-time" in caps]


_STYLES = {(tags, at_time): Style(tags, at_time) for tags in (False, True) for at_time in (False, True)}
PLAIN = Style.of(())


class Quotes:
    """The last messages seen by any session of the front end, for the ``[re bob: ...]`` mark of a reply.

    A reply's original is in the reply's own room (the chat server refuses others), and an entry is used only
    for a reply in the same room. In a labeled mission the original may carry a label above the reply's, and
    the sessions sharing these entries hold different clearances: an entry keeps its label, and is quoted only
    to a reader cleared for it (``mark``'s ``may_read``)."""

    def __init__(self, size: int = 4096) -> None:
        self._size = size
        # msg_id -> (room, user, text, label as the frame carries it)
        self._seen: OrderedDict[str, tuple[str, str, str, Any]] = OrderedDict()

    def add(self, f: Mapping[str, Any]) -> None:
        """Remember a message frame (its room, author and the start of its text)."""
        msg_id = f.get("msg_id")
        if not isinstance(msg_id, str) or msg_id in self._seen:     # a fan-out: every session adds the same one
            return
        text = " ".join(str(f.get("text", "")).split())
        self._seen[msg_id] = (str(f.get("room", "")), str(f.get("user", "?")), text[:QUOTE_CHARS + 1], f.get("label"))
        while len(self._seen) > self._size:
            self._seen.popitem(last=False)

    def room_of(self, msg_id: str) -> str | None:
        """The room of a message seen here, or None."""
        seen = self._seen.get(msg_id)
        return seen[0] if seen is not None else None

    def mark(self, reply_to: str, room: str, may_read: Callable[[Any], bool] = lambda label: True) -> str:
        """``[re bob: first words…]``, or ``[re A:17]`` for an original this front end has not seen or whose
        label the reader may not read (``may_read`` of its label)."""
        seen = self._seen.get(reply_to)
        if seen is None or seen[0] != room or not may_read(seen[3]):
            return f"[re {reply_to}]"
        _, user, text, _ = seen
        return f"[re {user}: {text[:QUOTE_CHARS] + '…' if len(text) > QUOTE_CHARS else text}]"


def is_alert(f: Mapping[str, Any], own: bool) -> bool:
    """Whether a message is written as a NOTICE (urgent, late or repaired)."""
    return f.get("precedence") in URGENT or bool(f.get("repaired")) or (bool(f.get("late")) and not own)


def sent_at(f: Mapping[str, Any]) -> float | None:
    """A message's ``sent_at``, or None if it has none that is a number."""
    try:
        t = float(f["sent_at"])
    except (KeyError, TypeError, ValueError):
        return None
    return t if math.isfinite(t) and abs(t) < 1e11 else None


def marks(f: Mapping[str, Any], room: str, *, own: bool, now: float | None, quotes: Quotes,
          above: float | None = None, labels: LabelView = NO_LABELS) -> list[str]:
    """The marks that lead a message's text; ``now`` None for a replayed line (no arrival delay known);
    ``above``: the ``sent_at`` of the line shown above it in the channel; ``labels``: the reader's (the label's
    mark, in a labeled mission, and whether a reply's quote may be shown)."""
    out = []
    label = labels.text(f.get("label"))
    if label:
        out.append(f"[{label}]")
    precedence = f.get("precedence")
    if precedence in URGENT:
        out.append(f"[{str(precedence).upper()} {f.get('msg_id')}]")
    delay = ""
    if now is not None:
        try:
            delay = f" +{max(0, round(now - (sent_at(f) or now)))}s"
        except (TypeError, ValueError, OverflowError):
            delay = " +0s"
    if f.get("repaired"):
        out.append(f"[REPAIRED{delay}]")
    elif f.get("late") and not own:
        out.append(f"[LATE{delay}]")
    sent = sent_at(f)
    early = out_of_time(sent, above) if sent is not None else 0
    if early:
        out.append(f"[ORDER -{early}s]")
    reply_to = f.get("reply_to")
    if isinstance(reply_to, str):
        out.append(quotes.mark(reply_to, room, labels.may_read))
    return out


def message_tags(f: Mapping[str, Any], style: Style, *, own: bool, batch: str | None,
                 labels: LabelView = NO_LABELS) -> dict[str, str | None]:
    """The IRCv3 tags of a message's lines for a connection of ``style`` (inside ``batch`` if given)."""
    tags: dict[str, str | None] = {}
    if batch is not None:
        tags["batch"] = batch
    if style.time:
        sent = sent_at(f)
        if sent is not None:
            tags["time"] = irc_time(sent)
    if style.tags:
        if isinstance(f.get("msg_id"), str):
            tags["msgid"] = f["msg_id"]
        precedence = f.get("precedence")
        if precedence in PRECEDENCES and precedence != DEFAULT:
            tags[PRECEDENCE_TAG] = str(precedence)
        if f.get("repaired"):
            tags[REPAIRED_TAG] = None
        if f.get("late") and not own:
            tags[LATE_TAG] = None
        if isinstance(f.get("reply_to"), str):
            tags[REPLY_TAG] = f["reply_to"]
        label = labels.text(f.get("label"))
        if label:
            tags[LABEL_TAG] = label
    return tags


def message_lines(f: Mapping[str, Any], room: str, style: Style, *, own: bool, now: float | None, quotes: Quotes,
                  batch: str | None = None, server_name: str = "", above: float | None = None,
                  labels: LabelView = NO_LABELS) -> list[bytes]:
    """The IRC lines of one message frame: its author's ``PRIVMSG`` (or ``NOTICE`` when alerting), one per line
    of its text; a replayed one (``now`` None) to a client without server-time is the server's ``[history]``
    ``NOTICE`` instead."""
    user, site = str(f.get("user", "?")), str(f.get("origin", "?"))
    lead = " ".join(marks(f, room, own=own, now=now, quotes=quotes, above=above, labels=labels))
    lead = lead + " " if lead else ""
    tags = message_tags(f, style, own=own, batch=batch, labels=labels)
    ch = channel_of(room)
    bodies = split_text(str(f.get("text", "")))
    if now is None and not style.time:
        sent = sent_at(f)
        stamp = time.strftime("%H:%M:%S", time.gmtime(sent)) if sent is not None else "??:??:??"
        return [format_line(server_name, "NOTICE", ch, f"[history {stamp}Z] <{user}@{site}> {lead}{body}", tags=tags)
                for body in bodies]
    command = "NOTICE" if is_alert(f, own) else "PRIVMSG"
    # An action (anyone's /me, said as contracts.text.action_text) is shown as one again.
    did = action_of(user, bodies[0]) if command == "PRIVMSG" and len(bodies) == 1 else None
    if did is not None:
        return [format_action(f"{user}!{user}@{site}", ch, lead + did, tags=tags)]
    return [format_line(f"{user}!{user}@{site}", command, ch, lead + body, tags=tags) for body in bodies]


__all__ = ["LABEL_TAG", "LATE_TAG", "PLAIN", "PRECEDENCE_TAG", "REPAIRED_TAG", "REPLY_TAG", "VENDOR", "Quotes", "Style",
           "is_alert", "marks", "message_lines", "message_tags", "sent_at"]
