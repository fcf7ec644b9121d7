"""contracts.text: how the suite writes a duration for people (the TUI's ages and waits, the RCM server's log)."""
from __future__ import annotations

import pytest

from contracts.text import action_of, action_text, duration, lone_surrogate


@pytest.mark.parametrize(("seconds", "text"), [(0.25, "250 ms"), (1, "1 s"), (95, "95 s"), (119.4, "119 s"),
                                                (120, "2 min"), (720, "12 min"), (7200, "2.0 h"), (12600, "3.5 h"),
                                                (172799, "48.0 h"), (172800, "2.0 days"), (360000, "4.2 days")])
def test_a_duration_is_written_in_the_unit_people_read_it_in(seconds: float, text: str) -> None:
    assert duration(seconds) == text


def test_a_lone_surrogate_is_found_and_ordinary_text_is_not() -> None:
    assert lone_surrogate("ab\ud800") and not lone_surrogate("ops ✓") and not lone_surrogate("plain")


def test_an_action_is_one_line_said_as_its_author_and_read_back_as_what_they_did() -> None:
    assert action_text("bob", "waves") == "* bob waves" and action_of("bob", "* bob waves") == "waves"
    assert action_of("bob", "* carol waves") is None           # another's
    assert action_of("bob", "* bob ") is None                  # the bare mark
    assert action_of("bob", "* bob waves\nand leaves") is None  # more than one line
    assert action_of("bob", "bob waves") is None
