"""The browser's copy of the order-key comparison (web_ui/static/js/order.js) sorts as ordering.keys does.

The order key has one home, ordering/keys.py; the browser keeps a copy in
JavaScript to place late messages. This test draws keys of every shape the
ordering protocols make (and some they don't: prefixes, names of any code
point), sorts them in Python by ``sortable_key`` and in Node.js by
``compareOrder``, and requires the same order.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest
from web_harness import REPO

from ordering.keys import KEY_INT_MAX, key_problem, sortable_key

SCRIPT = """
import { compareOrder } from "./web_ui/static/js/order.js";
import { readFileSync } from "node:fs";
const keys = JSON.parse(readFileSync(0, "utf8"));
const idx = keys.map((_, i) => i).sort((a, b) => compareOrder(keys[a], keys[b]) || a - b);
process.stdout.write(JSON.stringify(idx));
"""


def random_keys(n: int, seed: int) -> list[list]:
    rng = random.Random(seed)
    names = ["A", "B", "awacs", "ground1", "Site_9", "x.y-z", "Z" * 32, "é", "\U0001F600", "\uffff", "a\u0301"]
    shapes = [(int, str), (int,), (int, int, str), (str, int), (int, str, int, str), (int, int), (str,)]
    out = []
    for _ in range(n):
        shape = rng.choice(shapes)
        out.append([rng.choice([0, 1, 9, 10, 99, 100, 2**31, 2**53 - 1, KEY_INT_MAX, rng.randrange(10**6)])
                    if t is int else rng.choice(names) for t in shape])
    return out


def test_order_js_sorts_as_ordering_keys() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: comparing order.js with ordering.keys needs `node`")
    keys = random_keys(3000, seed=2026)
    assert all(key_problem(k) is None for k in keys)
    # Keys of one protocol have the same type at each place; in a mix, numbers sort before names in both.
    python = sorted(range(len(keys)), key=lambda i: (sortable_key(keys[i]), i))
    r = subprocess.run([node, "--input-type=module", "-e", SCRIPT], cwd=REPO, input=json.dumps(keys),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    js = json.loads(r.stdout)
    assert [keys[i] for i in js] == [keys[i] for i in python]
