"""msg_id timing: does ``acknowledge`` take as long for a message the user may not read as for none at all?

``acknowledge {msg_id}`` answers a message the user may not read (in a private room it is not a member
of) exactly as one that does not exist: the same error frame, by the same path
(``ClientFrames.readable_room``: one lookup of the message's room, then the room rule; the message itself
is read only for a reader). This times the handler (``ClientFrames._acknowledge``, up to its
error) in one process for interleaved attempts of two kinds over a site database of ``--messages``
messages, a quarter of them in a private room, with as many control payloads between them:

* ``hidden``: a msg_id of the private room's messages, asked by a user who is not a member;
* ``unknown``: a msg_id with no message, among them (a control payload's: a roster or receipts), which
  is what a walk over ``<site>:<seq>`` would tell the hidden ones from.

The summary leads with the ratio of the medians hidden/unknown (1.00: the median tells them apart by
nothing), then the difference of the medians against the spread (interquartile range) of the unknown
times. Statistics, not a test.

    .venv/bin/python bench/msg_id_timing.py                 # 20,000 attempts of each kind, 20,000 messages
    .venv/bin/python bench/msg_id_timing.py --quick         # 500 of each, 2,000 messages
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, write_result  # noqa: E402
from chat_server.actions import write  # noqa: E402
from chat_server.config import ChatSettings  # noqa: E402
from chat_server.core import ChatCore  # noqa: E402
from chat_server.handlers import ClientFrames  # noqa: E402
from chat_server.history import History  # noqa: E402
from chat_server.journal import Journal  # noqa: E402
from chat_server.payload import ChatMessage, Receipts, RoomDefinition, encode_payload  # noqa: E402
from chat_server.protocol import Refusal, Request  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402
from contracts.precedence import DEFAULT, Precedence  # noqa: E402
from rcm.client import Delivery  # noqa: E402


@dataclass
class Server:                 # what ClientFrames reads of the chat server on this path
    store: ChatStore
    core: ChatCore
    settings: ChatSettings = field(default_factory=ChatSettings)


@dataclass
class User:
    user: str


def build(directory: Path, messages: int) -> tuple[ChatStore, ChatCore, list[str], list[str]]:
    """A site B whose database holds ``messages`` messages from A, a quarter in the private room "secret",
    between them as many control payloads (no message); the msg_ids of the private ones and of the controls."""
    store = ChatStore(directory / "chat.db")
    journal = Journal(directory / "journal", "B", clock=lambda: 0.0)
    core = ChatCore("B", ["A"], store, journal_n=0, roster_gen=1,
                    history=History(store, on_join=50, most=500, page_bytes=1 << 19), max_rooms_per_user=200,
                    max_rooms=10_000, rooms_created_per_hour=60.0, rooms_created_burst=20, rooms_page=500)

    def deliver(seq: int, payload: ChatMessage | RoomDefinition | Receipts, precedence: str = DEFAULT) -> None:
        d = Delivery(seq, "A", seq, f"A:{seq}", [seq, "A"], False, encode_payload(payload), precedence)
        store.begin()
        write(core.delivery(d, core.decode(d), 0.0), store, journal)
        store.commit()
    deliver(1, RoomDefinition("secret", "alice", ("alice", "bob")))
    hidden, controls = [], []
    for seq in range(2, 2 * messages + 2):
        if seq % 2:
            deliver(seq, Receipts(()))
            controls.append(f"A:{seq}")
            continue
        private = seq % 8 == 0
        deliver(seq, ChatMessage("secret" if private else "ops", "alice", f"message {seq}", float(seq), "",
                                 "A:1" if private else "", (1, "A") if private else ()), Precedence.FLASH.value)
        if private:
            hidden.append(f"A:{seq}")
    return store, core, hidden, controls


async def run(samples: int, messages: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="msg-id-timing-") as d:
        store, core, hidden, controls = build(Path(d), messages)
        frames = ClientFrames(Server(store, core))      # type: ignore[arg-type]
        eve = User("eve")
        rng = random.Random(seed)
        kinds = ["hidden"] * samples + ["unknown"] * samples
        rng.shuffle(kinds)
        times: dict[str, list[float]] = {"hidden": [], "unknown": []}
        answers: dict[str, set[str]] = {"hidden": set(), "unknown": set()}
        for kind in kinds:
            msg_id = rng.choice(hidden if kind == "hidden" else controls)
            req = Request("acknowledge", {"msg_id": msg_id}, "acknowledge", None)
            t0 = time.perf_counter()
            try:
                await frames._acknowledge(eve, req)      # type: ignore[arg-type]
            except Refusal as e:
                t1 = time.perf_counter()
                answers[kind].add(f"{e.code}: {e.message.replace(repr(msg_id), 'ID')}")
            else:
                raise AssertionError(f"eve acknowledged {msg_id}")
            times[kind].append(t1 - t0)
        store.close()

    def stats(xs: list[float]) -> dict[str, float]:
        return {"n": len(xs), "median_us": 1e6 * statistics.median(xs), "p10_us": 1e6 * percentile(xs, 10),
                "p90_us": 1e6 * percentile(xs, 90), "iqr_us": 1e6 * (percentile(xs, 75) - percentile(xs, 25))}
    h, u = stats(times["hidden"]), stats(times["unknown"])
    return {"samples": samples, "messages": messages, "seed": seed, "hidden": h, "unknown": u,
            "ratio": h["median_us"] / u["median_us"],
            "difference_in_iqr": (h["median_us"] - u["median_us"]) / (u["iqr_us"] or float("nan")),
            "same_answer": answers["hidden"] == answers["unknown"] and len(answers["hidden"]) == 1,
            "answers": sorted(answers["hidden"] | answers["unknown"])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=20_000, help="attempts of each kind")
    ap.add_argument("--messages", type=int, default=20_000, help="messages in the site's database")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="500 attempts of each kind, 2,000 messages")
    a = ap.parse_args()
    samples, messages = (500, 2_000) if a.quick else (a.samples, a.messages)
    r = asyncio.run(run(samples, messages, a.seed))
    path = write_result("msg_id_timing", r)
    h, u = r["hidden"], r["unknown"]
    print(f"msg_id_timing: hidden/unknown median ratio {r['ratio']:.3f} ({h['median_us']:.1f} / "
          f"{u['median_us']:.1f} us), difference {r['difference_in_iqr']:+.2f} x the unknown IQR "
          f"({u['iqr_us']:.1f} us); same answer: {r['same_answer']} ({'; '.join(r['answers'])})")
    print(f"  {samples} attempts of each kind, {messages} messages; {path}")


if __name__ == "__main__":
    main()
