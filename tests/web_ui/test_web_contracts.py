"""The browser's copies of contracts (web_ui/static/js/precedence.js, status.js) equal contracts.precedence and
contracts.status, value for value; positions.js takes the unit names the chat server takes; expiry.js takes the
``expires_in`` the chat server takes.

The levels and the statuses have one home each, contracts/; the browser keeps a
copy in JavaScript. This test imports the copies in Node.js (as
test_web_order_keys.py does for order.js) and compares every exported name and
what the copies' functions make of good and bad input with the Python home; the
page's precedence menu and its status styles are read from the static files.
"""
from __future__ import annotations

import json
import re
import shutil
import subprocess
from typing import Any

import pytest
from web_harness import REPO

from chat_server.protocol import EXPIRES_IN_MAX, EXPIRES_IN_MIN, UNIT_NAME, FrameError, parse_client_frame
from contracts.precedence import DEFAULT, PRECEDENCES, URGENT, Precedence
from contracts.status import REPORTED, LinkStatus

STATIC = REPO / "web_ui" / "static"
ODD = ["", "FLASH", "Routine", " routine", "urgent", "up", "x" * 300]      # words no level or status has
SCRIPT = """
import * as p from "./web_ui/static/js/precedence.js";
import * as s from "./web_ui/static/js/status.js";
import * as pos from "./web_ui/static/js/positions.js";
import * as x from "./web_ui/static/js/expiry.js";
import { readFileSync } from "node:fs";
const probes = JSON.parse(readFileSync(0, "utf8"));
const out = {
  PRECEDENCES: p.PRECEDENCES, URGENT: p.URGENT, DEFAULT: p.DEFAULT, RAISED: p.RAISED, ASKS_ACK: [...p.ASKS_ACK],
  REPEAT_MS: Object.keys(p.REPEAT_MS),
  precedenceOf: probes.map((x) => p.precedenceOf({ precedence: x })),
  precedenceOfAbsent: p.precedenceOf({}),
  STATUSES: s.STATUSES, REPORTED: s.REPORTED, UNKNOWN: s.UNKNOWN,
  named: [s.CONNECTED, s.SUSPECTED, s.DISCONNECTED, s.UNKNOWN],
  statusOf: probes.map((x) => s.statusOf(x)),
  statusOfAbsent: s.statusOf(undefined),
  unitTaken: probes.map((x) => typeof x === "string" && pos.parseReport({ lat: "0", lon: "0", unit: x }).ok),
  EXPIRES_IN: [x.EXPIRES_IN_MIN, x.EXPIRES_IN_MAX],
  expiresInTaken: probes.map((v) => x.validExpiresIn(v) !== null),
};
process.stdout.write(JSON.stringify(out));
"""


def js_copies(probes: list[Any]) -> dict[str, Any]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: comparing the JS copies with contracts needs `node`")
    r = subprocess.run([node, "--input-type=module", "-e", SCRIPT], cwd=REPO, input=json.dumps(probes),
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr[-2000:]
    out: dict[str, Any] = json.loads(r.stdout)
    return out


def test_precedence_js_is_contracts_precedence() -> None:
    probes: list[Any] = [*PRECEDENCES, *ODD, 0, 3, None, True, ["flash"]]
    js = js_copies(probes)
    assert js["PRECEDENCES"] == list(PRECEDENCES)
    assert js["PRECEDENCES"] == [Precedence.of_code(code).value for code in range(len(Precedence))]   # index = code
    assert js["URGENT"] == list(URGENT) == js["ASKS_ACK"] == js["REPEAT_MS"]
    assert js["DEFAULT"] == DEFAULT == js["precedenceOfAbsent"]
    assert js["RAISED"] == [p.value for p in Precedence if p is not Precedence.ROUTINE]
    assert js["precedenceOf"] == [x if isinstance(x, str) and x in PRECEDENCES else DEFAULT for x in probes]


def test_status_js_is_contracts_status() -> None:
    probes: list[Any] = [*(s.value for s in LinkStatus), *ODD, 0, None, ["connected"]]
    js = js_copies(probes)
    assert js["STATUSES"] == [s.value for s in LinkStatus] == js["named"]
    assert js["REPORTED"] == list(REPORTED)
    assert js["UNKNOWN"] == LinkStatus.UNKNOWN.value == js["statusOfAbsent"]
    assert js["statusOf"] == [LinkStatus.parse(x).value for x in probes]


def test_the_page_offers_every_level_and_styles_every_status_and_raised_level() -> None:
    """The composer's menu (index.html) lists the levels, lowest first; style.css colours each status (the
    muted "unknown" too) and badges each level above routine."""
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    menu = re.search(r'<select id="precedence".*?</select>', html, re.S)
    assert menu is not None
    assert re.findall(r'<option value="([^"]+)"', menu.group(0)) == list(reversed(PRECEDENCES))
    css = (STATIC / "style.css").read_text(encoding="utf-8")
    for status in LinkStatus:
        assert f".status-{status.value} .mark" in css
    for level in Precedence:
        assert (f".prec-badge.prec-{level.value}" in css) == (level is not Precedence.ROUTINE)


def test_the_report_form_takes_the_unit_names_the_chat_server_takes() -> None:
    """positions.js's copy of chat_server.protocol.UNIT_NAME: the form refuses, with its own words, exactly the
    callsigns the server would refuse (a blank unit is no unit: the server reports the user)."""
    probes: list[Any] = ["a", "Bravo 2-1", "TAK-7#a:b+c.d_e", "x" * 32, "x" * 33, "a ", "-a", "a b", "a  b", "ünit",
                         "a\nb", "a/b", "9", "a" + " " * 30 + "b", "a" + " " * 31 + "b", "_a", "a_", *ODD]
    js = js_copies(probes)
    assert js["unitTaken"] == [not x.strip() or bool(UNIT_NAME.match(x.strip())) for x in probes]


def test_the_page_takes_the_expiries_the_chat_server_takes() -> None:
    """expiry.js's bounds are chat_server.protocol's: a number of seconds the page sends is one the server takes;
    the composer's menu offers only those."""
    probes: list[Any] = [0, 0.5, 1, 60, 3600.5, EXPIRES_IN_MAX, EXPIRES_IN_MAX + 1, -1, "60", None, True, [60]]
    js = js_copies(probes)
    assert js["EXPIRES_IN"] == [EXPIRES_IN_MIN, EXPIRES_IN_MAX]

    def server_takes(v: Any) -> bool:
        try:
            parse_client_frame(json.dumps({"type": "say", "room": "r", "text": "t", "client_id": "c", "expires_in": v}),
                               100)
        except FrameError:
            return False
        return v is not None            # (null is "absent": no expiry)
    assert js["expiresInTaken"] == [server_takes(v) for v in probes]
    html = (STATIC / "index.html").read_text(encoding="utf-8")
    menu = re.search(r'<select id="expires-in".*?</select>', html, re.S)
    assert menu is not None
    offered = re.findall(r'<option value="([^"]*)"', menu.group(0))
    assert offered[0] == "" and all(server_takes(int(v)) for v in offered[1:])
