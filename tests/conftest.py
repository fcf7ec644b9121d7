"""Suite-wide settings.

Hypothesis draws the same examples on every run (``derandomize``, no example database), so a CI run
is deterministic: a red run means a change broke something, not that a new example was drawn.
``HYPOTHESIS_PROFILE=explore`` draws fresh random examples to hunt for new failures; session 6 found
a real bug that way (a lone surrogate echoed in a chat error frame).
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_collection_modifyitems(config, items) -> None:
    """Units of work for ``make test``'s two pytest-xdist workers (``--dist loadgroup``): a test module
    stays on one worker (its module fixtures are built once), and every Spark test shares one worker and
    so one SparkSession (a JVM each otherwise). Without xdist the marks do nothing."""
    import pytest

    for item in items:
        path = item.nodeid.split("::", 1)[0]
        group = "spark" if path.startswith("tests/spark_archive/") else path
        item.add_marker(pytest.mark.xdist_group(group))
