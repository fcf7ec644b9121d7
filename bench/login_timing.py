"""Login timing: does a failed login take as long for an unknown user as for a wrong password?

The chat server's login check (``chat_server.logins.Logins``, as ``hello`` calls it: limiter, database
lookup, scrypt in its own pool) is timed in one process for interleaved attempts of three kinds:

* ``wrong``: an existing user, a wrong password;
* ``unknown``: a user name that does not exist (checked against a dummy hash of the same cost);
* ``right``: the right password (a successful login, for scale).

The login limiter runs on a clock that moves an hour per attempt, so no attempt is slowed down by the
ones before it. The summary leads with the ratio of the median times unknown/wrong (1.00 means an
attacker cannot tell them apart by the median); then the difference of the medians against the
spread (interquartile range) of the wrong-password times, and the absolute figures. Also timed: token
resume for an unknown user and for a known user with a wrong token. Statistics, not a test: see the
closing note of issue 23 for what was measured.

    .venv/bin/python bench/login_timing.py                  # 400 samples per kind, kdf_n = 2^14 (default)
    .venv/bin/python bench/login_timing.py --quick          # 60 samples, kdf_n = 2^10 (a few seconds)
"""
from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench._common import percentile, write_result  # noqa: E402
from chat_server.accounts import hash_password  # noqa: E402
from chat_server.config import ChatSettings  # noqa: E402
from chat_server.logins import Logins  # noqa: E402
from chat_server.protocol import Refusal  # noqa: E402
from chat_server.store import ChatStore  # noqa: E402

PASSWORD = "correct horse battery"


def stats(xs: list[float]) -> dict[str, float]:
    return {"n": len(xs), "median_ms": 1000 * statistics.median(xs), "p10_ms": 1000 * percentile(xs, 10),
            "p90_ms": 1000 * percentile(xs, 90),
            "iqr_ms": 1000 * (percentile(xs, 75) - percentile(xs, 25))}


async def run(samples: int, kdf_n: int, seed: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="login-timing-") as d:
        store = ChatStore(Path(d) / "chat.db")
        for i in range(50):
            store.add_user(f"user{i}", hash_password(PASSWORD, kdf_n))
        clock = [0.0]

        def tick() -> float:            # an hour per attempt: the limiter never slows one down
            clock[0] += 3600.0
            return clock[0]
        logins = Logins(ChatSettings(kdf_n=kdf_n), store, time.time, tick)
        rng = random.Random(seed)
        times: dict[str, list[float]] = {"wrong": [], "unknown": [], "right": [], "token_unknown": [],
                                         "token_wrong": []}
        kinds = [k for k in times for _ in range(samples)]
        rng.shuffle(kinds)
        for _ in range(5):               # warm the pool and caches
            await logins.with_password("user0", PASSWORD, "10.9.9.9")
        for i, kind in enumerate(kinds):
            user = f"user{rng.randrange(50)}" if kind != "unknown" and kind != "token_unknown" \
                else f"nobody{rng.randrange(10**6)}"
            address = f"10.{i >> 16 & 255}.{i >> 8 & 255}.{i & 255}"
            t0 = time.perf_counter()
            try:
                if kind.startswith("token"):
                    logins.with_token(user, "x" * 43, address)
                else:
                    await logins.with_password(user, PASSWORD if kind == "right" else "wrong guess", address)
            except Refusal as e:
                assert e.code == "auth_failed", e.message
            times[kind].append(time.perf_counter() - t0)
        logins.close()
        store.close()
    s = {k: stats(v) for k, v in times.items()}
    ratio = s["unknown"]["median_ms"] / s["wrong"]["median_ms"]
    diff = s["unknown"]["median_ms"] - s["wrong"]["median_ms"]
    return {"samples_per_kind": samples, "kdf_n": kdf_n, "seed": seed, "times": s,
            "ratio_unknown_over_wrong": ratio, "median_difference_ms": diff,
            "median_difference_over_iqr": diff / s["wrong"]["iqr_ms"] if s["wrong"]["iqr_ms"] else float("nan"),
            "ratio_token_unknown_over_wrong": s["token_unknown"]["median_ms"] / s["token_wrong"]["median_ms"]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=400, help="attempts of each kind")
    ap.add_argument("--kdf-n", type=int, default=1 << 14, help="scrypt cost (the [chat] kdf_n default: 16384)")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--quick", action="store_true", help="60 samples per kind at kdf_n = 1024 (seconds)")
    a = ap.parse_args()
    if a.quick:
        a.samples, a.kdf_n = 60, 1024
    r = asyncio.run(run(a.samples, a.kdf_n, a.seed))
    path = write_result("login_timing_quick" if a.quick else "login_timing", r)
    t = r["times"]
    print(f"login_timing: unknown-user/wrong-password median ratio {r['ratio_unknown_over_wrong']:.3f} "
          f"(difference {r['median_difference_ms']:+.3f} ms = {r['median_difference_over_iqr']:+.2f} x the "
          f"wrong-password IQR; token resume unknown/wrong {r['ratio_token_unknown_over_wrong']:.3f}); "
          f"medians: wrong {t['wrong']['median_ms']:.2f} ms, unknown {t['unknown']['median_ms']:.2f} ms, "
          f"right {t['right']['median_ms']:.2f} ms; {a.samples} samples each, kdf_n {a.kdf_n} -> {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
