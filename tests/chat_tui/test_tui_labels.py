"""Security labels in the terminal clients: the scheme from welcome, a room's floor from joined, each line's label,
the composer's label (only sendable ones; back to the floor when another room is shown), ``/label``, ``/create``
with a label, the line client's lines, and the full-screen client's banners and F6 picker (fed frames)."""
from __future__ import annotations

from typing import Any

from textual.widgets import Input, OptionList, Static

from chat_tui.app import ChatApp, MessageLine
from chat_tui.controller import Controller
from chat_tui.labels import level_colours, split_create
from chat_tui.plain import format_changes
from chat_tui.state import Banner, ChatState, SendLabel
from contracts.labels import LabelError, Scheme

LABELS = {"levels": ["UNCLASSIFIED", "RESTRICTED", "CONFIDENTIAL", "SECRET"], "caveats": ["AUS", "GBR", "USA"],
          "default": {"level": "RESTRICTED", "caveats": []}}       # (as chat_server's welcome spells it)
WELCOME = {"type": "welcome", "site": "A", "user": "alice", "rooms": [], "sites": {"A": "connected", "B": "connected"},
           "presence": {}, "labels": LABELS, "clearance": {"level": "SECRET", "caveats": ["GBR", "USA"]}}
UNLABELED = {k: v for k, v in WELCOME.items() if k not in ("labels", "clearance")}
T0 = 1_800_000_000.0


def L(level: str, *caveats: str) -> dict[str, Any]:      # noqa: N802 - reads as the label it builds
    return {"level": level, "caveats": list(caveats)}


