"""The mission file's writer and reader agree: what ``contracts.mission_writer`` writes reads back the same.

The fixtures set every key the reader knows to a value other than its default (two missions: some
keys exclude each other, such as ``tls`` and ``insecure_plaintext``), and a test checks they still
do, so a key added to the reader and not to these fixtures is named here.
"""
from __future__ import annotations

import tomllib
from dataclasses import MISSING, fields, replace
from pathlib import Path
from typing import Any

import pytest

from contracts.mission import Mission, MissionError, RcmSettings, SiteConfig, load_mission, parse_mission
from contracts.mission_writer import mission_text, toml_value, write_mission_file

SECURE: dict[str, Any] = {
    "mission": {"name": "round-trip.1", "data_dir": "var/rt"},
    "rcm": {"heartbeat_timeout": 1.5, "liveness_timeout": 7.25, "silence_timeout": 15.0, "suspect_timeout": 90.0,
            "reconnect_period": 4.5, "ordering": "sequencer", "tls": True, "max_hops": 5,
            "max_frame_bytes": 2 << 20, "max_payload_bytes": 512 * 1024, "max_buffered_messages": 200_000,
            "max_buffered_bytes": 128 << 20, "ack_interval": 0.3, "handshake_timeout": 7.5, "durable": False,
            "wal_max_bytes": 128 << 20, "max_handshaking": 8, "client_queue_bytes": 32 << 20,
            "replay_log_bytes": 256 << 20, "lanes": False, "retention": 129600.5, "retention_bytes": 512 << 20,
            "repair": False, "repair_period": 45.0, "repair_rate": 32768, "compression": "none", "tls_continue": False,
            "announce_delay": 2.5},
    "chat": {"max_text_bytes": 2000, "health_details_from": "10.1.2.3", "history_limit": 77, "allow_x": True},
    "labels": {"levels": ["UNCLASSIFIED", "RESTRICTED", "SECRET"], "caveats": ["GBR", "USA"],
               "default": "RESTRICTED//REL TO GBR"},
    "sites": {
        "A": {"rcm": "10.0.0.1:7101", "chat": "10.0.0.1:8101", "irc": "10.0.0.1:6601", "tak": "10.0.0.1:8087",
              "dial": {"B": "10.0.0.9:9102", "c.2": "[::1]:9103"}, "rate": {"B": 56000, "c.2": 9600}},
        "B": {"rcm": "host-b.example:7102", "chat": "[fd00::2]:8102",
              "clearance": {"level": "SECRET", "caveats": ["GBR", "USA"]}},
        "c.2": {"rcm": "10.0.0.3:7103", "chat": "10.0.0.3:8103", "rate": {"A": 1200}},
    },
}
LAB: dict[str, Any] = {
    "mission": {"name": "lab", "data_dir": "/srv/lab \"quoted\"\tdir"},
    "rcm": {"ordering": "hybrid", "p2p": "tcp-suspect", "routing": "direct", "insecure_plaintext": True},
    "sites": {"X": {"rcm": "192.0.2.1:7101", "chat": "192.0.2.1:8101"},
              "Y": {"rcm": "192.0.2.2:7101", "chat": "192.0.2.2:8101"}},
}


def mission(raw: dict[str, Any], base: Path) -> Mission:
    return parse_mission(raw, base)


def differs_from_default(obj: object, name: str) -> bool:
    f = next(f for f in fields(obj) if f.name == name)  # type: ignore[arg-type]
    if f.default is not MISSING:
        return getattr(obj, name) != f.default
    if f.default_factory is not MISSING:
        return getattr(obj, name) != f.default_factory()
    return True          # required: always written


def test_the_fixtures_set_every_key_the_reader_knows(tmp_path: Path) -> None:
    ms = [mission(SECURE, tmp_path), mission(LAB, tmp_path)]
    for cls, objs in ((RcmSettings, [m.rcm for m in ms]),
                      (SiteConfig, [s for m in ms for s in m.sites.values()]),
                      (Mission, ms)):
        unset = [f.name for f in fields(cls) if not any(differs_from_default(o, f.name) for o in objs)]
        assert unset == [], f"{cls.__name__}: give these a non-default value in a fixture: {unset}"


@pytest.mark.parametrize("raw", [SECURE, LAB], ids=["secure", "lab"])
def test_a_written_mission_reads_back_the_same(tmp_path: Path, raw: dict[str, Any]) -> None:
    m = mission(raw, tmp_path)
    path = write_mission_file(tmp_path / "m.toml", m)
    back = load_mission(path)
    assert back == replace(m, path=path.resolve())
    # and again: writing what was read changes nothing
    assert write_mission_file(tmp_path / "m2.toml", back).read_text() == path.read_text()


def test_only_keys_that_differ_from_their_defaults_are_written(tmp_path: Path) -> None:
    raw = {"mission": {"name": "m"}, "rcm": {"heartbeat_timeout": 1.0, "liveness_timeout": 4.0},
           "sites": {"A": {"rcm": "127.0.0.1:7101", "chat": "127.0.0.1:8101", "dial": {}}}}
    written = tomllib.loads((write_mission_file(tmp_path / "m.toml", mission(raw, tmp_path))).read_text())
    assert written["rcm"] == {"liveness_timeout": 4.0}
    assert written["sites"] == {"A": {"rcm": "127.0.0.1:7101", "chat": "127.0.0.1:8101"}}
    assert "chat" not in written


def test_raw_tables_are_written_as_given_so_the_reader_can_refuse_them(tmp_path: Path) -> None:
    raw = {"mission": {"name": "bad"}, "rcm": {"liveness_timeout": 0.5},
           "sites": {"A": {"rcm": "127.0.0.1:7101", "chat": "127.0.0.1:8101"}}}
    path = write_mission_file(tmp_path / "m.toml", raw, header=["made to be refused"])
    assert path.read_text().startswith("# made to be refused\n")
    with pytest.raises(MissionError, match="liveness_timeout = 0.5 must be greater than heartbeat_timeout"):
        load_mission(path)


def test_strings_keys_and_lists_are_valid_toml() -> None:
    text = mission_text({"t": {"plain": "a\"b\\c\nd\x7f", "a.b": [1, 2.5, "x"], "ok": False}})
    assert tomllib.loads(text) == {"t": {"plain": "a\"b\\c\nd\x7f", "a.b": [1, 2.5, "x"], "ok": False}}
    with pytest.raises(TypeError):
        toml_value(object())
