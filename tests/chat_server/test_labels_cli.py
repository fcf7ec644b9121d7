"""``adduser --clearance`` and ``clearance`` (labeled missions), run in-process: one clear line and exit 2 on a
bad label or one above the site's clearance; list, show and set."""
from __future__ import annotations

import io

import pytest
from labeled_mission import labeled_mission

from chat_server.__main__ import main
from chat_server.accounts import Clearances
from chat_server.store import ChatStore
from contracts.mission import load_mission
from contracts.mission_writer import write_mission_file

pytestmark = pytest.mark.timeout(30)


def cli(monkeypatch, capsys, *args: str, stdin: str = "pw\n") -> tuple[int, str, str]:
    monkeypatch.setattr("sys.stdin", io.StringIO(stdin))
    try:
        code = main(list(args))
    except SystemExit as e:
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture
def path(tmp_path):
    return str(write_mission_file(tmp_path / "coalition.toml", labeled_mission(tmp_path)))


def test_adduser_gives_a_clearance_at_most_the_sites(monkeypatch, capsys, path):
    m = ("--mission", path)
    code, out, _ = cli(monkeypatch, capsys, "adduser", *m, "--site", "A", "--clearance", "SECRET//REL TO USA",
                       "alice")
    assert code == 0 and "cleared for SECRET//REL TO USA" in out
    code, _, err = cli(monkeypatch, capsys, "adduser", *m, "--site", "C", "--clearance", "SECRET", "carol")
    assert code == 2 and err.strip().count("\n") == 0
    assert "above site C's clearance CONFIDENTIAL//REL TO GBR" in err
    code, _, err = cli(monkeypatch, capsys, "adduser", *m, "--site", "A", "--clearance", "COSMIC", "bob")
    assert code == 2 and "unknown level 'COSMIC'" in err and err.strip().count("\n") == 0
    assert cli(monkeypatch, capsys, "adduser", *m, "--site", "A", "ann")[0] == 0      # the default label
    mission = load_mission(path)
    store = ChatStore(mission.site_dir("A") / "chat" / "chat.db")
    try:
        table = Clearances(store.db, mission.labels, mission.clearance("A"))
        assert str(table.of("alice")) == "SECRET//REL TO USA" and str(table.of("ann")) == "UNCLASSIFIED"
        assert store.password_hash("bob") is None and store.password_hash("carol") is None   # nothing made
    finally:
        store.close()


def test_the_clearance_command_lists_shows_and_sets(monkeypatch, capsys, path):
    m = ("--mission", path, "--site", "A")
    for user in ("alice", "ann"):
        assert cli(monkeypatch, capsys, "adduser", *m, user)[0] == 0
    code, out, _ = cli(monkeypatch, capsys, "clearance", *m, "alice", "CONFIDENTIAL//REL TO GBR")
    assert code == 0 and out == "alice: CONFIDENTIAL//REL TO GBR\n"
    assert cli(monkeypatch, capsys, "clearance", *m, "ann")[1] == "ann: UNCLASSIFIED\n"
    assert cli(monkeypatch, capsys, "clearance", *m)[1] == "alice: CONFIDENTIAL//REL TO GBR\nann: UNCLASSIFIED\n"
    code, _, err = cli(monkeypatch, capsys, "clearance", *m, "nobody", "SECRET")
    assert code == 1 and "no user 'nobody'" in err
    code, _, err = cli(monkeypatch, capsys, "clearance", "--mission", path, "--site", "P", "ann", "SECRET")
    assert code == 2 and "above site P's clearance UNCLASSIFIED" in err


def test_clearances_need_a_labeled_mission(monkeypatch, capsys, tmp_path):
    from chat_missions import make_mission
    path = str(write_mission_file(tmp_path / "plain.toml", make_mission(tmp_path, ["A"])))
    code, _, err = cli(monkeypatch, capsys, "adduser", "--mission", path, "--site", "A", "--clearance", "SECRET",
                       "alice")
    assert code == 2 and "no [labels] table" in err
