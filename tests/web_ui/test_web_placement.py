"""Client-side placement and notices, driven by a scripted protocol-v1 server.

The real-sites tests (test_web_sites.py) show a late message produced by a real
link cut; here the frames are written by hand so that exact positions can be
checked: late messages between given neighbours, duplicates, missing notices,
status changes, and the order-key comparison itself.
"""
from __future__ import annotations

import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, expect
from testkit import wait_until_sync
from web_harness import STATIC, LoopThread, ScriptedServer, Watched, join, login, new_page, say, shot


def msg(order: list[Any], text: str, *, late: bool = False, origin: str | None = None, user: str = "ops1",
        n: int = 0) -> dict[str, Any]:
    origin = origin or str(order[1])
    return {"type": "message", "room": "ops", "msg_id": f"{origin}:{order[0]}", "origin": origin, "user": user,
            "text": text, "sent_at": 1_800_000_000 + order[0], "order": order, "late": late, "n": n}


@pytest.fixture(scope="module")
def scripted(loop_thread: LoopThread) -> Iterator[ScriptedServer]:
    srv = ScriptedServer(loop_thread)
    srv.history["ops"] = [msg([1, "A"], "one"), msg([3, "A"], "three"), msg([5, "B"], "five")]
    srv.start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def olga(browser: Browser, scripted: ScriptedServer) -> Iterator[Watched]:
    w = new_page(browser)
    login(w, scripted.url, "olga")
    join(w, "ops")
    yield w
    w.check()
    w.page.context.close()


def texts(w: Watched) -> list[str]:
    return w.page.eval_on_selector_all("#message-list li.msg[data-msg-id] .text", "els => els.map(e => e.textContent)")


def test_late_messages_are_placed_by_order_key_and_marked(scripted: ScriptedServer, olga: Watched) -> None:
    expect(olga.page.locator("#message-list li.msg")).to_have_count(3)
    scripted.push(msg([6, "A"], "six", n=1))
    scripted.push(msg([4, "C"], "four, late from C", late=True, n=2))
    scripted.push(msg([2, "B"], "two, late from B", late=True, n=3))
    scripted.push(msg([4, "C"], "four, late from C", late=True, n=2))         # a replay: shown once
    wait_until_sync(lambda: len(texts(olga)) == 6, "six messages", timeout=10)
    assert texts(olga) == ["one", "two, late from B", "three", "four, late from C", "five", "six"]
    late = olga.page.locator("#message-list li.msg[data-late='true']")
    expect(late).to_have_count(2)
    expect(late.locator(".late-badge")).to_have_text([re.compile(r"^late \+\d+s$")] * 2)   # how late: arrival - sent
    expect(olga.page.locator("#message-list li.msg[data-late='false'] .late-badge")).to_have_count(0)
    expect(olga.page.locator("#announce")).to_contain_text("Late message from ops1@B")
    # Equal timestamps: the origin breaks the tie, as in the global order.
    scripted.push(msg([6, "0"], "six from site 0", origin="0", n=4))
    wait_until_sync(lambda: len(texts(olga)) == 7, "seven messages", timeout=10)
    assert texts(olga)[-2:] == ["six from site 0", "six"]
    shot(olga, "scripted-late-placement")


def test_missing_notice_status_change_and_skipped(scripted: ScriptedServer, olga: Watched) -> None:
    page = olga.page
    scripted.push({"type": "site_status", "site": "C", "status": "disconnected"})
    expect(page.locator("#site-strip [data-site='C']")).to_have_attribute("data-status", "disconnected")
    expect(page.locator("#site-strip [data-site='C']")).to_contain_text("disconnected")
    scripted.push({"type": "missing", "origin": "C", "count": 2, "seqs": [7, 8]})
    notice = page.locator("#message-list li.notice.missing")
    expect(notice).to_have_text(re.compile(r"2 messages from site C were lost"))
    # The notice sits after the last message that was shown when it came.
    last_two = page.eval_on_selector_all("#message-list > li", "els => els.slice(-2).map(e => e.className)")
    assert last_two[0].startswith("msg") and "missing" in last_two[1]
    # An own message: pending until delivered, then in its place with receipts and skipped sites.
    say(olga, "from olga")
    wait_until_sync(lambda: any(f.get("type") == "say" for f in scripted.received), "the say frame", timeout=10)
    frame = [f for f in scripted.received if f.get("type") == "say"][-1]
    assert frame["room"] == "ops" and frame["text"] == "from olga" and len(frame["client_id"]) >= 16
    expect(page.locator("li.pending")).to_have_text(re.compile("from olga.*sending"))
    scripted.push({"type": "ack", "client_id": frame["client_id"], "msg_id": "A:9", "skipped": ["C"],
                   "id": frame["id"]})
    expect(page.locator("li.pending")).to_have_text(re.compile("accepted"))
    scripted.push({**msg([9, "A"], "from olga", user="olga", n=5)})
    scripted.push({"type": "receipt", "msg_id": "A:9", "site": "A"})
    scripted.push({"type": "receipt", "msg_id": "A:9", "site": "B"})
    mine = page.locator("#message-list li.msg[data-msg-id='A:9']")
    expect(mine.locator(".receipts")).to_have_attribute("data-receipts", "A,B")
    expect(mine.locator(".skipped")).to_contain_text("not sent to C")
    expect(page.locator("li.pending")).to_have_count(0)
    hello = next(f for f in scripted.received if f.get("type") == "hello")
    assert set(hello) == {"type", "user", "password", "id"}
    shot(olga, "scripted-missing-receipts")


