"""chat_server.irc_marks: the shown marks' file, read a chunk of clients a loop turn and written whole."""
from __future__ import annotations

import asyncio
import json
from pathlib import Path

from chat_server import irc_marks
from chat_server.irc_marks import SAVE_CHUNK, ShownMarks, marked_in_turns


def _filled(path: Path, n: int) -> ShownMarks:
    marks = ShownMarks(path)
    for i in range(n):
        marks.of(f"u{i}", "10.0.0.1")["ops"] = i
    return marks


async def test_a_save_read_in_turns_is_the_file_a_save_at_once_writes(tmp_path: Path) -> None:
    n = SAVE_CHUNK * 2 + 7
    marks = _filled(tmp_path / "shown.json", n)
    marks.of("u3", "10.0.0.1")["log"] = 9              # u3 is now the most recently used
    text = await marks.text_in_turns()
    assert text is not None and text == marks.changed()
    marks.write(text)
    assert await marks.text_in_turns() is None and marks.changed() is None     # nothing changed since
    again = ShownMarks(tmp_path / "shown.json")
    assert again.marks == marks.marks
    assert list(again.marks) == list(marks.marks) and list(again.marks)[-1] == "u3@10.0.0.1"   # the order kept
    assert again.changed() is None                     # read back, it is what was written


async def test_a_save_yields_the_loop_between_chunks_and_what_changes_meanwhile_is_whole(tmp_path: Path) -> None:
    """Other work runs between the chunks; a client's marks changed meanwhile are read whole (old or new, as
    marks only grow), and a client that comes meanwhile is in the next save."""
    n = SAVE_CHUNK * 3
    marks = _filled(tmp_path / "shown.json", n)
    turns = 0
    reading = asyncio.ensure_future(marks.text_in_turns())
    await asyncio.sleep(0)                             # its first chunk read
    while not reading.done():
        turns += 1
        marks.of(f"u{n - 1}", "10.0.0.1")["ops"] += 100     # (the last chunk's client: its dict moves last too)
        marks.of("late", "10.0.0.2")["ops"] = 1
        await asyncio.sleep(0)
    assert turns >= 2                                  # a turn of other work between chunks
    text = reading.result()
    assert text is not None
    saved = json.loads(text)
    assert "late@10.0.0.2" not in saved and len(saved) == n
    assert saved[f"u{n - 1}@10.0.0.1"]["ops"] >= n - 1
    assert all(saved[f"u{i}@10.0.0.1"] == {"ops": i} for i in range(n - 1))
    marks.write(text)
    after = json.loads(await marks.text_in_turns() or "{}")
    assert after["late@10.0.0.2"] == {"ops": 1}


async def test_members_are_marked_a_chunk_a_turn(monkeypatch) -> None:
    monkeypatch.setattr(irc_marks, "SAVE_CHUNK", 3)
    marked: list[int] = []
    turn = [0]

    class Member:
        def __init__(self, i: int) -> None:
            self.i = i

        def step_shown(self) -> None:
            marked.append(turn[0])

    async def count_turns() -> None:
        while True:
            turn[0] += 1
            await asyncio.sleep(0)

    counter = asyncio.ensure_future(count_turns())
    await asyncio.sleep(0)
    await marked_in_turns([Member(i) for i in range(8)])
    counter.cancel()
    assert len(marked) == 8
    assert marked[0] == marked[2] < marked[3] == marked[5] < marked[6] == marked[7]
