"""The browser's copies of the label rules (web_ui/static/js/labels.js) agree with their Python homes.

The rule for what may be sent has one home, contracts.labels (``Scheme.sendable``, ``Scheme.parse``), and the
banner colours have their Python home in chat_tui/labels.py; the browser keeps a copy of each. This test runs
the copies in Node.js over many clearances, floors, spellings and levels and requires the same answers (as
test_web_order_keys.py does for order.js). The page itself: tests/web_ui/test_web_rooms.py.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess

import pytest
from web_harness import REPO

from chat_tui.labels import LEVEL_COLOURS, RANK_COLOURS, UNKNOWN_COLOUR, level_colours
from contracts.labels import Label, LabelError, Scheme

SCRIPT = """
import * as l from "./web_ui/static/js/labels.js";
import { readFileSync } from "node:fs";
const p = JSON.parse(readFileSync(0, "utf8"));
const scheme = l.schemeOf({ labels: p.labels, clearance: p.labels.default });
const lab = (j) => l.labelOf(scheme, j);
const out = {
  LEVEL_COLOURS: l.LEVEL_COLOURS, RANK_COLOURS: l.RANK_COLOURS, UNKNOWN_COLOUR: l.UNKNOWN_COLOUR,
  colours: p.levels.map(([lv, rank, count]) => { const c = l.levelColours(lv, rank, count); return [c.bg, c.fg]; }),
  sendable: p.pairs.map(([c, f]) => l.sendable(scheme, lab(c), lab(f)).map(l.labelText)),
  parsed: p.texts.map((t) => { const r = l.parseLabel(scheme, t); return r.ok ? l.labelText(r.label) : null; }),
};
process.stdout.write(JSON.stringify(out));
"""
LEVELS = ["UNCLASSIFIED", "RESTRICTED", "CONFIDENTIAL", "SECRET", "TOP SECRET"]
CAVEATS = ["AUS", "CAN", "GBR", "NZL", "USA", "FRA", "DEU", "POL"]


def test_labels_js_agrees_with_contracts_labels_and_the_tui_colours() -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: comparing labels.js with contracts.labels needs `node`")
    scheme = Scheme.build(LEVELS, CAVEATS)
    rng = random.Random(38)

    def draw() -> Label:
        return scheme.label(rng.choice(LEVELS), rng.sample(CAVEATS, rng.randrange(len(CAVEATS) + 1)))
    pairs = [(draw(), draw()) for _ in range(300)]
    pairs += [(c, Label(f.level, f.rank, c.caveats & f.caveats)) for c, f in pairs[:100]]     # more that dominate
    texts = ["SECRET", "secret//rel to gbr, usa", "TOP SECRET//USA/GBR", "SECRET//", "COSMIC", "SECRET//XYZ",
             "CONFIDENTIAL//REL TO  AUS ,CAN", " restricted ", "SECRET//REL TO"]
    levels = [(lv, r, n) for n in (1, 2, 3, 5, 9) for r in range(n) for lv in (f"L{r}", "SECRET", "CUI")]
    levels += [("X", -1, 4), ("X", 0, 0)]
    probes = {"labels": {"levels": LEVELS, "caveats": CAVEATS, "default": "UNCLASSIFIED"},
              "pairs": [[c.to_json(), f.to_json()] for c, f in pairs], "texts": texts, "levels": levels}
    r = subprocess.run([node, "--input-type=module", "-e", SCRIPT], cwd=REPO, input=json.dumps(probes),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    js = json.loads(r.stdout)
    assert (js["LEVEL_COLOURS"], tuple(js["RANK_COLOURS"]), js["UNKNOWN_COLOUR"]) == \
        (LEVEL_COLOURS, RANK_COLOURS, UNKNOWN_COLOUR)
    assert [tuple(c) for c in js["colours"]] == [level_colours(*x) for x in levels]
    assert js["sendable"] == [[str(x) for x in scheme.sendable(c, f)] for c, f in pairs]
    assert sum(1 for s in js["sendable"] if s) > 50                  # the draw reaches rooms one may write in

    def parse(t: str) -> str | None:
        try:
            return str(scheme.parse(t))
        except LabelError:
            return None
    assert js["parsed"] == [parse(t) for t in texts]
