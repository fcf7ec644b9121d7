"""Hostile TAK input, one generator per kind: what a client of the TAK front end can send in one write.

The TAK front end (chat_server/tak/, docs/tak.md) cuts a TCP stream into events (stream.py: CoT XML up to
``</event>``, or TAK protocol v1: ``0xbf``, a varint length, a ``TakMessage``), bounded to
``MAX_EVENT_BYTES``, and decodes them (cot.py: defusedxml, takproto) into bounded fields. Each input here
is the bytes of one write of a hostile client that is logged in (its callsign is its account, as in a lab
without TLS):

* ``tak/xml``: CoT events as ATAK writes them (position reports, GeoChat, receipts, pings, the protocol
  negotiation, other types), each attribute a good value, at and past its limit (``MAX_UID``,
  ``MAX_NAME``, ``MAX_TEXT``), a coordinate or number at a bound, NaN, infinite or not a number, a time
  at the edges of what datetime reads;
* ``tak/dtd``: XML that attacks the parser: DTDs, internal and external entities (billion laughs,
  quadratic blow-up, XXE), deep nesting, many or huge attributes, CDATA, comments and processing
  instructions, namespaces, encodings, ``</event>`` inside a text;
* ``tak/proto``: TAK protocol v1 frames: ``TakMessage`` fields at their bounds (times, coordinates,
  strings at and past their limits, ``xmlDetail`` holding the XML attacks), truncated or random protobuf;
* ``tak/stream``: the framing: bad magic, length varints torn, over-long, huge (up to 2^64 - 1) or zero,
  events back to back in both framings, whitespace and garbage between them, an event over the limit.

An input may leave the stream inside an event (a torn varint, a length larger than what follows, XML
without its ``</event>``): the probe then opens a new connection for the next input, as the client would
have to.
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from takproto.proto import TakMessage

from chat_server.tak.cot import MAX_EVENT_BYTES, MAX_NAME, MAX_TEXT, MAX_TYPE, MAX_UID
from rcm.wire import encode_varint

from .chat_requests import ROOMS, WORDS, ChatHint, ChatInputs
from .draws import BOUNDS

TYPES = ("a-f-G-U-C", "a-h-A", "a-", "a", "b-t-f", "b-t-f", "b-t-f-r", "b-t-f-d", "t-x-c-t", "t-x-takp-q",
         "t-x-takp-v", "t-x-d-d", "u-d-p", "b-m-p-s-p-i", "", "A-F", "a" * MAX_TYPE,
         "a" * (MAX_TYPE + 1), "b-t-f\x00", "t-x-")
CHATROOMS = ("All Chat Rooms", "r0", "r1", "#net", "ops", "ops.B", "RCM-A", "", " ", "x" * MAX_NAME,
             "x" * (MAX_NAME + 1), "Team Cyan", "\u00e9t\u00e9", "a/b", "r0\t")
TIMES = ("2026-11-18T00:00:00.000Z", "0001-01-01T00:00:00Z", "0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59Z",
         "9999-12-31T23:59:59.999999-14:00", "1970-01-01T00:00:00Z", "2026-02-30T00:00:00Z", "2026-11-18",
         "2026-11-18T00:00:00", "2026-11-18T00:00:00+25:00", "2026-11-18T00:00:00.0000000Z", "now", "", "0",
         "-1", "1e18", "2026-11-18T00:00:00Z" + " " * 30, "x" * 41, "2026-W47-3T00:00Z", "+002026-11-18T00:00Z")
NUMBERS = ("0", "-0", "90", "90.0000001", "-90", "180", "-180.0001", "1e308", "1e309", "-1e309", "NaN", "nan",
           "inf", "-Infinity", "9999999", "9999999.0", "1_0", "0x10", "", " ", "1,5", "\u0661", "1" * 5000, "5e-324")


@dataclass(frozen=True, slots=True)
class TakBytes:
    """One write of the hostile TAK client (events in either framing, or bytes that are none)."""

    data: bytes


class TakInputs(ChatInputs):
    """Draws hostile TAK input of one kind at a time (see the module docstring)."""

    # -- values ---------------------------------------------------------------------------------
    def pick(self, good: str, odd: tuple[str, ...], p_good: float = 0.9) -> str:
        return good if self.rng.random() < p_good else self.rng.choice(odd)

    def coordinate(self, good: float) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.9:
            return repr(good + rng.uniform(-1, 1))
        return rng.choice(NUMBERS) if r < 0.97 else str(rng.choice(BOUNDS))

    def cot_time(self, h: ChatHint) -> str:
        if self.rng.random() < 0.9:
            t = h.now + self.rng.uniform(-60, 600)
            return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + ".000Z"
        return self.rng.choice(TIMES)

    def remarks(self) -> str:
        rng = self.rng
        r = rng.random()
        if r < 0.5:
            return self.sentence()
        if r < 0.6:
            return self.long(MAX_TEXT)[:MAX_EVENT_BYTES - 1000]
        if r < 0.75:
            return rng.choice(("[FLASH] ", "[IMMEDIATE] [SECRET] ", "[SECRET] [FLASH]", "[", "[]", "[FLASH]",
                               "!flash x", " ")) + rng.choice(WORDS)
        if r < 0.85:
            return "".join(chr(rng.choice((0x202E, 0x1F4A3, 0x0301, 0x4E2D, 0x85, 0xFFFE, 0xFFFF, 0xFDD0)))
                           for _ in range(rng.choice((1, 50, 1000))))
        return rng.choice(("", "   ", "&lt;b&gt;", "&#0;", "&#x1;", "&#xFFFE;", "&#1114111;", "&#1114112;",
                           "&#x202e;", "]]>", "&amp;amp;", "\t\n"))

    @staticmethod
    def attr(value: str) -> str:
        return value.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;")

    def event_xml(self, h: ChatHint, kind: str | None = None, detail: str | None = None) -> str:
        """One CoT event as XML, from the hostile user (callsign = account), every field now and then bent."""
        rng = self.rng
        kind = kind if kind is not None else rng.choice(TYPES)
        uid = self.pick("ANDROID-" + h.user, ("", "x" * MAX_UID, "x" * (MAX_UID + 1), "RCM.A.alice", "u\x01"))
        now = self.cot_time(h)
        a = self.attr
        attrs = {"version": "2.0", "uid": uid, "type": kind, "how": self.pick("h-g-i-g-o", ("", "x" * 200)),
                 "time": now, "start": self.cot_time(h) if rng.random() < 0.2 else now,
                 "stale": self.cot_time(h)}
        for k in list(attrs):
            if rng.random() < 0.01:
                del attrs[k]
        point = {"lat": self.coordinate(51.5), "lon": self.coordinate(-0.1), "hae": self.coordinate(100.0),
                 "ce": self.pick("9999999.0", NUMBERS), "le": self.pick("9999999.0", NUMBERS)}
        head = " ".join(f'{k}="{a(v)}"' for k, v in attrs.items())
        pt = "" if rng.random() < 0.01 else "<point " + " ".join(f'{k}="{a(v)}"' for k, v in point.items()) + "/>"
        decl = rng.choice(('<?xml version="1.0" encoding="UTF-8" standalone="yes"?>', "", "",
                           "<?xml version='1.0'?>\n"))
        return f"{decl}<event {head}>{pt}<detail>{detail if detail is not None else self.detail(h, kind)}</detail>" \
               "</event>"

    def detail(self, h: ChatHint, kind: str) -> str:
        rng = self.rng
        a = self.attr
        parts = []
        callsign = self.pick(h.user, ("alice", "", "x" * MAX_NAME, "x" * (MAX_NAME + 1), "9bad", "a b", "u\u00e9"),
                             0.95)
        if kind.startswith("a") or rng.random() < 0.2:
            parts.append(f'<contact callsign="{a(callsign)}" endpoint="{a(self.pick("*:-1:stcp", ("x" * 200,)))}"/>')
            if rng.random() < 0.5:
                parts.append(f'<track course="{self.coordinate(90.0)}" speed="{self.coordinate(10.0)}"/>')
        if kind.startswith("b-t-f") or rng.random() < 0.1:
            room = rng.choice(CHATROOMS + tuple(h.rooms) + ROOMS)
            mid = self.pick(f"m{rng.randrange(10**6)}", ("", "x" * MAX_NAME, "x" * (MAX_NAME + 1),
                                                         rng.choice(h.msg_ids or ("C:1",))))
            tag = "__chatreceipt" if kind in ("b-t-f-d", "b-t-f-r") and rng.random() < 0.5 else "__chat"
            parts.append(f'<{tag} parent="RootContactGroup" messageId="{a(mid)}" chatroom="{a(room)}" '
                         f'id="{a(self.pick(room, ("RCM.A.alice", "x" * (MAX_UID + 1))))}" '
                         f'senderCallsign="{a(callsign)}"><chatgrp uid0="ANDROID-{a(h.user)}" uid1="{a(room)}"/>'
                         f"</{tag}>")
            parts.append(f'<link uid="ANDROID-{a(h.user)}" type="a-f-G-U-C" relation="p-p"/>')
            text = self.remarks()
            when = f' time="{a(self.cot_time(h))}"' if rng.random() < 0.5 else ""
            parts.append(f"<remarks{when}>{text if rng.random() < 0.05 else a(text)}</remarks>")
        if kind.startswith("t-x-takp") or rng.random() < 0.05:
            version = self.pick("1", ("0", "2", "-1", "65536", "65537", "1e9", "NaN", "x", ""))
            parts.append(f'<TakControl><TakRequest version="{version}"/>'
                         f'<TakResponse status="{self.pick("true", ("TRUE", "1", ""))}"/></TakControl>')
        if rng.random() < 0.1:
            parts.append(rng.choice(("<__group name='Cyan' role='Team Member'/>", "<takv/>", "<x>" * 50 + "</x>" * 50,
                                     "<status battery='" + "9" * 400 + "'/>", "<contact/>", "<contact/><contact/>")))
        rng.shuffle(parts)
        return "".join(parts)

    # -- kinds ----------------------------------------------------------------------------------
    def xml(self, h: ChatHint) -> TakBytes:
        return TakBytes(self.event_xml(h).encode("utf-8", "surrogatepass"))

    def dtd(self, h: ChatHint) -> TakBytes:
        """XML that attacks the parser (the event around it is otherwise a good GeoChat or position report)."""
        rng = self.rng
        r = rng.random()
        lol = ('<!DOCTYPE event [<!ENTITY a "' + "x" * 100 + '">'
               + "".join(f'<!ENTITY {chr(98 + i)} "' + f"&{chr(97 + i)};" * 10 + '">' for i in range(9)) + "]>")
        if r < 0.3:
            doctype = rng.choice((
                lol, '<!DOCTYPE event [<!ENTITY x SYSTEM "file:///etc/passwd">]>',
                '<!DOCTYPE event [<!ENTITY x SYSTEM "http://127.0.0.1:1/x">]>',
                '<!DOCTYPE event SYSTEM "http://127.0.0.1:1/x.dtd">',
                '<!DOCTYPE event [<!ENTITY % p SYSTEM "http://127.0.0.1:1/p">%p;]>',
                '<!DOCTYPE event [<!ENTITY x "' + "y" * 30000 + '">]>', "<!DOCTYPE event>",
                '<!DOCTYPE event [<!ATTLIST event uid CDATA "dflt">]>', '<!DOCTYPE event [<!ELEMENT event ANY>]>'))
            ref = rng.choice(("&x;", "&j;", "&x;" * 1000, "&nosuch;", ""))
            return TakBytes((doctype + self.event_xml(h, "b-t-f", detail=f"<remarks>{ref}</remarks>")).encode())
        if r < 0.45:
            depth = rng.choice((100, 1000, 5000, MAX_EVENT_BYTES // 7))
            where = rng.choice(("detail", "remarks", "event"))
            nest = "<x>" * depth + "</x>" * depth
            if where == "event":
                return TakBytes(("<event>" * depth + "</event>" * depth).encode())
            inner = f"<remarks>{nest}</remarks>" if where == "remarks" else nest
            return TakBytes(self.event_xml(h, rng.choice(("b-t-f", "a-f-G-U-C")), detail=inner).encode())
        if r < 0.6:
            n = rng.choice((100, 3000, MAX_EVENT_BYTES // 10))
            attrs = " ".join(f'a{i}="v"' for i in range(n)) if rng.random() < 0.5 else f'a="{"v" * (n * 9)}"'
            return TakBytes(self.event_xml(h, "a-f-G-U-C", detail=f"<contact callsign='{h.user}' {attrs}/>").encode())
        if r < 0.75:
            inner = rng.choice(("<![CDATA[</event>]]>", "<!-- </event> -->", "<?pi </event>?>",
                                "<![CDATA[" + "x" * 60000 + "]]>", "<!--" + "-" * 100 + "-->",
                                "<?xml-stylesheet href='x'?>",
                                "<remarks><![CDATA[hello]]></remarks>", "&lt;/event&gt;"))
            return TakBytes(self.event_xml(h, "b-t-f", detail=inner).encode())
        if r < 0.9:
            return TakBytes(rng.choice((
                b'<?xml version="1.0" encoding="UTF-16"?><event/>', b'<?xml version="1.0" encoding="EBCDIC"?><event/>',
                "<?xml version='1.0' encoding='latin-1'?><event uid='\xe9'/>".encode("latin-1"),
                b'<?xml version="1.1"?><event/>', b"<e:event xmlns:e='urn:x'></e:event>", b"<event xmlns='urn:x'/>",
                b"<event></event>", b"</event>", b"<event", b"<event/></event>", b"<event a='1' a='2'></event>",
                b"<\xff\xfe></event>", b"<event>\x00</event>", b"<event>" + b"\xc3" + b"</event>",
                b"<xi:include xmlns:xi='http://www.w3.org/2001/XInclude' href='/etc/passwd'/></event>")))
        return TakBytes(("<" * rng.choice((1, 1000)) + "/event>" + "</event>" * rng.choice((1, 3))).encode())

    def takmessage(self, h: ChatHint) -> bytes:
        """A ``TakMessage`` of the hostile user: fields at their bounds now and then."""
        rng = self.rng
        msg = TakMessage()
        e = msg.cotEvent
        kind = rng.choice(TYPES)
        e.type = kind
        e.uid = self.pick("ANDROID-" + h.user, ("", "x" * (MAX_UID + 1), "u\x01", "\ufffe"))
        e.how = "h-g-i-g-o"
        ms = int(h.now * 1000)
        for f in ("sendTime", "startTime", "staleTime"):
            setattr(e, f, ms if rng.random() < 0.7 else rng.choice((0, 1, 2**47 - 1, 2**47, 2**63 - 1, 2**64 - 1)))
        for f, good in (("lat", 51.5), ("lon", -0.1), ("hae", 100.0), ("ce", 9999999.0), ("le", 9999999.0)):
            setattr(e, f, good if rng.random() < 0.7 else rng.choice((math.nan, math.inf, -math.inf, 90.0, -90.5,
                                                                      180.0, 1e308, -0.0, 5e-324)))
        if rng.random() < 0.8:
            e.detail.contact.callsign = self.pick(h.user, ("", "x" * (MAX_NAME + 1), "alice", "\x00", "9x"), 0.85)
        if rng.random() < 0.3:
            e.detail.track.course = rng.choice((0.0, 359.9, 360.0, 720.0, -361.0, math.nan, math.inf))
            e.detail.track.speed = rng.choice((0.0, 10.0, 1e5, 1e6, -1.0, math.nan))
        if kind.startswith("b-t-f") or rng.random() < 0.2:
            e.detail.xmlDetail = self.detail(h, kind) if rng.random() < 0.8 else rng.choice((
                "</detail><detail>", "<!DOCTYPE x>", "&x;", "<x>" * 5000, "]]>", "<remarks>" + "x" * MAX_TEXT
                + "</remarks>", "\x00", "<a/>" * 5000))
        if rng.random() < 0.05:
            msg.takControl.minProtoVersion = rng.choice((0, 1, 2**32 - 1))
            msg.takControl.maxProtoVersion = rng.choice((0, 1, 2**32 - 1))
        data: bytes = msg.SerializeToString()
        r = rng.random()
        if r < 0.1:
            data = data[:rng.randrange(0, len(data) + 1)]           # truncated
        elif r < 0.15:
            data = bytes(rng.randrange(256) for _ in range(rng.choice((1, 10, 100, 1000))))
        elif r < 0.2 and data:
            i = rng.randrange(len(data))
            data = data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]
        return data

    def proto(self, h: ChatHint) -> TakBytes:
        body = self.takmessage(h)
        return TakBytes(b"\xbf" + encode_varint(len(body)) + body)

    def stream(self, h: ChatHint) -> TakBytes:
        """The framing itself: magic, length varints, both framings back to back, garbage between events."""
        rng = self.rng
        r = rng.random()
        body = self.takmessage(h)
        if r < 0.25:
            length = rng.choice((0, 1, len(body) - 1, len(body) + 1, MAX_EVENT_BYTES, MAX_EVENT_BYTES + 1, 2**31,
                                 2**63 - 1, 2**64 - 1))
            return TakBytes(b"\xbf" + encode_varint(length) + body)
        if r < 0.4:
            varint = rng.choice((b"", b"\x80", b"\xff" * 9 + b"\x01", b"\xff" * 10 + b"\x01", b"\xff" * 11,
                                 b"\x80" * 10 + b"\x00", b"\x80\x00", b"\xff\xff\xff\xff\x0f"))
            return TakBytes(b"\xbf" + varint + body)
        if r < 0.6:
            events = [self.proto(h).data if rng.random() < 0.5 else self.xml(h).data
                      for _ in range(rng.choice((2, 5, 30)))]
            sep = rng.choice((b"", b"\n", b" \t\r\n\0", b"\xbe", b"xyz", b"\xbf\xbf", b"<", b">"))
            return TakBytes(sep.join(events))
        if r < 0.75:
            junk = rng.choice((b"\xbe", b"\x00" * 1000, b"GET / HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x02\x00",
                               bytes(rng.randrange(256) for _ in range(rng.choice((1, 100, 10000)))), b" " * 70000))
            return TakBytes(junk + self.xml(h).data)
        if r < 0.85:
            big = self.event_xml(h, "b-t-f", detail="<remarks>" + "x" * rng.choice((MAX_EVENT_BYTES - 600,
                                                                                  MAX_EVENT_BYTES,
                                                                                  4 * MAX_EVENT_BYTES)) + "</remarks>")
            return TakBytes(big.encode() + self.xml(h).data)
        return TakBytes(rng.choice((b"\xbf", b"\xbf\x05", b"<event ", b"<?xml version='1.0'?>", b"\xbf\x00",
                                    b"\xbf\x00" * 100, b"</event>" * 100)))


KINDS: dict[str, Callable[[TakInputs, ChatHint], TakBytes]] = {
    "tak/xml": TakInputs.xml, "tak/dtd": TakInputs.dtd, "tak/proto": TakInputs.proto, "tak/stream": TakInputs.stream,
}
"""The TAK front end's hostile inputs, by kind."""
