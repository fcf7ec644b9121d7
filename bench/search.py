"""Search over a site's history: FTS5 query latency at 1,000,000 messages, and the index's size.

A site database (chat_server.store.ChatStore, the real schema and triggers) is
filled with synthetic operations chat: 50 rooms (10 of them private and hidden
from the searching user), 200 users, words drawn from a Zipf-like vocabulary
with grid references and times. Then 100 queries of mixed kinds run as the
chat server runs them (``ChatStore.search``: ranked, highlighted, private rooms
excluded): common and rare words, phrases, prefixes, and each narrowed by
room, user or time. The same queries' plain words, answered by a full scan
(``LIKE``, no index, every match found as ranking needs) on a sample, give the
ratio printed first.

    .venv/bin/python bench/search.py                 # 1,000,000 messages (about two minutes to build)
    .venv/bin/python bench/search.py --quick         # 20,000 messages, a few seconds

Target: p95 at most 100 ms at 1,000,000 messages.
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from chat_server.store import ChatStore  # noqa: E402
from ordering.keys import sortable_key  # noqa: E402

ROOMS = [f"room{i:02d}" for i in range(50)]
HIDDEN = ROOMS[:10]                     # private rooms the searching user is not in
USERS = [f"user{i:03d}" for i in range(200)]
WORDS = ("grid tanker station convoy medevac ready confirm abort hold fuel north south east west bravo charlie "
         "delta echo foxtrot sierra tango whiskey yankee zulu relay status report eta launch recovery casualty "
         "priority weather ceiling visibility winds runway approach departure orbit track contact").split()
RARE = [f"callsign{i}" for i in range(2000)]


def text(rng: random.Random) -> str:
    words = []
    for _ in range(rng.randint(4, 16)):
        r = rng.random()
        if r < 0.05:
            words.append(rng.choice(RARE))
        elif r < 0.12:
            words.append(f"{rng.randint(0, 2359):04d}")
        else:
            words.append(WORDS[min(int(rng.paretovariate(1.2)) - 1, len(WORDS) - 1)])
    return " ".join(words)


def build(store: ChatStore, n: int, seed: int) -> float:
    """Fill the database; the seconds it took."""
    rng = random.Random(seed)
    t0 = time.perf_counter()
    start = 1_764_000_000.0
    batch = []
    store.begin()
    for i in range(1, n + 1):
        order = [i, "A"]
        batch.append((f"A:{i}", i, rng.choice(ROOMS), "A", i, rng.choice(USERS), text(rng), start + i * 0.5,
                      json.dumps(order), sortable_key(order), 0, start + i * 0.5 + 0.2))
        if len(batch) == 10_000:
            store.db.executemany("INSERT INTO messages (msg_id, n, room, origin, seq, user, text, sent_at, order_json, "
                                 "order_key, late, delivered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", batch)
            batch = []
    if batch:
        store.db.executemany("INSERT INTO messages (msg_id, n, room, origin, seq, user, text, sent_at, order_json, "
                             "order_key, late, delivered_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", batch)
    store.commit()
    return time.perf_counter() - t0


def queries(rng: random.Random, n_messages: int) -> list[dict]:
    start = 1_764_000_000.0
    span = n_messages * 0.5
    kinds = []
    for i in range(100):
        k = i % 10
        q: dict = {}
        if k in (0, 1):
            q["query"] = rng.choice(WORDS[:10])                               # common word
        elif k in (2, 3):
            q["query"] = rng.choice(RARE)                                     # rare word
        elif k == 4:
            a = rng.randrange(len(WORDS) - 1)
            q["query"] = f'"{WORDS[a]} {WORDS[a + 1]}"'                       # phrase
        elif k == 5:
            q["query"] = rng.choice(WORDS)[:3] + "*"                          # prefix
        elif k == 6:
            q["query"], q["room"] = rng.choice(WORDS[:20]), rng.choice(ROOMS[10:])
        elif k == 7:
            q["query"], q["user"] = rng.choice(WORDS[:20]), rng.choice(USERS)
        elif k == 8:
            t = start + rng.random() * span
            q["query"], q["since"], q["until"] = rng.choice(WORDS[:20]), t, t + 3600
        else:
            q["query"] = f"{rng.choice(WORDS[:10])} {rng.choice(WORDS[10:30])}"   # two words
        kinds.append(q)
    return kinds


def pct(xs: list[float], p: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="20,000 messages: a smoke run in seconds")
    ap.add_argument("--seed", type=int, default=21)
    ap.add_argument("--scan-sample", type=int, default=10, help="queries also answered by a full LIKE scan")
    args = ap.parse_args()
    n = 20_000 if args.quick else args.messages
    with tempfile.TemporaryDirectory() as tmp:
        store = ChatStore(Path(tmp) / "chat.db")
        build_s = build(store, n, args.seed)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = sum(f.stat().st_size for f in Path(tmp).iterdir())
        fts_pages = store.db.execute("SELECT COUNT(*) FROM messages_fts_data").fetchone()[0]
        page = store.db.execute("PRAGMA page_size").fetchone()[0]
        qs = queries(random.Random(args.seed), n)
        store.search("warmup", hidden_rooms=HIDDEN)
        lat, hits = [], []
        for q in qs:
            t0 = time.perf_counter()
            found = store.search(q["query"], hidden_rooms=HIDDEN, room=q.get("room"), user=q.get("user"),
                                 since=q.get("since"), until=q.get("until"), limit=20)
            lat.append((time.perf_counter() - t0) * 1000)
            hits.append(len(found))
            assert not [m for m, _ in found if m.room in HIDDEN], "a hidden room's message was returned"
        scan, fts_same = [], []
        for q, ms in list(zip(qs, lat))[:args.scan_sample]:
            word = q["query"].strip('"*').split()[0]
            t0 = time.perf_counter()
            store.db.execute("SELECT COUNT(*) FROM messages WHERE text LIKE ? AND room NOT IN "
                             f"({','.join('?' * len(HIDDEN))})", (f"%{word}%", *HIDDEN)).fetchall()
            scan.append((time.perf_counter() - t0) * 1000)
            fts_same.append(ms)
        store.close()
    ratio = statistics.median(scan) / max(statistics.median(fts_same), 1e-6)
    result = {"messages": n, "build_s": round(build_s, 1), "db_bytes": size, "fts_bytes": fts_pages * page,
              "p50_ms": round(pct(lat, 50), 2), "p95_ms": round(pct(lat, 95), 2), "max_ms": round(max(lat), 2),
              "scan_over_fts_median": round(ratio, 1), "hits_median": statistics.median(hits),
              "load_avg": os.getloadavg()[0]}
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / ("search-quick.json" if args.quick else "search.json")).write_text(json.dumps(result, indent=1))
    print(f"search: a LIKE scan takes {ratio:.1f}x the FTS5 query (median, same {len(scan)} queries); "
          f"{n:,} messages: p50 {result['p50_ms']} ms, p95 {result['p95_ms']} ms (target <= 100), "
          f"max {result['max_ms']} ms; database {size / 1e6:.0f} MB, of it the index about "
          f"{result['fts_bytes'] / 1e6:.0f} MB; built in {build_s:.0f} s (load avg {result['load_avg']:.1f})")


if __name__ == "__main__":
    main()
