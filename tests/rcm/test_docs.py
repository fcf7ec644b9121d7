"""docs/rcm.md embeds the state machines generated from the code."""
from pathlib import Path

from rcm.docs import state_machines_markdown


def test_state_machine_tables_in_docs_match_the_code():
    doc = (Path(__file__).resolve().parents[2] / "docs" / "rcm.md").read_text()
    assert state_machines_markdown().strip() in doc, "regenerate: python -m rcm.docs"
