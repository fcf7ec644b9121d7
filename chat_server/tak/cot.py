"""Cursor-on-Target events: decoded once into small frozen types, and encoded as CoT XML or TAK protobuf.

Theory of operation
-------------------
A TAK client (ATAK, WinTAK, iTAK, pytak) speaks in CoT *events*: an
``<event type uid how time start stale>`` with a ``<point lat lon hae ce
le>`` and a free-form ``<detail>``. The front end needs a handful of them:
position reports (PLI: ``a-...`` types, ``<contact callsign>``, ``<track
course speed>``), GeoChat (``b-t-f``: ``<__chat chatroom id senderCallsign
messageId>``, the text in ``<remarks>``), GeoChat receipts (``b-t-f-d``
delivered, ``b-t-f-r`` read), pings (``t-x-c-t``) and the TAK protocol
negotiation (``t-x-takp-*``: ``<TakControl>``). Everything else is decoded
too (type, uid, times, point) so that the session can name what it drops.

Untrusted bytes are decoded here, once: ``decode_xml`` (``defusedxml``: no
DTDs, no entity expansion, no external references) and ``decode_proto``
(TAK protocol v1's ``TakMessage``, via ``takproto``; its ``xmlDetail`` goes
through the same detail reader as XML) return a :class:`CotEvent` whose
fields are bounded (``MAX_*``: longer strings are refused, numbers must be
finite and in range), or raise :class:`CotError` naming the problem. The
caller (the stream's framing bounds an event to ``MAX_EVENT_BYTES``) logs it,
drops the event and keeps the connection.

``encode_xml`` and ``encode_proto`` write a :class:`CotEvent` back: XML as
ATAK writes it, or protobuf with the typed fields (contact, track) typed and
the rest of the detail (``__chat``, ``link``, ``remarks``, ``TakControl``)
in ``xmlDetail``, as TAK servers do. Sans-IO: bytes in, bytes out.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from xml.etree.ElementTree import Element, SubElement, tostring

from defusedxml import ElementTree as SafeET
from google.protobuf.message import DecodeError
from takproto.proto import TakMessage

from rcm.wire import encode_varint

MAX_EVENT_BYTES = 64 * 1024       # one event, XML or protobuf; larger ones are dropped (stream.py)
MAX_TYPE = 64                     # characters of a CoT type ("a-f-G-U-C")
MAX_UID = 256                     # of a uid (ATAK: "ANDROID-<hex>", GeoChat: "GeoChat.<uid>.<room>.<uuid>")
MAX_NAME = 128                    # of a callsign, a chatroom, a chat id, a message id, a how
MAX_TEXT = 32 * 1024              # characters of a GeoChat's remarks (the chat server's max_text_bytes applies after)
UNKNOWN = 9999999.0               # CoT's "not known" for hae, ce and le
_TIME_MAX = 40                    # characters of a time attribute


class CotError(ValueError):
    """An event that cannot be used: the message names why (it is logged, the event dropped)."""


@dataclass(frozen=True, slots=True)
class Point:
    lat: float
    lon: float
    hae: float = UNKNOWN
    ce: float = UNKNOWN
    le: float = UNKNOWN


@dataclass(frozen=True, slots=True)
class GeoChat:
    """``<__chat>`` of a ``b-t-f`` event (and ``<__chatreceipt>`` of a receipt): who said it, where, and its id."""

    chatroom: str              # the room's name as TAK shows it ("All Chat Rooms", a group's, a callsign)
    chat_id: str               # the room's id (the same as chatroom for named groups; a contact's uid for a DM)
    sender_callsign: str
    message_id: str            # the sender's id of the message (a UUID): receipts name it
    sender_uid: str = ""       # the sender's uid (``<link uid>``, ``chatgrp uid0``)


@dataclass(frozen=True, slots=True)
class CotEvent:
    """One CoT event, decoded and bounded (or built to be encoded)."""

    type: str
    uid: str
    time: float                        # Unix seconds
    start: float
    stale: float
    point: Point
    how: str = "h-g-i-g-o"
    callsign: str | None = None        # <contact callsign>
    endpoint: str | None = None        # <contact endpoint>
    course: float | None = None        # <track course> (degrees)
    speed: float | None = None         # <track speed> (m/s)
    chat: GeoChat | None = None        # <__chat> or <__chatreceipt>
    remarks: str | None = None         # <remarks> text (a GeoChat's message)
    remarks_time: float | None = None  # <remarks time>
    link_uid: str | None = None        # <link uid> (a GeoChat's sender, a receipt's)
    tak_request: int | None = None     # <TakControl><TakRequest version>: the client asks for protocol v<n>
    tak_support: int | None = None     # <TakControl><TakProtocolSupport version>: the server offers v<n>
    tak_response: bool | None = None   # <TakControl><TakResponse status>


# --- decoding ----------------------------------------------------------------------------------------------

def _text(value: Any, what: str, limit: int, required: bool = False) -> str | None:
    if value is None or value == "":
        if required:
            raise CotError(f"{what} is missing")
        return None
    s = str(value)
    if len(s) > limit:
        raise CotError(f"{what} is {len(s)} characters, the limit is {limit}")
    if any(ord(c) < 0x20 and c not in "\t\n\r" for c in s):
        raise CotError(f"{what} holds control characters")
    return s


def _number(value: Any, what: str, low: float = -math.inf, high: float = math.inf) -> float | None:
    if value is None or value == "":
        return None
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise CotError(f"{what} = {str(value)[:40]!r} is not a number") from None
    if not math.isfinite(x) or not low <= x <= high:
        raise CotError(f"{what} = {str(value)[:40]!r} is out of range")
    return x


def parse_time(value: Any, what: str) -> float:
    """A CoT time ("2024-05-01T12:00:00.000Z", W3C XML dateTime in UTC) as Unix seconds."""
    s = _text(value, what, _TIME_MAX, required=True)
    assert s is not None
    try:
        t = datetime.fromisoformat(s[:-1] + "+00:00" if s.endswith("Z") else s)
    except ValueError:
        raise CotError(f"{what} = {s!r} is not a time (like 2024-05-01T12:00:00.000Z)") from None
    if t.tzinfo is None:
        t = t.replace(tzinfo=UTC)
    return t.timestamp()


def format_time(t: float) -> str:
    """Unix seconds as a CoT time: ``2024-05-01T12:00:00.000Z``."""
    return datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _or_unknown(value: Any, what: str, low: float = -math.inf) -> float:
    x = _number(value, what, low)
    return UNKNOWN if x is None else x


def _point(lat: Any, lon: Any, hae: Any, ce: Any, le: Any) -> Point:
    la = _number(lat, "point lat", -90.0, 90.0)
    lo = _number(lon, "point lon", -180.0, 180.0)
    if la is None or lo is None:
        raise CotError("point lat and lon are required")
    return Point(la, lo, _or_unknown(hae, "point hae"), _or_unknown(ce, "point ce", 0.0),
                 _or_unknown(le, "point le", 0.0))


def _detail(detail: Element | None) -> dict[str, Any]:
    """The detail elements the front end reads, checked (keys are CotEvent fields)."""
    out: dict[str, Any] = {}
    if detail is None:
        return out
    contact = detail.find("contact")
    if contact is not None:
        out["callsign"] = _text(contact.get("callsign"), "contact callsign", MAX_NAME)
        out["endpoint"] = _text(contact.get("endpoint"), "contact endpoint", MAX_NAME)
    track = detail.find("track")
    if track is not None:
        out["course"] = _number(track.get("course"), "track course", -360.0, 360.0)
        out["speed"] = _number(track.get("speed"), "track speed", 0.0, 1e5)
    chat = detail.find("__chat")
    if chat is None:
        chat = detail.find("__chatreceipt")
    link = detail.find("link")
    if link is not None:
        out["link_uid"] = _text(link.get("uid"), "link uid", MAX_UID)
    if chat is not None:
        grp = chat.find("chatgrp")
        sender_uid = (grp.get("uid0") if grp is not None else None) or out.get("link_uid")
        out["chat"] = GeoChat(
            chatroom=_text(chat.get("chatroom"), "__chat chatroom", MAX_NAME) or "",
            chat_id=_text(chat.get("id"), "__chat id", MAX_UID) or "",
            sender_callsign=_text(chat.get("senderCallsign"), "__chat senderCallsign", MAX_NAME) or "",
            message_id=_text(chat.get("messageId"), "__chat messageId", MAX_NAME) or "",
            sender_uid=_text(sender_uid, "chatgrp uid0", MAX_UID) or "")
    remarks = detail.find("remarks")
    if remarks is not None:
        out["remarks"] = _text("".join(remarks.itertext()), "remarks", MAX_TEXT)
        if remarks.get("time"):
            out["remarks_time"] = parse_time(remarks.get("time"), "remarks time")
    control = detail.find("TakControl")
    if control is not None:
        for tag, key in (("TakRequest", "tak_request"), ("TakProtocolSupport", "tak_support")):
            el = control.find(tag)
            if el is not None:
                v = _number(el.get("version"), f"{tag} version", 0, 1 << 16)
                out[key] = int(v) if v is not None else None
        el = control.find("TakResponse")
        if el is not None:
            out["tak_response"] = str(el.get("status", "")).lower() == "true"
    return {k: v for k, v in out.items() if v is not None}


def decode_xml(data: bytes) -> CotEvent:
    """One ``<event>`` (an XML declaration before it allowed); CotError if it is not a usable event."""
    if len(data) > MAX_EVENT_BYTES:
        raise CotError(f"event is {len(data)} bytes, the limit is {MAX_EVENT_BYTES}")
    try:
        root = SafeET.fromstring(data)
    except SafeET.ParseError as e:
        raise CotError(f"not well-formed XML: {e}") from None
    except Exception as e:             # defusedxml's refusals (DTDs, entities, external references)
        raise CotError(f"refused XML: {type(e).__name__}: {e}") from None
    if root.tag != "event":
        raise CotError(f"the root element is <{str(root.tag)[:40]}>, not <event>")
    pt = root.find("point")
    if pt is None:
        raise CotError("the event has no <point>")
    return CotEvent(
        type=_text(root.get("type"), "event type", MAX_TYPE, required=True) or "",
        uid=_text(root.get("uid"), "event uid", MAX_UID, required=True) or "",
        how=_text(root.get("how"), "event how", MAX_NAME) or "",
        time=parse_time(root.get("time"), "event time"),
        start=parse_time(root.get("start") or root.get("time"), "event start"),
        stale=parse_time(root.get("stale"), "event stale"),
        point=_point(pt.get("lat"), pt.get("lon"), pt.get("hae"), pt.get("ce"), pt.get("le")),
        **_detail(root.find("detail")))


def decode_proto(payload: bytes) -> CotEvent:
    """One TAK protocol v1 ``TakMessage`` (the bytes after the stream header); CotError if not usable."""
    if len(payload) > MAX_EVENT_BYTES:
        raise CotError(f"event is {len(payload)} bytes, the limit is {MAX_EVENT_BYTES}")
    msg = TakMessage()
    try:
        msg.ParseFromString(payload)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise CotError(f"not a TakMessage: {e}") from None
    if not msg.HasField("cotEvent"):
        raise CotError("the TakMessage holds no cotEvent")
    ev = msg.cotEvent
    detail: Element | None = None
    d = ev.detail
    if d.xmlDetail:
        try:
            detail = SafeET.fromstring(f"<detail>{d.xmlDetail}</detail>".encode())
        except Exception as e:
            raise CotError(f"xmlDetail is not well-formed XML: {type(e).__name__}: {e}") from None
    fields = _detail(detail)
    if d.HasField("contact"):
        fields["callsign"] = _text(d.contact.callsign, "contact callsign", MAX_NAME) or fields.get("callsign")
        fields["endpoint"] = _text(d.contact.endpoint, "contact endpoint", MAX_NAME) or fields.get("endpoint")
    if d.HasField("track"):
        fields["course"] = _number(d.track.course, "track course", -360.0, 360.0)
        fields["speed"] = _number(d.track.speed, "track speed", 0.0, 1e5)
    for key in ("time", "start", "stale"):
        ms = getattr(ev, "sendTime" if key == "time" else f"{key}Time")
        if not 0 <= ms < 1 << 47:
            raise CotError(f"event {key} = {ms} ms is out of range")
    return CotEvent(
        type=_text(ev.type, "event type", MAX_TYPE, required=True) or "",
        uid=_text(ev.uid, "event uid", MAX_UID, required=True) or "",
        how=_text(ev.how, "event how", MAX_NAME) or "",
        time=ev.sendTime / 1000.0, start=(ev.startTime or ev.sendTime) / 1000.0, stale=ev.staleTime / 1000.0,
        point=_point(ev.lat, ev.lon, ev.hae, ev.ce, ev.le),
        **{k: v for k, v in fields.items() if v is not None})


# --- encoding ----------------------------------------------------------------------------------------------

def _num(x: float) -> str:
    return repr(float(x))


# Characters XML 1.0 cannot carry, even as references: C0 controls but tab, LF and CR; surrogates; U+FFFE, U+FFFF.
# A chat text may hold them (a user's bell, ESC, a peer's text); written raw, the event is not well-formed and
# every XML TAK client in the room loses it (the probe's tak kinds, alice's client).
_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _xml_chars(text: str) -> str:
    """XML written by ``tostring`` with every character XML cannot carry shown as a symbol: a C0 control as its
    Unicode control picture (``\x07`` as U+2407), the others as U+FFFD."""
    return _NOT_XML.sub(lambda m: chr(0x2400 + ord(m.group())) if m.group() < " " else "\ufffd", text)


def _extra_detail(ev: CotEvent) -> list[Element]:
    """The detail elements protobuf has no typed field for (GeoChat, link, remarks, TakControl)."""
    out: list[Element] = []
    if ev.chat is not None:
        c = ev.chat
        tag = "__chatreceipt" if ev.type in ("b-t-f-d", "b-t-f-r") else "__chat"
        chat = Element(tag, {"parent": "RootContactGroup", "groupOwner": "false", "messageId": c.message_id,
                             "chatroom": c.chatroom, "id": c.chat_id, "senderCallsign": c.sender_callsign})
        SubElement(chat, "chatgrp", {"uid0": c.sender_uid, "uid1": c.chat_id, "id": c.chat_id})
        out.append(chat)
    if ev.link_uid is not None:
        out.append(Element("link", {"uid": ev.link_uid, "type": "a-f-G-U-C", "relation": "p-p"}))
    if ev.remarks is not None:
        attrs = {}
        if ev.chat is not None:
            attrs = {"source": f"BAO.F.ATAK.{ev.chat.sender_uid}", "to": ev.chat.chat_id}
        if ev.remarks_time is not None:
            attrs["time"] = format_time(ev.remarks_time)
        r = Element("remarks", attrs)
        r.text = ev.remarks
        out.append(r)
    if ev.tak_support is not None or ev.tak_response is not None or ev.tak_request is not None:
        control = Element("TakControl")
        if ev.tak_support is not None:
            SubElement(control, "TakProtocolSupport", {"version": str(ev.tak_support)})
        if ev.tak_request is not None:
            SubElement(control, "TakRequest", {"version": str(ev.tak_request)})
        if ev.tak_response is not None:
            SubElement(control, "TakResponse", {"status": "true" if ev.tak_response else "false"})
        out.append(control)
    return out


def _element(ev: CotEvent) -> Element:
    root = Element("event", {"version": "2.0", "uid": ev.uid, "type": ev.type, "how": ev.how,
                             "time": format_time(ev.time), "start": format_time(ev.start),
                             "stale": format_time(ev.stale)})
    p = ev.point
    SubElement(root, "point", {"lat": _num(p.lat), "lon": _num(p.lon), "hae": _num(p.hae), "ce": _num(p.ce),
                               "le": _num(p.le)})
    detail = SubElement(root, "detail")
    if ev.callsign is not None or ev.endpoint is not None:
        SubElement(detail, "contact", {k: v for k, v in (("callsign", ev.callsign), ("endpoint", ev.endpoint))
                                       if v is not None})
    if ev.course is not None or ev.speed is not None:
        SubElement(detail, "track", {"course": _num(ev.course or 0.0), "speed": _num(ev.speed or 0.0)})
    detail.extend(_extra_detail(ev))
    return root


def encode_xml(ev: CotEvent) -> bytes:
    """The event as CoT XML (UTF-8, with the XML declaration TAK clients send)."""
    body = _xml_chars(tostring(_element(ev), encoding="unicode"))
    return b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>' + body.encode("utf-8")


def to_tak_message(ev: CotEvent) -> Any:
    """The event as a ``TakMessage`` (typed fields typed, the rest of the detail in ``xmlDetail``)."""
    msg = TakMessage()
    e = msg.cotEvent
    e.type, e.uid, e.how = ev.type, ev.uid, ev.how
    e.sendTime, e.startTime, e.staleTime = (round(t * 1000) for t in (ev.time, ev.start, ev.stale))
    e.lat, e.lon, e.hae, e.ce, e.le = ev.point.lat, ev.point.lon, ev.point.hae, ev.point.ce, ev.point.le
    if ev.callsign is not None:
        e.detail.contact.callsign = ev.callsign
    if ev.endpoint is not None:
        e.detail.contact.endpoint = ev.endpoint
    if ev.course is not None or ev.speed is not None:
        e.detail.track.course = ev.course or 0.0
        e.detail.track.speed = ev.speed or 0.0
    extra = _extra_detail(ev)
    if extra:
        e.detail.xmlDetail = "".join(_xml_chars(tostring(x, encoding="unicode")) for x in extra)
    return msg


def encode_proto(ev: CotEvent) -> bytes:
    """The event framed for TAK protocol v1 streaming: ``0xbf``, the varint length, the ``TakMessage``."""
    body: bytes = to_tak_message(ev).SerializeToString()
    return b"\xbf" + encode_varint(len(body)) + body