def test_repair_and_relays_a_recovered_message_in_place_and_a_site_connected_via_another(
        scripted: ScriptedServer, olga: Watched) -> None:
    page = olga.page
    # Relaying (issue 17): C's direct link is down, B carries it.
    scripted.push({"type": "site_status", "site": "C", "status": "connected", "via": "B"})
    pill = page.locator("#site-strip [data-site='C']")
    expect(pill).to_contain_text("connected via B")
    expect(pill).to_have_attribute("title", re.compile("through B"))
    scripted.push({"type": "missing", "origin": "C", "count": 2, "ranges": [[7, 8]]})
    # Repair (issue 18): one of them comes back, late and repaired, at its original place.
    scripted.push({**msg([4, "C"], "back from the cut", late=True, n=6), "msg_id": "C:7", "repaired": True})
    back = page.locator("#message-list li.msg[data-msg-id='C:7']")
    expect(back.locator(".repaired-badge")).to_have_text("repaired")
    order = texts(olga)
    assert order.index("back from the cut") < order.index("five")              # in its place, not at the end
    scripted.push({"type": "missing", "origin": "C", "count": 1, "ranges": [[8, 8]], "recovered": 1})
    expect(page.locator("#message-list li.notice.partly")).to_have_text(         # in place of the red notice
        "Recovered 1 message from site C, shown in place, marked repaired; up to 1 message still missing.")
    expect(page.locator("#message-list li.notice.missing")).to_have_count(0)
    shot(olga, "scripted-repaired-relayed")


def test_a_site_no_status_was_reported_for_is_unknown_in_muted_grey_as_in_the_terminal(
        scripted: ScriptedServer, olga: Watched) -> None:
    """contracts.status: a site the client has no status for (here, one only a presence frame named), or one
    reported by a word the client does not know, shows "unknown", muted, as chat_tui's ``.site.unknown``."""
    page = olga.page
    scripted.push({"type": "presence", "site": "D", "online": ["dora"], "offline": []})
    dora = page.locator("#presence-list [data-user='dora@D']")
    expect(dora).to_have_class(re.compile(r"\bstatus-unknown\b"))
    expect(dora).to_have_attribute("title", "dora at site D (unknown)")
    scripted.push({"type": "site_status", "site": "C", "status": "up"})
    pill = page.locator("#site-strip [data-site='C']")
    expect(pill).to_have_attribute("data-status", "unknown")
    expect(pill.locator(".site-status")).to_have_text("unknown")
    muted = page.locator("#site-strip [data-site='A'] .here")          # "(here)": the page's muted colour
    colour = "el => getComputedStyle(el).color"
    assert pill.locator(".site-status").evaluate(colour) == muted.evaluate(colour) == \
        pill.locator(".mark").evaluate(colour)
    scripted.push({"type": "site_status", "site": "C", "status": "connected"})
    expect(pill).to_have_attribute("data-status", "connected")
    # RCM reaches C, C's chat server is gone (its will came): said on the pill, in the warning colour, until back.
    scripted.push({"type": "site_status", "site": "C", "status": "connected", "chat_down": True})
    expect(pill).to_have_class(re.compile(r"\bchat-down\b"))
    expect(pill.locator(".site-status")).to_have_text("connected, chat server down")
    expect(pill).to_have_attribute("title", re.compile("its chat server is down"))
    assert pill.locator(".site-status").evaluate(colour) != muted.evaluate(colour)
    shot(olga, "scripted-chat-server-down")
    scripted.push({"type": "site_status", "site": "C", "status": "connected"})
    expect(pill.locator(".site-status")).to_have_text("connected")
    expect(pill).not_to_have_class(re.compile(r"\bchat-down\b"))


