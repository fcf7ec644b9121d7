"""Shared by bench/fuzz_*.py: run a fuzz target with atheris when it is installed, or (``--quick``, or no
atheris) over seeded random inputs with a pure-Python stand-in for ``atheris.FuzzedDataProvider``.

The stand-in implements the provider methods the targets use, consuming the input bytes from the front.
Inputs are drawn from one ``random.Random(seed)``: the same seed gives the same inputs, and a failure
prints the seed and the input's index so it can be replayed (``--seed S --inputs N``).
"""
from __future__ import annotations

import argparse
import random
import struct
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

try:  # the optional extra: pip install -e '.[fuzz]'
    import atheris as atheris  # re-exported: bench/fuzz_*.py import it from here
except ImportError:  # pragma: no cover - depends on the machine
    atheris = None


class RandomDataProvider:
    """The subset of ``atheris.FuzzedDataProvider`` the fuzz targets use, over a bytes object."""

    def __init__(self, data: bytes) -> None:
        self._data = data
        self._pos = 0

    def remaining_bytes(self) -> int:
        return len(self._data) - self._pos

    def _take(self, n: int) -> bytes:
        out = self._data[self._pos:self._pos + n]
        self._pos += len(out)
        return out

    def ConsumeBytes(self, count: int) -> bytes:  # noqa: N802 - atheris' names
        return self._take(max(0, count))

    def ConsumeIntInRange(self, lo: int, hi: int) -> int:  # noqa: N802
        span = hi - lo
        if span <= 0:
            return lo
        raw = self._take((span.bit_length() + 7) // 8)
        return lo + int.from_bytes(raw.ljust((span.bit_length() + 7) // 8, b"\0"), "little") % (span + 1)

    def ConsumeInt(self, nbytes: int) -> int:  # noqa: N802
        raw = self._take(nbytes).ljust(nbytes, b"\0")
        return int.from_bytes(raw, "little", signed=True)

    def ConsumeBool(self) -> bool:  # noqa: N802
        return bool(self.ConsumeIntInRange(0, 1))

    def ConsumeRegularFloat(self) -> float:  # noqa: N802
        raw = self._take(8).ljust(8, b"\0")
        v = struct.unpack("<d", raw)[0]
        return v if v == v and abs(v) != float("inf") else 0.0

    def ConsumeUnicode(self, count: int) -> str:  # noqa: N802
        kind = self.ConsumeIntInRange(0, 2)
        if kind == 0:                                   # ASCII
            return bytes(b & 0x7F for b in self._take(count)).decode("ascii")
        if kind == 1:                                   # UTF-16-ish: any BMP code point, lone surrogates too
            raw = self._take(2 * count)
            return "".join(chr(int.from_bytes(raw[i:i + 2].ljust(2, b"\0"), "little"))
                           for i in range(0, len(raw), 2))
        raw = self._take(4 * count)                     # any code point
        return "".join(chr(int.from_bytes(raw[i:i + 4].ljust(4, b"\0"), "little") % 0x110000)
                       for i in range(0, len(raw), 4))

    def PickValueInList(self, values: Sequence[Any]) -> Any:  # noqa: N802
        return values[self.ConsumeIntInRange(0, len(values) - 1)]


def random_inputs(seed: int, count: int, max_len: int) -> Iterator[bytes]:
    rng = random.Random(seed)
    for _ in range(count):
        n = min(max_len, int(rng.expovariate(1 / 256)))     # mostly short inputs, now and then long ones
        yield rng.randbytes(n)


def main(name: str, target: Callable[[Any], None], describe: str, tally: Callable[[], str] | None = None) -> int:
    """``--quick`` (or no atheris): seeded random inputs; otherwise libFuzzer's arguments go to atheris."""
    ap = argparse.ArgumentParser(prog=f"bench/{name}.py", description=describe, add_help=False)
    ap.add_argument("--quick", action="store_true", help="a few thousand seeded random inputs, no atheris")
    ap.add_argument("--inputs", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--max-len", type=int, default=4096)
    ap.add_argument("-h", "--help", action="store_true")
    a, rest = ap.parse_known_args()
    if a.help:
        ap.print_help()
        print("\nWithout --quick, with atheris installed (.venv/bin/pip install -e '.[fuzz]'), libFuzzer "
              "arguments such as -runs=1000000 -max_len=4096 run a coverage-guided session.")
        return 0
    if not a.quick and atheris is not None:
        atheris.Setup([sys.argv[0], *rest], lambda data: target(atheris.FuzzedDataProvider(data)))
        atheris.Fuzz()
        return 0
    if not a.quick:
        print(f"{name}: atheris is not installed (.venv/bin/pip install -e '.[fuzz]'); running the seeded "
              "random quick mode instead", file=sys.stderr)
    t0 = time.perf_counter()
    for i, data in enumerate(random_inputs(a.seed, a.inputs, a.max_len)):
        try:
            target(RandomDataProvider(data))
        except Exception:
            print(f"{name}: CRASH on input {i} of seed {a.seed} ({len(data)} bytes: {data[:64].hex()}...); "
                  f"replay: bench/{name}.py --quick --seed {a.seed} --inputs {i + 1}", file=sys.stderr)
            raise
    elapsed = time.perf_counter() - t0
    extra = f"; {tally()}" if tally is not None else ""
    print(f"{name}: 0 crashes in {a.inputs} seeded random inputs (seed {a.seed}, no coverage guidance){extra}; "
          f"{a.inputs / elapsed:,.0f} inputs/s, {elapsed:.2f} s")
    return 0
