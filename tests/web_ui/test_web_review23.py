"""Issue 23 item 1, web: every place user text reaches the DOM is a text node or an attribute value that
cannot run code or load anything (read from the sources; test_web_placement.py bans the HTML sinks)."""
from __future__ import annotations

import re
from pathlib import Path

STATIC = Path(__file__).resolve().parents[2] / "web_ui" / "static"
JS = sorted((STATIC / "js").glob("*.js"))


def test_review23_no_attribute_that_loads_or_runs_is_built_from_data():
    """``h(tag, attrs)`` sets attributes with setAttribute: none of them may be one that navigates, loads or
    styles (href, src, srcdoc, action, formaction, style), whatever its value. (An ``on*`` key becomes a
    listener when its value is a function; a string there would be inline script, which the CSP blocks.)"""
    risky = re.compile(r"""["']?\b(href|src|srcdoc|action|formaction|style|xlink:href)\b["']?\s*:""")
    found = []
    for p in JS:
        code = "\n".join(line for line in p.read_text().splitlines()
                         if not line.lstrip().startswith(("//", "*", "/*")))
        for call in re.finditer(r"\bh\(\s*[\"'][a-z0-9]+[\"']\s*,\s*\{([^{}]*)\}", code):
            found += [f"{p.name}: {m.group(0).strip()}" for m in risky.finditer(call.group(1))]
    assert found == [], found
    assert sum(len(re.findall(r"\bh\(", p.read_text())) for p in JS) > 20        # the calls were found


def test_review23_user_text_reaches_the_dom_only_as_text():
    """Direct DOM writes use textContent (never a property that parses or navigates)."""
    sinks = re.compile(r"\.(innerText|outerText|src|href|action|srcdoc|cssText)\s*=(?!=)"
                       r"|setAttribute\(\s*[\"'](href|src|style|on)")
    found = [f"{p.name}: {m.group(0)}" for p in JS for m in sinks.finditer(p.read_text())]
    assert found == [], found
    dom = (STATIC / "js" / "dom.js").read_text()
    assert "document.createTextNode(String(c))" in dom         # strings become text nodes
    assert 'k.startsWith("on") && typeof v === "function"' in dom  # on* only as listeners, never as strings
