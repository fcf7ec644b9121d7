"""Inter-site bytes per message at 8 messages/s in total (4 sites x 2/s), compressed and not, in one run.

Every byte crossing the link proxies is counted, both directions: data, clock
announcements, acknowledgements, heartbeats, framing. A multicast to the
three other sites puts three copies on the links, so the figure is reported
per message copy (bytes / (messages x 3)), the per-link cost that the paper's
56 kbps links care about, and per message sent. Target: 140 bytes per copy.

Two missions run side by side with the same traffic: ``[rcm] compression =
"zstd"`` (the default: each connection's streams compressed, rcm.wire.compress)
and ``"none"``. The summary leads with the ratio of their link bytes
(compressed / uncompressed), then each one's bytes per copy and its ratio to
the payload bytes the copies carry (1.00 would be a free multicast).

Payloads (``--payload``): ``chat`` (the default), chat messages as the chat
server encodes them (``chat_server.payload``, the compact layout) with
60-character lines drawn from a few hundred words, rooms and users, so that
compression meets text like the real thing; ``x``: ``--size`` bytes of ``x``
(the earlier figure; flatters compression).

    .venv/bin/python bench/rcm_wire.py [--duration 30] [--payload chat|x]
    .venv/bin/python bench/rcm_wire.py --quick        # 1 s of traffic (a smoke run)
"""
from __future__ import annotations

import argparse
import asyncio
import random
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import mission, write_result  # noqa: E402
from chat_server.payload import ChatMessage, encode_payload  # noqa: E402
from chat_server.payload_arrays import compact_time  # noqa: E402

if TYPE_CHECKING:
    from faultinject.links import LinkSet

SITES = ["A", "B", "C", "D"]
WORDS = ("alpha bravo charlie delta echo foxtrot grid north south east west move hold report contact "
         "position status team squad vehicle convoy route checkpoint bridge river ridge valley road "
         "supply fuel water ammo medic casualty evac landing zone helicopter arrival departure eta "
         "copy roger wilco negative affirmative standby over out say again confirm request approve "
         "weather wind rain visibility clear fog night morning noon one two three four five six seven "
         "eight nine zero hundred thousand minutes hours kilometres metres the a to at in on for with "
         "from and of is are was be we they you our their this that all no yes now then later soon").split()
ROOMS = ("ops", "logistics", "medical", "intel", "command")
USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")


def chat_payloads(rng: random.Random, site: str, clock: Callable[[], float] = time.time) -> Iterator[bytes]:
    """Chat messages as a chat server sends them by default (the compact layout, ``[chat] compact_payloads``):
    60-character lines, a room, a user, a time to the hundredth (``clock``: when they are sent;
    ``bench/link_dict.py`` passes a virtual one). The map layout's client id is not in the compact one."""
    n = 0
    while True:
        words: list[str] = []
        while len(" ".join(words)) < 60:
            words.append(rng.choice(WORDS))
        text = " ".join(words)[:60]
        n += 1
        yield encode_payload(ChatMessage(rng.choice(ROOMS), f"{rng.choice(USERS)}@{site}", text,
                                         compact_time(clock()), f"{site}-{rng.getrandbits(32):08x}-{n}"),
                             compact=True)


def link_bytes(links: LinkSet) -> int:
    total = 0
    for proxy in links.proxies.values():
        st = proxy.stats()
        total += st.forward.bytes_in + st.reverse.bytes_in
    return total


async def run(duration: float, rate: float, size: int, payload: str, compression: str,
              settle: float = 2.0) -> dict[str, Any]:
    async with mission(SITES, rcm={"compression": compression}, proxies=True) as m:
        clients, links = m["clients"], m["links"]
        await asyncio.sleep(settle)               # past the handshakes
        before = link_bytes(links)
        sent = 0
        carried = 0
        stop_at = time.time() + duration

        async def sender(site: str, offset: float) -> None:
            nonlocal sent, carried
            texts = chat_payloads(random.Random(site), site) if payload == "chat" else None
            await asyncio.sleep(offset)
            nxt = time.time()
            while time.time() < stop_at:
                data = next(texts) if texts is not None else b"x" * size
                await clients[site].send(data)
                sent += 1
                carried += len(data)
                nxt += 1 / rate
                await asyncio.sleep(max(0.0, nxt - time.time()))

        rng = random.Random(3)
        await asyncio.gather(*(sender(s, rng.uniform(0, 1 / rate)) for s in SITES))
        await asyncio.sleep(min(1.0, settle))     # let the last acks and announcements cross
        used = link_bytes(links) - before
        st = await clients["A"].stats()
    copies = sent * (len(SITES) - 1)
    per_copy = used / copies
    mean = carried / sent
    return {"compression": compression, "sites": len(SITES), "rate_per_site": rate, "payload": payload,
            "payload_bytes": mean, "duration_s": duration,
            "messages": sent, "link_bytes": used, "bytes_per_copy": per_copy,
            "bytes_per_message": used / sent, "overhead_per_copy": per_copy - mean,
            "ratio_link_bytes_over_payload_bytes": per_copy / mean,
            "links_compressed_at_A": sorted(p for p, c in st.get("compression", {}).items() if c["compressed"]),
            "target_bytes_per_copy": 140, "meets_target": per_copy <= 140}


async def both(duration: float, rate: float, size: int, payload: str, settle: float) -> dict[str, Any]:
    """The two missions side by side (the same load on the machine)."""
    on, off = await asyncio.gather(run(duration, rate, size, payload, "zstd", settle),
                                   run(duration, rate, size, payload, "none", settle))
    return {"ratio_compressed_over_uncompressed": on["bytes_per_copy"] / off["bytes_per_copy"],
            "zstd": on, "none": off}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--duration", type=float, default=30.0)
    ap.add_argument("--rate", type=float, default=2.0)
    ap.add_argument("--size", type=int, default=100, help="payload bytes with --payload x")
    ap.add_argument("--payload", choices=("chat", "x"), default="chat")
    ap.add_argument("--quick", action="store_true", help="1 s of traffic (a smoke run)")
    a = ap.parse_args()
    if a.quick:
        a.duration = 1.0
    r = asyncio.run(both(a.duration, a.rate, a.size, a.payload, settle=0.5 if a.quick else 2.0))
    path = write_result("rcm_wire_quick" if a.quick else "rcm_wire", r)
    print(f"rcm_wire: compressed/uncompressed link bytes {r['ratio_compressed_over_uncompressed']:.2f} "
          f"({a.payload} payloads, {a.rate * len(SITES):g} msg/s total) -> {path}")
    for mode in ("zstd", "none"):
        m = r[mode]
        print(f"  compression = {mode!r:6}: {m['messages']} messages of {m['payload_bytes']:.0f} B: "
              f"{m['bytes_per_copy']:.1f} B per message copy on the links (link/payload bytes "
              f"{m['ratio_link_bytes_over_payload_bytes']:.2f}; {m['bytes_per_message']:.0f} B per message "
              f"multicast to 3 sites; target <= 140 per copy: {'met' if m['meets_target'] else 'MISSED'}; "
              f"links compressed at A: {', '.join(m['links_compressed_at_A']) or 'none'})")


if __name__ == "__main__":
    main()