def joined(room: str, label: dict[str, Any] | None, history: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    f: dict[str, Any] = {"type": "joined", "room": room, "history": list(history), "more": False}
    if label is not None:
        f["label"] = label
    return f


def msg(seq: int, text: str, label: dict[str, Any] | None = None, room: str = "ops") -> dict[str, Any]:
    f = {"type": "message", "room": room, "msg_id": f"B:{seq}", "origin": "B", "user": "bob", "text": text,
         "sent_at": T0 + seq, "order": [seq, "B"], "late": False}
    return {**f, "label": label} if label is not None else f


class Link:
    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []

    def request(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)

    def say(self, room: str, text: str, **kw: Any) -> str:
        self.sent.append({"type": "say", "room": room, "text": text, **kw})
        return f"c{len(self.sent)}"


def labelled(floor: dict[str, Any] | None = None) -> tuple[ChatState, Controller, Link, list[Any]]:
    st = ChatState("alice")
    link = Link()
    changes = st.apply(WELCOME, T0) + st.apply(joined("ops", floor or L("CONFIDENTIAL", "GBR")), T0)
    return st, Controller(st, link, clock=lambda: T0), link, changes


def test_welcome_and_joined_give_the_scheme_the_clearance_and_the_rooms_floor_banner():
    st, _, _, changes = labelled()
    assert str(st.clearance) == "SECRET//REL TO GBR, USA"
    assert st.scheme is not None and str(st.scheme.default) == "RESTRICTED"
    assert [str(c.label) for c in changes if isinstance(c, Banner)] == ["CONFIDENTIAL//REL TO GBR"]
    st.apply(msg(1, "up", L("SECRET", "USA", "GBR")), T0)
    st.apply(msg(2, "floor", L("CONFIDENTIAL", "GBR")), T0)
    st.apply(msg(3, "odd", L("COSMIC")), T0)
    assert [str(e.label) for e in st.rooms["ops"].entries] == ["SECRET//REL TO GBR, USA", "CONFIDENTIAL//REL TO GBR",
                                                               "COSMIC"]
    assert st.rooms["ops"].entries[2].label.rank == -1     # shown, trusted for nothing
    plain = ChatState("alice")
    plain.apply(UNLABELED, T0)
    assert not [c for c in plain.apply(joined("ops", L("SECRET")), T0) if isinstance(c, Banner)]
    plain.apply(msg(1, "x", L("SECRET")), T0)
    assert plain.scheme is None and plain.rooms["ops"].label is None and plain.rooms["ops"].entries[0].label is None


def test_say_carries_the_floor_or_the_chosen_label_until_another_room_is_shown():
    st, ctl, link, _ = labelled()
    ctl.submit("one")
    assert [str(c.label) for c in ctl.submit("/label secret//gbr/usa") if isinstance(c, SendLabel)] == \
        ["SECRET//REL TO GBR, USA"]
    ctl.submit("two")
    assert [(f["text"], f["label"]) for f in link.sent] == [("one", L("CONFIDENTIAL", "GBR")),
                                                          ("two", L("SECRET", "GBR", "USA"))]
    assert str(st.rooms["ops"].entries[-1].label) == "SECRET//REL TO GBR, USA"      # the echo shows it
    st.apply(joined("logs", L("UNCLASSIFIED")), T0)
    assert [str(c.label) for c in st.set_active("logs") if isinstance(c, Banner)] == ["UNCLASSIFIED"]
    st.set_active("ops")
    ctl.submit("three")
    assert link.sent[-1]["label"] == L("CONFIDENTIAL", "GBR")                       # back at the floor
    plain = ChatState("alice")
    plain_link = Link()
    plain.apply(UNLABELED, T0)
    plain.apply(joined("ops", None), T0)
    Controller(plain, plain_link).submit("hello")
    assert "label" not in plain_link.sent[0]


def test_label_refuses_what_may_not_be_sent_here_and_lists_what_may():
    st, ctl, _, _ = labelled()
    ctl.submit("/label SECRET//REL TO AUS")
    ctl.submit("/label RESTRICTED")
    ctl.submit("/label COSMIC")
    ctl.submit("/label")
    above, below, unknown, listing = [e.text for e in st.rooms["ops"].entries][-4:]
    assert "your clearance is SECRET//REL TO GBR, USA" in above
    assert "the room's floor is CONFIDENTIAL//REL TO GBR" in below
    assert "unknown level 'COSMIC'" in unknown
    assert "you may send: CONFIDENTIAL//REL TO GBR · CONFIDENTIAL//REL TO GBR, USA · SECRET//REL TO GBR · " \
           "SECRET//REL TO GBR, USA" in listing
    assert st.send_label is None
    assert [str(c.label) for c in st.cycle_label() if isinstance(c, SendLabel)] == ["CONFIDENTIAL//REL TO GBR, USA"]


def test_with_many_caveats_any_label_between_floor_and_clearance_may_be_chosen():
    many = ["A", "B", "C", "D", "E", "F", "G"]
    st = ChatState("alice")
    st.apply({**WELCOME, "labels": {"levels": ["U", "S"], "caveats": many, "default": "U"},
              "clearance": L("S", *many)}, T0)
    st.apply(joined("ops", L("U")), T0)
    ctl = Controller(st, Link(), clock=lambda: T0)
    ctl.submit("/label S//A,B")
    assert str(st.send_label) == "S//REL TO A, B"
    assert st.send_label not in st.choices(st.rooms["ops"])      # the menu lists the common choices only


def test_create_reads_the_label_off_the_front_public_without_users_private_with_them():
    scheme = Scheme.build(LABELS["levels"], LABELS["caveats"])
    label, members = split_create(scheme, "SECRET//REL TO GBR, USA bob carol")
    assert (str(label), members) == ("SECRET//REL TO GBR, USA", ["bob", "carol"])
    assert split_create(scheme, "TOP bob") == (None, ["TOP", "bob"])
    assert split_create(None, "bob") == (None, ["bob"])
    try:
        split_create(scheme, "SECRET//NZL")
    except LabelError as e:
        assert "unknown caveat 'NZL'" in str(e)
    else:
        raise AssertionError("NZL is no caveat of the scheme")
    st, ctl, link, _ = labelled()
    ctl.submit("/create plans secret//gbr")
    ctl.submit("/create cell CONFIDENTIAL bob@B")
    ctl.submit("/create top SECRET//AUS")
    assert link.sent == [{"type": "create", "room": "plans", "label": L("SECRET", "GBR")},
                         {"type": "create", "room": "cell", "label": L("CONFIDENTIAL"), "members": ["bob@B"]}]
    assert "your clearance is SECRET//REL TO GBR, USA" in st.rooms["ops"].entries[-1].text
    st.apply({"type": "created", "room": "plans", "label": L("SECRET", "GBR")}, T0)
    assert st.rooms["ops"].entries[-1].text == "room plans at SECRET//REL TO GBR created"


def test_the_line_client_prints_the_banner_the_choice_and_labels_above_the_floor():
    st, ctl, _, changes = labelled()
    out = format_changes(changes, st, lambda t: "12:00:00")
    out += format_changes(st.apply(msg(1, "up", L("SECRET", "GBR")), T0), st, lambda t: "12:00:00")
    out += format_changes(st.apply(msg(2, "floor", L("CONFIDENTIAL", "GBR")), T0), st, lambda t: "12:00:00")
    out += format_changes(ctl.submit("/label SECRET//GBR"), st, lambda t: "12:00:00")
    assert "== [ops] CONFIDENTIAL//REL TO GBR ==" in out
    assert "12:00:00 [ops] <SECRET//REL TO GBR> bob@B: up" in out
    assert "12:00:00 [ops] bob@B: floor" in out
    assert out[-1] == "-- [ops] sending at SECRET//REL TO GBR"
    listing = st.apply({"type": "rooms", "rooms": [{"room": "ops", "members": 2, "online": 1, "joined": True,
                                                    "label": L("CONFIDENTIAL", "GBR")}], "more": False}, T0)
    assert " * ops [CONFIDENTIAL//REL TO GBR]: 2 members, 1 online" in format_changes(listing, st)[1]


async def test_banners_top_and_bottom_a_tag_on_a_line_above_the_floor_and_the_f6_picker():
    app = ChatApp("ws://127.0.0.1:8101/ws", "alice", clock=lambda: T0, connect=False)
    async with app.run_test(size=(100, 30)) as pilot:
        link = Link()
        app.controller = Controller(app.state, link, clock=lambda: T0)
        app.apply_frame(UNLABELED)
        app.apply_frame(joined("plain", None))
        await pilot.pause()
        assert not [w for w in app.query(".label-banner, #send-label") if w.display and w.has_class("on")]
        app.apply_frame(WELCOME)
        app.apply_frame(joined("ops", L("SECRET", "GBR"), (msg(1, "floor", L("SECRET", "GBR")),
                                                             msg(2, "up", L("SECRET", "GBR", "USA")))))
        app.apply_frame(joined("logs", L("UNCLASSIFIED")))
        app.show(app.state.set_active("ops"))
        await pilot.pause()
        top, bottom = app.query_one("#label-top", Static), app.query_one("#label-bottom", Static)
        for banner in (top, bottom):
            assert banner.has_class("on") and str(banner.render()) == "SECRET//REL TO GBR"
            assert banner.styles.background.hex.lower() == level_colours("SECRET", 3, 4)[0]
            assert banner.region.height == 1
        assert top.region.y < app.query_one("#room-title").region.y
        assert bottom.region.y > app.query_one("#input").region.y
        lines = {w.entry.text: str(w.render()) for w in app.query(MessageLine)}
        assert "SECRET//REL TO GBR, USA" in lines["up"] and "SECRET" not in lines["floor"]
        chip = app.query_one("#send-label", Static)
        assert "SECRET//REL TO GBR" in str(chip.render())
        await pilot.press("f6")
        picker = app.query_one("#label-picker", OptionList)
        assert picker.has_class("on")
        await pilot.press("escape")
        assert not picker.has_class("on")
        await pilot.press("f6")
        assert [str(picker.get_option_at_index(i).prompt).strip() for i in range(picker.option_count)] == \
            ["SECRET//REL TO GBR", "SECRET//REL TO GBR, USA"]
        await pilot.press("down", "enter")
        await pilot.pause()
        assert not picker.has_class("on")
        assert "SECRET//REL TO GBR, USA" in str(chip.render())
        app.query_one("#input", Input).value = "hello"
        await pilot.press("enter")
        assert link.sent[-1]["label"] == L("SECRET", "GBR", "USA")
        app.query_one("#input", Input).value = "/switch logs"      # another room: its banner, the composer at its floor
        await pilot.press("enter")
        await pilot.pause()
        assert app.state.active == "logs"
        assert str(top.render()) == "UNCLASSIFIED" and top.styles.background.hex.lower() == "#007a33"
        assert str(chip.render()).split() == ["UNCLASSIFIED", "F6"]
