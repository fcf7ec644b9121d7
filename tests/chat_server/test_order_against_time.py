"""Order against time: the one rule clients mark a line by when it reads earlier than the line above it."""
from __future__ import annotations

from chat_server.protocol import out_of_time

CAROL = 1767181530.0            # 11:45:30 (UTC)
ALICE = CAROL - 62              # 11:44:28


def test_a_line_that_reads_earlier_than_the_line_above_it_is_marked_by_how_much():
    assert out_of_time(ALICE, CAROL) == 62                  # "11:45:30 carol" above "11:44:28 alice"
    assert out_of_time(CAROL, ALICE) == 0                   # in time order
    assert out_of_time(ALICE, None) == 0                    # the first line shown has nothing above it


def test_whole_seconds_as_shown_decide_not_clock_noise():
    assert out_of_time(CAROL + 0.2, CAROL + 0.9) == 0       # both read 11:45:30
    assert out_of_time(CAROL + 0.9, CAROL + 1.1) == 1       # 11:45:30 below 11:45:31 reads out of order
    assert out_of_time(CAROL, CAROL) == 0