def test_positions_panel_plots_units_and_sends_a_report_typed_by_hand(scripted: ScriptedServer, olga: Watched) -> None:
    """The positions panel (positions.js, view_positions.js): units pushed by the server in the plot and the table,
    by unit, a colour per site; the form refuses a bad latitude at the field and sends a good report, whose answer
    is shown; a dot is picked from the keyboard and keeps the focus while ages tick; the browser's location (emulated
    by Playwright) is sent too."""
    page = olga.page
    page.click("#positions-toggle")
    expect(page.locator("#positions-panel")).to_be_visible()
    expect(page.locator("#positions-status")).to_contain_text("No positions yet")
    now = time.time()
    units = [("A", "olga", "olga", 51.5010, -0.1240, 5), ("B", "bravo-2", "bob", 51.5072, -0.1100, 40),
             ("C", "TAK-7", None, 51.4950, -0.1310, 300), ("B", "bravo-1", "bob", 51.5101, -0.1192, 12)]
    for site, unit, user, lat, lon, ago in units:
        scripted.push({"type": "position", "site": site, "unit": unit, **({"user": user} if user else {}),
                       "lat": lat, "lon": lon, "at": now - ago, "expires_at": now - ago + 600})
    rows = page.locator("#positions-rows tr")
    expect(rows.locator("th")).to_have_text(["bravo-1", "bravo-2", "olga", "TAK-7"])        # by unit, whatever the case
    expect(rows.nth(1).locator("td")).to_have_text(["B", "bob", "51.50720", "-0.11000", re.compile(r"^4\d s$")])
    dots = page.locator("#positions-plot .pos-unit")
    expect(dots).to_have_count(4)
    expect(page.locator("#positions-toggle-count")).to_have_text("4")
    fills = dots.locator(".dot").evaluate_all("els => els.map(e => getComputedStyle(e).fill)")
    assert len(set(fills)) == 3 and fills[0] == fills[1], fills                              # a colour per site
    fading = dots.evaluate_all("els => els.map(e => Number(e.getAttribute('opacity')))")
    assert fading[2] > fading[3], fading                                                     # TAK-7's report is older
    # A report by hand: a bad latitude is refused at its field, nothing is sent.
    page.fill("#position-lat", "95")
    page.fill("#position-lon", "0.12 W")
    page.press("#position-lon", "Enter")
    expect(page.locator("#position-error")).to_have_text("The latitude must be between -90 and 90 degrees.")
    expect(page.locator("#position-lat")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#position-lat")).to_be_focused()
    assert scripted.frames("position") == []
    page.fill("#position-lat", "51.5031 N")
    page.fill("#position-unit", "olga-2")
    page.click("#position-send")
    wait_until_sync(lambda: scripted.frames("position"), "the position frame", timeout=10)
    sent = scripted.frames("position")[-1]
    assert {k: sent[k] for k in ("type", "unit", "lat", "lon")} == \
        {"type": "position", "unit": "olga-2", "lat": 51.5031, "lon": -0.12}
    assert isinstance(sent["at"], float) and sent["at"] > 1.7e9
    expect(page.locator("#position-note")).to_have_text("Position of olga-2 sent: 51.50310, -0.12000.")
    expect(page.locator("#position-lat")).not_to_have_attribute("aria-invalid", "true")
    expect(rows).to_have_count(5)                                                            # the server's answer
    # The keyboard: Tab reaches the dots, Enter picks one; the focus stays on it while the ages tick.
    tak = page.locator("#positions-plot .pos-unit[data-unit='TAK-7']")
    tak.focus()
    page.keyboard.press("Enter")
    expect(rows.filter(has_text="TAK-7")).to_have_class("picked")
    age = rows.filter(has_text="TAK-7").locator(".pos-age")
    ticked = age.get_attribute("data-age")
    expect(age).not_to_have_attribute("data-age", ticked or "")
    expect(page.locator("#positions-plot .pos-unit[data-unit='TAK-7']")).to_be_focused()
    expect(page.locator("#positions-plot .pos-unit[data-unit='TAK-7'] .pick-ring")).to_have_count(1)
    # The browser's location (Playwright emulates the device's).
    page.context.grant_permissions(["geolocation"], origin=scripted.url.rstrip("/"))
    page.context.set_geolocation({"latitude": 51.4987, "longitude": -0.1289, "accuracy": 15})
    page.fill("#position-unit", "")
    page.click("#position-locate")
    expect(page.locator("#position-note")).to_have_text("Location of olga sent: 51.49870, -0.12890 (within 15 m).")
    # (the note is the page's own state: the frame may reach the scripted server a moment later)
    wait_until_sync(lambda: [f for f in scripted.frames("position") if f.get("lat") == 51.4987],
                    "the located position frame", timeout=10)
    located = scripted.frames("position")[-1]
    assert (located["lat"], located["lon"], "unit" in located) == (51.4987, -0.1289, False)
    expect(rows.filter(has_text="olga").first.locator("td").nth(2)).to_have_text("51.49870")
    page.set_viewport_size({"width": 1280, "height": 800})
    shot(olga, "positions-panel")
    page.set_viewport_size({"width": 1280, "height": 720})
    page.click("#positions-close")
    expect(page.locator("#positions-panel")).to_be_hidden()


def test_order_key_comparison(olga: Watched) -> None:
    cases = olga.page.evaluate("""async () => {
        const { compareOrder } = await import('/static/js/order.js');
        return [
            compareOrder([9, "A"], [10, "A"]),      // numbers by value, not as text
            compareOrder([4, "B"], [4, "A"]),       // then the origin
            compareOrder([4], [4, "A"]),            // a prefix first
            compareOrder([4, "A"], [4, "A"]),
            compareOrder([1, 2], [1, "x"]),         // numbers before strings
            compareOrder(["\\u{1F600}"], ["\\uFFFF"]),  // strings by code point, as the server
        ];
    }""")
    assert cases == [-1, 1, -1, 0, -1, 1]


def test_client_builds_no_markup_from_strings() -> None:
    forbidden = re.compile(r"innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|"
                           r"setAttribute\(\s*[\"']on")
    found = [f"{p.name}: {m.group(0)}" for p in sorted(Path(STATIC, "js").glob("*.js"))
             for m in forbidden.finditer(p.read_text())]
    assert found == []
    index = (STATIC / "index.html").read_text()
    assert "<script>" not in index and " style=" not in index and "http://" not in index and "https://" not in index


def test_no_attribute_that_loads_or_runs_is_built_from_data() -> None:
    """``h(tag, attrs)`` sets attributes with setAttribute: none of them may be one that navigates, loads or
    styles (href, src, srcdoc, action, formaction, style), whatever its value. (An ``on*`` key becomes a
    listener when its value is a function; a string there would be inline script, which the CSP blocks.)"""
    risky = re.compile(r"""["']?\b(href|src|srcdoc|action|formaction|style|xlink:href)\b["']?\s*:""")
    js = sorted(Path(STATIC, "js").glob("*.js"))
    found = []
    for p in js:
        code = "\n".join(line for line in p.read_text().splitlines()
                         if not line.lstrip().startswith(("//", "*", "/*")))
        for call in re.finditer(r"\b(?:h|svg)\(\s*[\"'][a-z0-9]+[\"']\s*,\s*\{([^{}]*)\}", code):
            found += [f"{p.name}: {m.group(0).strip()}" for m in risky.finditer(call.group(1))]
    assert found == [], found
    assert sum(len(re.findall(r"\bh\(", p.read_text())) for p in js) > 20        # the calls were found


def test_user_text_reaches_the_dom_only_as_text() -> None:
    """Direct DOM writes use textContent (never a property that parses or navigates)."""
    sinks = re.compile(r"\.(innerText|outerText|src|href|action|srcdoc|cssText)\s*=(?!=)"
                       r"|setAttribute\(\s*[\"'](href|src|style|on)")
    found = [f"{p.name}: {m.group(0)}" for p in sorted(Path(STATIC, "js").glob("*.js"))
             for m in sinks.finditer(p.read_text())]
    assert found == [], found
    dom = (STATIC / "js" / "dom.js").read_text()
    assert "document.createTextNode(String(c))" in dom         # strings become text nodes
    assert 'k.startsWith("on") && typeof v === "function"' in dom  # on* only as listeners, never as strings
