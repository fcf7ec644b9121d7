"""Coverage-guided fuzzing (atheris) of the chat protocol parser and the chat payload decoder.

Each input drives two targets:

* ``chat_server.protocol.parse_client_frame`` — what a WebSocket client sends.
  The first byte chooses the shape: raw text (any Unicode, as aiohttp hands a
  text frame over), or a JSON object assembled from the fuzzer's bytes with a
  known frame type and fields of random types (reaches the field checks far
  more often than raw bytes would). The parser must return a ``Request`` whose
  fields respect the protocol's rules, or raise ``FrameError`` with a known
  error code; the error frame the server would send must encode. Anything
  else (another exception, an accepted frame that breaks a rule) is a crash.
* ``chat_server.payload.decode_payload`` — what another site's chat server
  sends through RCM: a payload, or ``PayloadError``, nothing else.

    .venv/bin/python bench/fuzz_chat.py -runs=1000000 [-max_len=4096]     # atheris (the fuzz extra)
    .venv/bin/python bench/fuzz_chat.py --quick                           # 5,000 seeded random inputs, no atheris
"""
from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, cast

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._fuzzing import atheris, main  # noqa: E402

if atheris is not None:
    with atheris.instrument_imports():
        from chat_server import payload as PL
        from chat_server import protocol as P
else:
    from chat_server import payload as PL
    from chat_server import protocol as P

from contracts.mission import SITE_NAME  # noqa: E402

MAX_TEXT = 1024
MAX_MEMBERS = 8
CODES = {v for k, v in vars(P.ErrorCode).items() if not k.startswith("_")}
FIELD_NAMES = ["type", "id", "user", "password", "session", "last_n", "room", "text", "client_id",
               "before", "after_n", "limit", "members", "label", "precedence", "expires_in", "extra"]


def _value(fdp: Any, depth: int = 0) -> object:
    kind = fdp.ConsumeIntInRange(0, 8)
    if kind == 0:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 80))
    if kind == 1:
        return fdp.ConsumeInt(fdp.ConsumeIntInRange(1, 9))
    if kind == 2:
        return fdp.ConsumeBool()
    if kind == 3:
        return None
    if kind == 4:
        return fdp.ConsumeRegularFloat()
    if kind == 5 and depth < 3:
        return [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 12))]
    if kind == 6 and depth < 3:
        return {fdp.ConsumeUnicode(6): _value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 4))}
    if kind == 7:
        return "a" * fdp.ConsumeIntInRange(0, 2 * MAX_TEXT) + fdp.ConsumeUnicode(4)
    return fdp.PickValueInList(["ops", "alice", "#x", "", " ", "\ud800", "A:1", "9" * 70])


def _frame_text(fdp: Any) -> str:
    shape = fdp.ConsumeIntInRange(0, 3)
    if shape == 0:
        return cast(str, fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 4096)))
    obj: dict[str, object] = {}
    if shape != 3:
        obj["type"] = fdp.PickValueInList(list(P.CLIENT_TYPES) + ["welcome", "", "SAY"])
    for _ in range(fdp.ConsumeIntInRange(0, 8)):
        obj[fdp.PickValueInList(FIELD_NAMES)] = _value(fdp)
    try:
        return json.dumps(obj, ensure_ascii=fdp.ConsumeBool(), allow_nan=True)
    except (UnicodeEncodeError, ValueError):
        return json.dumps(obj, ensure_ascii=True)


def _check_request(req: P.Request) -> None:
    f = req.fields
    assert req.type in P.CLIENT_TYPES, req
    if "room" in f:
        assert P.ROOM_NAME.match(f["room"]), req
    if req.type == "say":
        assert f["text"].strip() and len(f["text"].encode("utf-8")) <= MAX_TEXT, req
        assert 0 < len(f["client_id"]) <= P.MAX_CLIENT_ID, req
    elif req.type == "hello":
        assert P.USER_NAME.match(f["user"]) and (("password" in f) != ("session" in f)), req
    elif req.type == "create":      # members: absent (a labeled public room) or user names, name@SITE too
        members = f.get("members", [])
        assert len(members) <= MAX_MEMBERS, req
        for m in members:
            name, at, site = m.partition("@")
            assert P.USER_NAME.match(name) and (not at or SITE_NAME.match(site)), req
    for k, v in f.items():
        # a label is {level, caveats} or its text (checked against the mission's labels by the core)
        assert not isinstance(v, bool) and (k == "expires_in" or not isinstance(v, float)), req
        assert k == "label" or not isinstance(v, dict), req


COUNTS = {"frames": 0, "accepted": 0, "payloads": 0, "payloads_accepted": 0}


def target(fdp: Any) -> None:
    text = _frame_text(fdp)
    COUNTS["frames"] += 1
    try:
        req = P.parse_client_frame(text, MAX_TEXT, MAX_MEMBERS)
    except P.FrameError as e:
        assert e.code in CODES, e.code
        P.encode(P.error(e.code, e.message, e.in_reply_to))
    else:
        _check_request(req)
        P.encode(P.with_id({"type": "ack"}, req.id))
        COUNTS["accepted"] += 1
    blob = fdp.ConsumeBytes(fdp.remaining_bytes())
    COUNTS["payloads"] += 1
    try:
        PL.decode_payload(blob)
        COUNTS["payloads_accepted"] += 1
    except PL.PayloadError:
        pass


def tally() -> str:
    c = COUNTS
    return (f"frames accepted {c['accepted']}/{c['frames']}, the rest refused with a known error code; "
            f"payloads decoded {c['payloads_accepted']}/{c['payloads']}")


if __name__ == "__main__":
    sys.exit(main("fuzz_chat", target, __doc__.splitlines()[0], tally))
