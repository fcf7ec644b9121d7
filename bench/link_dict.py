"""Link compression for 60-character chat lines: the per-link zstd context, a trained dictionary, the level (issue 36).

The streams are what the stack writes on each directed link of four sites in
the HF profile (``deploy/examples/hf-4site.toml``'s ``[rcm]`` timing, 300 ms
one way, 2,400 bit/s pacing), in virtual time (``bench/idle_link.VirtualNet``:
exact, no sockets): chat payloads as the chat server encodes them (the
compact layout, ``bench/rcm_wire.chat_payloads``), one line every 5 s per
site. Each directed link's writes are compressed as ``rcm.wire.compress``
does (one streaming context per connection, one flushed block per write),
with and without a dictionary and at several levels, and the bytes of the
chat phase are divided by the message copies (3 per line).

The dictionary is trained (``zstandard.train_dictionary``) on the writes of a
separate run (another seed); it is measured on (a) lines from the same word
list and (b) lines from a word list the training never saw, as a check that
it does not only memorise the bench's vocabulary. The first line printed is
the ratio of the bytes per copy with the shipped dictionary to the per-link
context alone, both at the product's level 9 (same run, same writes).

    .venv/bin/python bench/link_dict.py               # 5 min of traffic to train, 5 min to measure (~20 s)
    .venv/bin/python bench/link_dict.py --quick       # 1 min each
"""
from __future__ import annotations

import argparse
import base64
import random
import sys
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import fields, replace
from pathlib import Path
from typing import Any

import msgpack
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import write_result  # noqa: E402
from bench.idle_link import SITES, VirtualNet  # noqa: E402
from bench.rcm_wire import chat_payloads  # noqa: E402
from chat_server.payload import ChatMessage, encode_payload  # noqa: E402
from chat_server.payload_arrays import compact_time  # noqa: E402
from contracts.mission import RcmSettings  # noqa: E402
from rcm.actions import Transmit  # noqa: E402
from rcm.wire import compress  # noqa: E402

HF_EXAMPLE = Path(__file__).resolve().parent.parent / "deploy" / "examples" / "hf-4site.toml"
DELAY, RATE, EVERY = 0.3, 2400, 5.0
EPOCH = 1_790_000_000.0        # the virtual clock's zero as a Unix time (payloads carry it)
DICT_SIZE, TRAIN_SEED, TRAIN_MINUTES = 4096, 1, 5.0      # what rcm/wire/chat_dict.py was made with (--write)
DICT_MODULE = Path(__file__).resolve().parent.parent / "rcm" / "wire" / "chat_dict.py"
OTHER_WORDS = ("lorem ipsum harbour lighthouse granite orchard violin meadow quartz saddle lantern ferry "
               "copper willow thunder pebble falcon canyon marble glacier timber ember cobalt prairie "
               "anchor beacon thistle juniper harvest compass summit kettle walnut basalt cedar dune "
               "signal tide frost sparrow cinder").split()


def hf_settings() -> RcmSettings:
    table = tomllib.loads(HF_EXAMPLE.read_text())["rcm"]
    known = {f.name for f in fields(RcmSettings)}
    return replace(RcmSettings(durable=False), **{k: v for k, v in table.items()
                                                  if k in known and k not in ("tls", "compression")})


def other_payloads(rng: random.Random, site: str) -> Iterator[bytes]:
    """Lines from a vocabulary the dictionary was not trained on."""
    n = 0
    while True:
        words: list[str] = []
        while len(" ".join(words)) < 60:
            words.append(rng.choice(OTHER_WORDS))
        n += 1
        yield encode_payload(ChatMessage("ops", f"{rng.choice(('kim', 'lee', 'max'))}@{site}",
                                         " ".join(words)[:60], compact_time(EPOCH + n * EVERY + rng.random()), ""),
                             compact=True)


