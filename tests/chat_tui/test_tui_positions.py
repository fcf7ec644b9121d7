"""Units' positions in the terminal clients: the book (sans-IO), ``/pos`` and ``/positions``, the Textual list.

Frames are fed directly (contract 2, second round: ``position`` and
``positions {units}``), so these tests need no server and no clock: every
time is passed in. One test runs the app against the session's real mission
(conftest.py): a unit reported at B shows at A, and so does one's own ``/pos``.
"""
from __future__ import annotations

import io
import os
import time
from typing import Any

import pytest
from testkit import wait_until
from textual.widgets import DataTable, Input, Label
from tui_servers import PASSWORD, TuiSites

from chat_server.client import ChatClient
from chat_tui.app import ChatApp
from chat_tui.commands import CommandError, parse_line
from chat_tui.controller import Controller
from chat_tui.link import Backoff
from chat_tui.plain import PlainClient, position_lines
from chat_tui.positions import (
    BadPosition,
    Position,
    PositionBook,
    PositionReport,
    age_text,
    decode_position,
    positions_request,
)
from chat_tui.state import ChatState, Panel, PositionsListed, Request

T0 = 1_767_268_800.0


def report(unit: str = "viper2", site: str = "B", at: float = T0, ttl: float = 300.0, **kw: Any) -> dict[str, Any]:
    f: dict[str, Any] = {"type": "position", "site": site, "unit": unit, "lat": 51.5007, "lon": -0.1246, "at": at,
                         "expires_at": at + ttl}
    f.update(kw)
    return f


def welcomed(user: str = "alice") -> ChatState:
    st = ChatState(user)
    st.apply({"type": "welcome", "site": "A", "user": user, "sites": {"A": "connected", "B": "connected"},
              "rooms": [], "presence": {}}, T0)
    return st


class Recorder:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def request(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)

    def say(self, room: str, text: str, *, precedence: str = "routine", reply_to: str | None = None) -> str:
        raise AssertionError("nothing is said here")


# --- the book -----------------------------------------------------------------------------------------

def test_a_report_arrives_and_only_a_newer_one_of_the_same_unit_replaces_it() -> None:
    st = welcomed()
    assert st.apply(report(at=T0), T0 + 1) == [Panel("positions")]
    assert st.apply(report(at=T0 + 10, lat=52.0), T0 + 11) == [Panel("positions")]
    assert st.apply(report(at=T0 + 5, lat=53.0), T0 + 12) == []          # older: overtaken on the way
    assert st.apply(report(at=T0 + 10, lat=54.0), T0 + 12) == []         # the same time: no change
    [row] = st.positions.rows(T0 + 12)
    assert (row.unit, row.site, row.lat, row.position.at) == ("viper2", "B", "52.00000", T0 + 10)
    st.apply(report(site="C", at=T0), T0 + 12)                           # the same callsign at another site
    assert [(r.unit, r.site) for r in st.positions.rows(T0 + 12)] == [("viper2", "B"), ("viper2", "C")]


def test_reports_expire_at_their_time_and_an_expired_one_is_never_kept() -> None:
    st = welcomed()
    st.apply(report("a", at=T0, ttl=60), T0)
    st.apply(report("b", at=T0, ttl=120), T0)
    assert st.apply(report("c", at=T0 - 100, ttl=50), T0) == []          # gone before it came
    assert [r.unit for r in st.positions.rows(T0 + 60)] == ["b"]         # rows leave out the expired at once
    assert len(st.positions.units) == 2
    assert st.expire_positions(T0 + 59) == []
    assert st.expire_positions(T0 + 60) == [Panel("positions")]
    assert list(st.positions.units) == [("B", "b")]
    assert st.expire_positions(T0 + 200) == [Panel("positions")] and not st.positions.units


def test_a_listing_merges_unit_by_unit_keeps_the_good_and_counts_the_bad() -> None:
    st = welcomed()
    st.apply(report("alpha", at=T0 + 30, lat=10.0), T0 + 30)             # a live event that overtook the listing
    listing = {"type": "positions", "purpose": {"kind": "positions"}, "units": [
        report("alpha", at=T0 + 20, lat=20.0), report("Bravo", site="C", at=T0 + 25, user="bob"),
        report("charlie", lat=91.0), {"unit": "no site"}, "junk"]}
    assert st.apply(listing, T0 + 30) == [Panel("positions")]
    rows = st.positions.rows(T0 + 42)
    assert [(r.unit, r.site, r.user, r.lat) for r in rows] == [("alpha", "B", "", "10.00000"),
                                                               ("Bravo", "C", "bob", "51.50070")]
    assert [r.age for r in rows] == ["12 s", "17 s"]
    assert st.positions.refused == 3
    assert st.apply({"type": "position", "site": "B"}, T0) == [Panel("positions")] and st.positions.refused == 4


