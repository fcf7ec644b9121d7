"""Suite-wide settings.

Hypothesis draws the same examples on every run (``derandomize``, no example database), so a CI run
is deterministic: a red run means a change broke something, not that a new example was drawn.
``HYPOTHESIS_PROFILE=explore`` draws fresh random examples to hunt for new failures; session 6 found
a real bug that way (a lone surrogate echoed in a chat error frame).

``make test`` runs the suite on four pytest-xdist workers: ``pytest_xdist_make_scheduler`` below sends
each unit of work (a module; a test of the long modules in ``EACH_TEST``; the in-process Spark tests in two
units) whole to one worker, longest units first.
"""
from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, database=None)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


OWN_JVMS = ("tests/spark_archive/test_archive_cluster.py", "tests/spark_archive/test_archive_cli.py")
"""Spark test modules that start their JVMs in subprocesses (a standalone cluster, the CLI): they need no
shared SparkSession, so they are units of their own and run beside the other Spark tests (those took one
worker 380 s of a 390 s suite, the whole run waiting on them)."""
SPARK_REFERENCE = ("tests/spark_archive/test_archive_reference.py",)
"""Spark test modules that share a second in-process SparkSession (the unit ``spark-reference``): the
in-process Spark tests are two units on two workers, each with its own JVM (each pays a cold JVM's start and
JIT warm-up), not one unit twice as long that the whole run waited on. Measured serially (docs/archive.md,
"The archive's tests"): the reference module is about as long as every other in-process module together."""
EACH_TEST = ("tests/faultinject/test_sim_seeds.py",)
"""Long modules whose tests share no fixture: each test is a unit of its own, so that they spread over the
workers (test_sim_seeds.py, 92 s of simulation as one unit, was handed out at 300 s of a 406 s run and ended
it alone on one worker).

Not test_runner_runs.py: its four runs of real processes hold statuses to real-time bounds (liveness 0.75-1 s
at their scales), and spread over the workers two or three of them ran at once (twelve to twenty RCM and chat
servers on the two cores, beside the Spark JVMs): a clean-clone CI run on a slow machine (2026-11-27, evening)
saw a healthy link suspected in two of them, 34 s apart. As one unit they run one after another (90 s)."""
UNITS_FIRST = ("spark-reference", "spark", "tests/test_bench_quick.py", "tests/faultinject/test_runner_runs.py",
               "tests/faultinject/test_sim_seeds.py", "tests/spark_archive/test_archive_cluster.py",
               "tests/spark_archive/test_archive_cli.py", "tests/faultinject/test_runner_labels.py")
"""The longest units (for EACH_TEST, their modules) start first, so that the short ones fill the end of the run;
the standalone cluster's JVMs after the benchmarks and simulations rather than beside the in-process Spark
tests (98 s against 149 s there; the run's length the same, 395-397 s on four workers)."""


def unit_of(nodeid: str) -> str:
    """The unit of work a test belongs to under pytest-xdist: its module, except that a test of EACH_TEST is a
    unit of its own and the Spark tests that use the in-process SparkSession are in two units
    (``spark-reference`` and ``spark``: one worker, one SparkSession each; a JVM each module otherwise)."""
    path = nodeid.split("::", 1)[0]
    if path in EACH_TEST:
        return nodeid
    if not path.startswith("tests/spark_archive/") or path in OWN_JVMS:
        return path
    return "spark-reference" if path in SPARK_REFERENCE else "spark"


def pytest_configure(config) -> None:
    """Each xdist worker hands out local ports from its own slice of the pool (one worker's server
    may bind, a second later, a port the other just found free)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw") and worker[2:].isdigit():
        from faultinject.missions import port_slice
        port_slice(int(worker[2:]), int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")))


def pytest_collection_modifyitems(config, items) -> None:
    """The longest units first (in every process, so xdist's workers agree), so that none of them starts
    last and runs alone at the end."""
    first = {unit: i for i, unit in enumerate(UNITS_FIRST)}

    def rank(nodeid: str) -> int:       # its unit's place; for a test of EACH_TEST, its module's
        unit = unit_of(nodeid)
        return first.get(unit.split("::", 1)[0] if unit == nodeid else unit, len(UNITS_FIRST))

    items.sort(key=lambda item: rank(item.nodeid))


def pytest_xdist_make_scheduler(config, log):
    """``make test`` runs four pytest-xdist workers; a unit (``unit_of``) goes whole to one worker, so module
    fixtures are built once and tests that share one see each other's effects in order."""
    from xdist.scheduler import LoadScopeScheduling

    # Keep the units in the order above (``UNITS_FIRST``): xdist otherwise sorts them by their number of tests,
    # which started the standalone-cluster unit (one 65 s test) last, at 340 s of a 439 s run.
    config.option.loadscopereorder = False

    class Units(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return unit_of(nodeid)

    return Units(config, log)