class Capture(VirtualNet):
    """The virtual mesh, each directed connection's writes kept in order (with the time they were made)."""

    def __init__(self, settings: RcmSettings) -> None:
        self.writes: dict[tuple[str, Any], list[tuple[float, bytes]]] = {}
        super().__init__(settings, DELAY, RATE)

    def _run(self, s: str, actions: list[Any]) -> None:
        for a in actions:
            if isinstance(a, Transmit) and (s, a.conn) in self.peer_of:
                self.writes.setdefault((s, a.conn), []).append((self.now, a.data))
        super()._run(s, actions)


VARIANTS: dict[str, Callable[[list[Any]], list[Any]]] = {
    "today": lambda b: b,
    "user without @site": lambda b: [*b[:2], str(b[2]).split("@")[0], *b[3:]],
    "sent_at whole seconds": lambda b: [*b[:5], 0, *b[6:]],
    "no sent_at": lambda b: [*b[:4], *b[6:]],
    "no room": lambda b: [b[0], *b[2:]],
}
"""Chat message layouts to weigh a field (``--fields``): each leaves a field of today's out or coarser (an upper
bound of what deriving it would save; the receiver could not decode them)."""


def variant(gen: Iterator[bytes], change: Callable[[list[Any]], list[Any]]) -> Iterator[bytes]:
    for payload in gen:
        yield msgpack.packb(change(msgpack.unpackb(payload)), use_bin_type=True)


def capture(seed: int, minutes: float, other: bool = False, change: Callable[[list[Any]], list[Any]] | None = None
            ) -> tuple[dict[tuple[str, Any], list[tuple[float, bytes]]], float, int]:
    """(writes per directed connection, when the chat phase began, lines sent)."""
    net = Capture(hf_settings())
    net.run(10.0)
    t0 = net.now
    rng = random.Random(seed)
    gens = {s: other_payloads(rng, s) if other else chat_payloads(rng, s, lambda: EPOCH + net.now) for s in SITES}
    if change is not None:
        gens = {s: variant(g, change) for s, g in gens.items()}
    sent = 0
    for i, s in enumerate(SITES):
        t = t0 + 1.25 * i
        while t < t0 + 60.0 * minutes:
            net._at(t, net.send, s, next(gens[s]))
            sent += 1
            t += EVERY
    net.run(t0 + 60.0 * minutes + 5.0)
    return net.writes, t0, sent


def _compressor(level: int, d: zstandard.ZstdCompressionDict | None) -> Any:
    return zstandard.ZstdCompressor(compression_params=compress.params(level), dict_data=d).compressobj()


def coded_bytes(writes: dict[tuple[str, Any], list[tuple[float, bytes]]], t0: float, level: int | None,
                d: zstandard.ZstdCompressionDict | None = None) -> int:
    """Chat-phase bytes over all links after compression (level None: none), checked by decompressing."""
    total = 0
    for chunks in writes.values():
        first = True
        c = _compressor(level, d) if level is not None else None
        dec = (zstandard.ZstdDecompressor(dict_data=d, max_window_size=compress.WINDOW,
                                          format=zstandard.FORMAT_ZSTD1_MAGICLESS).decompressobj()
               if level is not None else None)
        for t, data in chunks:
            if first:          # the HELLO goes plain, as in rcm.wire.compress (its rest is negligible here)
                first = False
                out = data
            elif c is not None and dec is not None:
                out = c.compress(data) + c.flush(zstandard.COMPRESSOBJ_FLUSH_BLOCK)
                assert dec.decompress(out) == data
            else:
                out = data
            if t >= t0:
                total += len(out)
    return total


def train(seed: int, minutes: float, size: int) -> zstandard.ZstdCompressionDict:
    writes, _, _ = capture(seed, minutes)
    samples: list[bytes | bytearray | memoryview] = [data for chunks in writes.values() for _, data in chunks[1:]]
    return zstandard.train_dictionary(size, samples, level=9, threads=1)