def test_decoding_bounds_every_field() -> None:
    p = decode_position(report(alt=120.5, course=90, speed=3.5, user="bob", id="r7"))
    assert p == Position("B", "viper2", "bob", 51.5007, -0.1246, T0, T0 + 300, 120.5, 90.0, 3.5)
    for bad in ({"lat": -90.5}, {"lon": 180.01}, {"lat": "51"}, {"at": float("nan")}, {"expires_at": None},
                {"unit": ""}, {"site": 7}, {"unit": "x" * 129}, {"alt": True}, {"user": ["bob"]}):
        with pytest.raises(BadPosition):
            decode_position(report(**bad))
    assert decode_position(report(lat=-90, lon=180)).lat == -90.0


def test_the_book_holds_a_bounded_number_of_units_dropping_the_oldest_report() -> None:
    book = PositionBook(max_units=3)
    for i, at in enumerate([T0 + 5, T0 + 1, T0 + 9, T0 + 7]):
        book.arrive(decode_position(report(f"u{i}", at=at)), T0)
    assert sorted(u for _, u in book.units) == ["u0", "u2", "u3"]


def test_ages_read_as_seconds_then_minutes_and_never_negative() -> None:
    assert [age_text(s) for s in (0, 0.4, 12.4, 119, 180, 5400)] == ["0 s", "0 s", "12 s", "119 s", "3 min",
                                                                      "90 min"]
    st = welcomed()
    st.apply(report(at=T0 + 5), T0)                                      # the unit's clock runs ahead of ours
    assert st.positions.rows(T0)[0].age == "0 s"


def test_the_rows_sort_by_unit_whatever_the_case_and_escape_names() -> None:
    st = welcomed()
    for unit in ("delta", "Alpha", "charlie", "bravo\x1b[2J"):
        st.apply(report(unit), T0)
    assert [r.unit for r in st.positions.rows(T0)] == ["Alpha", "bravo\\x1b[2J", "charlie", "delta"]


# --- /pos and /positions ---------------------------------------------------------------------------------

def test_pos_parses_degrees_and_an_optional_callsign() -> None:
    assert parse_line("/pos 51.5007 -0.1246").report == PositionReport(51.5007, -0.1246)
    assert parse_line("/pos -90 180 Viper 2").report == PositionReport(-90.0, 180.0, "Viper 2")
    assert parse_line("/POS 0 0   bravo-1 ").report == PositionReport(0.0, 0.0, "bravo-1")
    assert parse_line("/positions").name == "positions"


@pytest.mark.parametrize("line, error", [
    ("/pos", "/pos takes LAT LON [UNIT] in decimal degrees"),
    ("/pos 51.5", "/pos takes LAT LON [UNIT] in decimal degrees"),
    ("/pos 90.5 0", "bad latitude '90.5': a number of degrees from -90 to 90"),
    ("/pos -91 0", "bad latitude '-91': a number of degrees from -90 to 90"),
    ("/pos north 0", "bad latitude 'north': a number of degrees from -90 to 90"),
    ("/pos 0 180.5", "bad longitude '180.5': a number of degrees from -180 to 180"),
    ("/pos 0 nan", "bad longitude 'nan': a number of degrees from -180 to 180"),
    ("/pos 0 -inf", "bad longitude '-inf': a number of degrees from -180 to 180"),
    ("/pos 0 0 <evil>", "bad unit '<evil>': a callsign"),
    ("/positions all", "/positions takes no argument"),
])
def test_pos_refuses_what_is_not_a_position_with_a_clear_error(line: str, error: str) -> None:
    with pytest.raises(CommandError) as e:
        parse_line(line)
    assert str(e.value).startswith(error)
    link = Recorder()
    changes = Controller(welcomed(), link, clock=lambda: T0).submit(line)
    assert not link.sent and not any(isinstance(c, Request) for c in changes)


def test_pos_sends_a_position_and_its_refusal_is_shown() -> None:
    st, link = welcomed(), Recorder()
    ctl = Controller(st, link, clock=lambda: T0 + 3)
    changes = ctl.send_requests(ctl.submit("/pos 51.5 -0.12 Viper 2"))
    assert link.sent == [{"type": "position", "lat": 51.5, "lon": -0.12, "unit": "Viper 2", "at": T0 + 3,
                          "purpose": {"kind": "position"}}]
    assert "reporting position 51.50000 -0.12000 as Viper 2" in str(changes)
    refusal = {"type": "error", "code": "forbidden", "message": "position: 'bob' is another user of this site",
               "purpose": {"kind": "position"}, "request": {"type": "position"}}
    assert "position not reported: 'bob' is another user of this site" in str(st.apply(refusal, T0 + 4))
    ctl.send_requests(ctl.submit("/pos 1 2"))
    assert "unit" not in link.sent[-1]                                   # the server's default: the user


def test_a_server_without_positions_makes_the_list_say_so_quietly() -> None:
    st = welcomed()
    assert positions_request() == {"type": "positions", "purpose": {"kind": "positions"}}
    error = {"type": "error", "code": "unknown_type", "message": "unknown frame type 'positions'",
             "purpose": {"kind": "positions"}, "request": {"type": "positions"}}
    assert st.apply(error, T0) == [Panel("positions")]
    assert position_lines(st, T0) == ["!! positions: not available from this server "
                                      "(unknown frame type 'positions')"]
    st.apply({"type": "positions", "units": []}, T0)                     # a later connection's server has them
    assert st.positions_unavailable is None and position_lines(st, T0) == ["positions: none"]


