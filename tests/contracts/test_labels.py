"""Security labels (``contracts.labels``): both spellings, dominance, the mission's tables and clear refusals."""
from __future__ import annotations

from pathlib import Path

import pytest

from contracts.labels import ABOVE_CLEARANCE, BELOW_FLOOR, UNLABELED, Label, LabelError, Scheme, join, meet, say_problem
from contracts.mission import MissionError, parse_mission

NATO = Scheme.build(["UNCLASSIFIED", "RESTRICTED", "CONFIDENTIAL", "SECRET"], ["AUS", "CAN", "GBR", "NZL", "USA"],
                    "UNCLASSIFIED")


def test_people_and_json_spellings_read_back_the_same() -> None:
    lb = NATO.parse("secret//rel to usa, gbr")
    assert lb == Label("SECRET", 3, frozenset({"GBR", "USA"}))
    assert str(lb) == "SECRET//REL TO GBR, USA"
    assert lb.to_json() == {"level": "SECRET", "caveats": ["GBR", "USA"]}
    assert NATO.from_json(lb.to_json()) == lb
    assert NATO.from_json(str(lb)) == lb
    assert NATO.parse("SECRET//GBR/USA") == lb
    assert str(NATO.parse("RESTRICTED")) == "RESTRICTED"


@pytest.mark.parametrize("bad", ["TOP SECRET", "SECRET//REL TO FRA", "SECRET//", "", 7, ["SECRET"],
                                 {"level": "SECRET", "caveats": "GBR"}, {"level": "SECRET", "colour": "red"},
                                 {"caveats": []}])
def test_a_label_the_scheme_lacks_is_a_label_error_naming_it(bad: object) -> None:
    with pytest.raises(LabelError):
        NATO.from_json(bad)


def test_dominance_needs_the_level_and_every_caveat() -> None:
    c = NATO.parse("SECRET//REL TO GBR, USA")
    assert c.dominates(NATO.parse("CONFIDENTIAL//REL TO GBR"))
    assert c.dominates(NATO.parse("SECRET"))
    assert not c.dominates(NATO.parse("SECRET//REL TO AUS"))
    assert not NATO.parse("CONFIDENTIAL//REL TO GBR, USA").dominates(NATO.parse("SECRET"))
    a, b = NATO.parse("SECRET//REL TO GBR"), NATO.parse("RESTRICTED//REL TO USA")
    assert join([a, b]) == NATO.parse("SECRET//REL TO GBR, USA")
    assert meet([a, b]) == NATO.parse("RESTRICTED")
    assert NATO.top().dominates(join([a, b]))


def test_sendable_labels_lie_between_the_floor_and_the_clearance() -> None:
    labels = NATO.sendable(NATO.parse("CONFIDENTIAL//REL TO GBR"), NATO.parse("RESTRICTED"))
    assert [str(lb) for lb in labels] == ["RESTRICTED", "RESTRICTED//REL TO GBR", "CONFIDENTIAL",
                                          "CONFIDENTIAL//REL TO GBR"]
    assert NATO.sendable(NATO.parse("RESTRICTED"), NATO.parse("SECRET")) == []


def test_say_problem_checks_the_clearance_then_the_floor_and_skips_what_is_not_known() -> None:
    floor, clearance = NATO.parse("RESTRICTED"), NATO.parse("CONFIDENTIAL//REL TO GBR")
    assert say_problem(NATO.parse("CONFIDENTIAL//REL TO GBR"), floor, clearance) is None
    assert say_problem(NATO.parse("SECRET"), floor, clearance) == ABOVE_CLEARANCE
    assert say_problem(NATO.parse("RESTRICTED//REL TO USA"), floor, clearance) == ABOVE_CLEARANCE
    assert say_problem(NATO.default, floor, clearance) == BELOW_FLOOR
    assert say_problem(NATO.parse("SECRET"), NATO.top(), clearance) == ABOVE_CLEARANCE      # both fail
    assert say_problem(NATO.default, None, clearance) is None
    assert say_problem(NATO.parse("SECRET"), floor, None) is None
    # exactly the labels ``sendable`` lists (it lists every one while extra caveats are few)
    every = [Label(lv, r, frozenset(c)) for r, lv in enumerate(NATO.levels) for c in ([], ["GBR"], ["USA"])]
    assert [lb for lb in every if say_problem(lb, floor, clearance) is None] == NATO.sendable(clearance, floor)


def test_cleared_names_whose_clearance_dominates() -> None:
    cl = {"A": NATO.parse("SECRET//REL TO GBR, USA"), "B": NATO.parse("SECRET//REL TO GBR"), "C": NATO.default}
    assert NATO.cleared(NATO.parse("SECRET//REL TO USA"), cl) == {"A"}
    assert NATO.cleared(NATO.default, cl) == {"A", "B", "C"}


def _raw(**extra: object) -> dict[str, object]:
    raw: dict[str, object] = {"mission": {"name": "m"}, "sites": {
        "A": {"rcm": "127.0.0.1:7101", "chat": "127.0.0.1:8101"},
        "B": {"rcm": "127.0.0.1:7102", "chat": "127.0.0.1:8102"}}}
    raw.update(extra)
    return raw


def test_the_mission_reads_labels_and_site_clearances(tmp_path: Path) -> None:
    raw = _raw(labels={"levels": ["UNCLASSIFIED", "SECRET"], "caveats": ["GBR"], "default": "UNCLASSIFIED"})
    raw["sites"]["A"]["clearance"] = {"level": "SECRET", "caveats": ["GBR"]}      # type: ignore[index]
    m = parse_mission(raw, tmp_path)
    assert m.labels.enabled and m.labels.levels == ("UNCLASSIFIED", "SECRET")
    assert str(m.clearance("A")) == "SECRET//REL TO GBR"
    assert m.clearance("B") == m.labels.default


def test_an_unlabeled_mission_clears_every_site_for_its_one_label(tmp_path: Path) -> None:
    m = parse_mission(_raw(), tmp_path)
    assert m.labels is UNLABELED and not m.labels.enabled
    assert all(c.dominates(UNLABELED.default) for c in m.clearances().values())


@pytest.mark.parametrize(("labels", "clearance", "names"), [
    ({"levels": []}, None, "levels"),
    ({"levels": ["secret"]}, None, "level 'secret'"),
    ({"levels": ["A", "A"]}, None, "listed twice"),
    ({"levels": ["U"], "colours": []}, None, "colours"),
    ({"levels": ["U"], "default": "S"}, None, "unknown level 'S'"),
    ({"levels": ["U", "S"]}, {"level": "TS"}, "[sites.A.clearance]"),
    ({"levels": ["U", "S"]}, {"level": "S", "caveats": ["GBR"]}, "unknown caveat"),
    (None, {"level": "S"}, "needs a [labels] table"),
])
def test_bad_labels_or_clearances_are_refused_naming_the_key(tmp_path: Path, labels: object, clearance: object,
                                                             names: str) -> None:
    raw = _raw(labels=labels) if labels is not None else _raw()
    if clearance is not None:
        raw["sites"]["A"]["clearance"] = clearance      # type: ignore[index]
    with pytest.raises(MissionError) as e:
        parse_mission(raw, tmp_path)
    assert names in str(e.value)