def fields_study(a: argparse.Namespace) -> int:
    """Bytes per copy of each layout variant: plain, zstd-9, zstd-9 with the shipped dictionary."""
    rows = {}
    for name, change in VARIANTS.items():
        writes, t0, sent = capture(2, a.minutes, False, change)
        copies = sent * (len(SITES) - 1)
        rows[name] = {"none": coded_bytes(writes, t0, None) / copies, "zstd-9": coded_bytes(writes, t0, 9) / copies,
                      "zstd-9+shipped": coded_bytes(writes, t0, 9, compress.dictionary()) / copies}
    base = rows["today"]
    for name, r in rows.items():
        print(f"link_dict fields[{name}]: " + ", ".join(f"{k} {v:.1f} B ({v - base[k]:+.1f})" for k, v in r.items()))
    print(f"link_dict: results in {write_result('link_dict_fields', {'minutes': a.minutes, 'rows': rows})}")
    return 0


def write_module(d: zstandard.ZstdCompressionDict) -> None:
    """rcm/wire/chat_dict.py: the dictionary as the link codec loads it."""
    data = base64.b64encode(d.as_bytes()).decode()
    lines = "\n".join(data[i:i + 100] for i in range(0, len(data), 100))
    DICT_MODULE.write_text(f'''\"\"\"The zstd dictionary of inter-site links (``rcm.wire.compress``: ``CAP_DICT``).

Theory of operation
-------------------
Generated by ``bench/link_dict.py --write``; do not edit. It was trained
(``zstandard.train_dictionary``, {DICT_SIZE} bytes) on what the stack writes on
each link of four sites in the HF profile carrying chat lines of the suite's
own format (seed {TRAIN_SEED}, {TRAIN_MINUTES:g} virtual minutes): frame
headers, the compact chat payload's layout, announcements and heartbeats.
It is the initial history of each direction's streaming context when both
ends offer it, so the first messages of a connection and the structure of
every small frame compress as if the link had carried many. Both ends must
hold these exact bytes: a changed dictionary takes a new capability bit.
\"\"\"
import base64

DATA = base64.b64decode(\"\"\"
{lines}
\"\"\")
''')


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=5.0)
    ap.add_argument("--quick", action="store_true", help="1 minute to train, 1 to measure")
    ap.add_argument("--fields", action="store_true", help="weigh the chat message's fields (VARIANTS) instead")
    ap.add_argument("--write", action="store_true", help=f"train the shipped dictionary and write {DICT_MODULE.name}")
    a = ap.parse_args()
    if a.write:
        write_module(train(TRAIN_SEED, TRAIN_MINUTES, DICT_SIZE))
        print(f"link_dict: wrote {DICT_MODULE}")
        return 0
    if a.quick:
        a.minutes = 1.0
    if a.fields:
        return fields_study(a)
    dicts = {size: train(TRAIN_SEED, a.minutes, size) for size in (1024, DICT_SIZE)}
    dicts[0] = compress.dictionary()       # the shipped one (key 0)
    out: dict[str, Any] = {"minutes": a.minutes, "sets": {}}
    for name, other in (("same vocabulary", False), ("unseen vocabulary", True)):
        writes, t0, sent = capture(2, a.minutes, other)
        copies = sent * (len(SITES) - 1)
        row: dict[str, float] = {"none": coded_bytes(writes, t0, None) / copies}
        for level in (3, 9, 19):
            row[f"zstd-{level}"] = coded_bytes(writes, t0, level) / copies
        for size, d in dicts.items():
            for level in (3, 9, 19):
                name_ = f"zstd-{level}+dict{size // 1024}k" if size else f"zstd-{level}+shipped"
                row[name_] = coded_bytes(writes, t0, level, d) / copies
        out["sets"][name] = {"lines": sent, "bytes_per_copy": row}
    for name, s in out["sets"].items():
        row = s["bytes_per_copy"]
        best = min(row, key=row.__getitem__)
        print(f"link_dict[{name}]: {row['zstd-9+shipped'] / row['zstd-9']:.2f}x the bytes per copy with the shipped "
              f"dictionary against the per-link context alone, both zstd-9 ({row['zstd-9+shipped']:.1f} against "
              f"{row['zstd-9']:.1f} B; none {row['none']:.1f} B; best {best} {row[best]:.1f} B; {s['lines']} lines)")
        print("  " + ", ".join(f"{k} {v:.1f}" for k, v in row.items()))
    print(f"link_dict: results in {write_result('link_dict' + ('_quick' if a.quick else ''), out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
