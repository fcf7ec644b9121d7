"""Names: user, room and site names are anchored ASCII, so a lookalike or invisible character is refused at
the login and in every payload from another site, and no accepted name can leave its directory."""
from __future__ import annotations

import aiohttp
import msgpack
import pytest

from chat_server.payload import PayloadError, decode_payload

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("name", ["аlice", "ali\u200bce", "alice\u202e", "ali ce", "\u0430lice", "alice\n"])
async def test_lookalike_and_invisible_characters_are_refused_in_user_names(cluster_factory, name):
    """Spoofing ``alice`` with Cyrillic ``а`` or a zero-width space: names are ASCII-only, at the login
    and in every payload from another site."""
    cl = await cluster_factory(["A", "B"], users={"A": ["alice"]})
    async with aiohttp.ClientSession() as http, http.ws_connect(cl.url("A")) as ws:
        await ws.send_json({"type": "hello", "user": name, "password": "x"})
        reply = await ws.receive_json(timeout=5)
        assert reply["type"] == "error" and reply["code"] == "bad_field", reply
    with pytest.raises(PayloadError):
        decode_payload(msgpack.packb({"k": "m", "r": "ops", "u": name, "t": "x", "s": 1.0, "c": ""}))
    with pytest.raises(PayloadError):
        decode_payload(msgpack.packb({"k": "m", "r": "ops\u200b", "u": "bob", "t": "x", "s": 1.0, "c": ""}))


def test_no_accepted_site_or_room_name_can_leave_its_directory(tmp_path):
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from chat_server.protocol import ROOM_NAME, USER_NAME
    from contracts.mission import SITE_NAME, MissionError, parse_mission

    def safe_component(name: str) -> bool:
        return "/" not in name and "\\" not in name and "\0" not in name and name not in (".", "..") \
            and not name.startswith(".")

    @settings(max_examples=300, deadline=None)
    @given(st.from_regex(SITE_NAME, fullmatch=True) | st.from_regex(ROOM_NAME, fullmatch=True)
           | st.from_regex(USER_NAME, fullmatch=True))
    def accepted_names_are_one_plain_component(name: str) -> None:
        assert safe_component(name), name

    accepted_names_are_one_plain_component()
    for bad in ["..", "../x", "a/b", "A\n", ".hidden", "A\0", "/abs", "a\\b"]:
        assert not SITE_NAME.match(bad) and not ROOM_NAME.match(bad), bad
        raw = {"mission": {"name": "t", "data_dir": "var"},
               "sites": {bad: {"rcm": "127.0.0.1:20001", "chat": "127.0.0.1:21001"},
                         "B": {"rcm": "127.0.0.1:20002", "chat": "127.0.0.1:21002"}}}
        with pytest.raises(MissionError):
            parse_mission(raw, tmp_path)
    for bad in ["../etc", "a/b", "..", ".x"]:
        with pytest.raises(PayloadError):
            decode_payload(msgpack.packb({"k": "m", "r": bad, "u": "bob", "t": "x", "s": 1.0, "c": ""}))