def test_the_line_client_prints_the_list_on_positions_only() -> None:
    out = io.StringIO()
    client = PlainClient("ws://127.0.0.1:1/ws", "alice", "pw", out)
    client.controller.clock = lambda: T0 + 12
    client.state.apply({"type": "positions", "units": [report("viper2", user="bob"), report("Alpha", site="C"),
                                                       report("x", lat=99)]}, T0)
    client.show(client.state.apply(report("hawk", at=T0 + 2, lat=-33.86785, lon=151.20732), T0 + 2))
    assert out.getvalue() == ""                                          # reports arrive silently
    client.submit("/positions")
    assert out.getvalue().splitlines() == [
        "positions: 3 units (1 bad report ignored)",
        "   Alpha   C  -     51.50070   -0.12460  12 s",
        "   hawk    B  -    -33.86785  151.20732  10 s",
        "   viper2  B  bob   51.50070   -0.12460  12 s"]
    assert Controller(client.state, Recorder(), clock=lambda: T0).submit("/positions") == [PositionsListed(T0)]


# --- the Textual list ---------------------------------------------------------------------------------

async def type_line(pilot: Any, text: str) -> None:
    pilot.app.query_one("#input", Input).value = text
    await pilot.press("enter")


def table_rows(app: ChatApp) -> list[list[str]]:
    table = app.query_one("#positions", DataTable)
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


async def test_the_positions_panel_shows_a_unit_after_a_position_frame_and_follows_its_age() -> None:
    now = [T0 + 12]
    app = ChatApp("ws://127.0.0.1:1/ws", "alice", clock=lambda: now[0], connect=False)
    async with app.run_test(size=(100, 30)) as pilot:
        app.apply_frame({"type": "welcome", "site": "A", "user": "alice", "rooms": [],
                         "sites": {"A": "connected", "B": "connected"}, "presence": {}})
        await pilot.pause()
        box = app.query_one("#positions-box")
        assert not box.display                                           # hidden until asked for
        await pilot.press("f5")
        assert box.display and table_rows(app) == []
        assert str(app.query_one("#positions-title", Label).render()) == "Positions (0 units) · F5 hides"
        app.apply_frame(report("viper2", user="bob"))
        await pilot.pause()
        assert table_rows(app) == [["viper2", "B", "bob", "51.50070", "-0.12460", "12 s"]]
        assert str(app.query_one("#positions-title", Label).render()).startswith("Positions (1 unit)")
        app.apply_frame(report("[b]alpha[/b]", site="C", at=T0 + 10))   # names are text, never markup
        now[0] = T0 + 20
        app.tick()
        await pilot.pause()
        assert table_rows(app) == [["[b]alpha[/b]", "C", "", "51.50070", "-0.12460", "10 s"],
                                   ["viper2", "B", "bob", "51.50070", "-0.12460", "20 s"]]
        now[0] = T0 + 300                                                # viper2's report expires
        app.tick()
        await pilot.pause()
        assert [r[0] for r in table_rows(app)] == ["[b]alpha[/b]"]
        await pilot.press("f5")
        assert not box.display
        link = Recorder()
        app.controller = Controller(app.state, link, app.clock)
        await type_line(pilot, "/positions")                             # the command shows it again
        assert box.display
        await type_line(pilot, "/pos 95 0")
        assert not link.sent                                             # refused, with a clear error
        await type_line(pilot, "/pos 48.8566 2.3522")
        assert link.sent == [{"type": "position", "lat": 48.8566, "lon": 2.3522, "at": T0 + 300,
                              "purpose": {"kind": "position"}}]


# --- against the real mission (the session's two sites; no process of its own) -------------------------

async def test_a_unit_reported_at_another_site_and_ones_own_report_show_in_the_list(mission: TuiSites) -> None:
    unit = f"Viper {os.getpid() % 1000}"
    bob = await ChatClient.connect(mission.url("B"), "bob", PASSWORD)
    try:
        app = ChatApp(mission.url("A"), "carol", PASSWORD, backoff=Backoff(initial=0.1, maximum=0.5, jitter=0.0))
        async with app.run_test(size=(100, 30)) as pilot:
            await wait_until(lambda: app.link_status.state == "connected", "connected", pause=pilot.pause)
            await pilot.press("f5")
            await bob.request({"type": "position", "unit": unit, "lat": 51.5007, "lon": -0.1246, "at": time.time()})
            await wait_until(lambda: [unit, "B", "bob", "51.50070", "-0.12460"] in [r[:5] for r in table_rows(app)],
                             "bob's unit, reported at B, in carol's list at A", pause=pilot.pause)
            await type_line(pilot, "/pos -33.86785 151.20732")
            await wait_until(lambda: ["carol", "A", "carol", "-33.86785", "151.20732"]
                             in [r[:5] for r in table_rows(app)], "carol's own report in her list",
                             pause=pilot.pause)
    finally:
        await bob.close()
