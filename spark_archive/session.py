"""The archive's SparkSession, sized to its input.

Theory of operation
-------------------
A small mission (a demo, an exercise: a few thousand records) spends almost
all of its time on Spark's fixed costs, not on data: the JVM starting, the
just-in-time compiler warming up Spark's planner and code generator, and a
few tenths of a second per job. So when the journals are small
(``SMALL_INPUT_BYTES``) and the driver runs the job (``local[...]``), the
session is configured for a short life:

* one shuffle partition and no adaptive execution (AQE re-plans each stage as
  a job of its own, and there is nothing to coalesce);
* no whole-stage code generation: compiling generated Java with Janino costs
  more than interpreting a few thousand rows;
* the JIT compiler's first tier only (``-XX:TieredStopAtLevel=1``): C2's
  optimising compiler spends more CPU compiling Spark's code than a short job
  runs (it halved the JVM's CPU time on a 1,000-record mission); the serial
  garbage collector (no GC threads to start on a heap this small); and no
  bytecode verification of the classpath (Spark's own jars, installed with
  pyspark; the JDK's are never verified): 1.3 s of the JVM's start.

Larger inputs keep the throughput set-up: the parallel collector and every JIT
tier (``-XX:TieredStopAtLevel=1`` lost a factor of two at 10M records), without
the verification of Spark's jars either (``NO_VERIFY``), and
``spark.sql.shuffle.partitions`` sized to the input: one per
``BYTES_PER_PARTITION``, at least one, at most four per core (at least 8).
Either profile maps Spark's classes from the class data sharing archive when
set-up has built one (``cds.py``). JVM options take effect only when this call
starts the JVM.
"""
from __future__ import annotations

import math
import os
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from . import cds

SMALL_INPUT_BYTES = 16 * 2**20
BYTES_PER_PARTITION = 32 * 2**20

LOCAL_CONF = {
    "spark.ui.enabled": "false",
    "spark.driver.host": "127.0.0.1",
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.adaptive.coalescePartitions.enabled": "true",
    "spark.ui.showConsoleProgress": "false",
    # The cached records are read a few times and dropped: compressing them cost
    # more than all the reads saved (measured: +5 s per 2M records at local[2]).
    "spark.sql.inMemoryColumnarStorage.compressed": "false",
    # HotSpot never JIT-compiles a method of more than 8,000 bytes of bytecode
    # (HugeMethodLimit): a whole-stage generated method past that runs interpreted.
    # The transcript's pivot (four arrays built from 10 sites' columns) was such a
    # method: 30 CPU-s at 10M records, 2 when Spark falls back to its per-operator
    # code, which it does for any plan past this limit (Spark's default, 65,535, is
    # the JVM's limit for a method at all). A hot plan that falls back is slower than
    # one that fits, so the one pass's aggregation is kept under it
    # (``onepass.message_rows`` leaves the order key to ``pivot_messages``).
    "spark.sql.codegen.hugeMethodLimit": "8000",
    # Every column the journals' queries group or filter by is a ``when`` over a line's
    # validity (``transforms._valid``), and the constraints the optimizer derives multiply
    # with each alias of it: planning the one pass's message aggregation took 16 s on a cold
    # JVM, and with the position lines' bounds in the validity it ran a 1 GB driver out of
    # memory (here and in the general path's reads). Spark's documented remedy for plans
    # with many predicates and aliases; the archive's joins lose only inferred null filters.
    "spark.sql.constraintPropagation.enabled": "false",
}

SMALL_CONF = {
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.shuffle.partitions": "1",
}
# The throughput collector: about 10% faster than G1 on a large job (measured at
# local[2], 2M records); the job keeps little alive between its stages. The JIT's
# optimising tier waits for four times the usual calls and loops: at 10M records the
# compiler threads took 54-58 of the JVM's 250 CPU-s on two cores, 45-48 with these
# thresholds (job 130-136 -> 124-131 s); ten times the usual thresholds gained nothing
# more. (About a third of what it compiles is the queries' generated classes, the rest
# Spark's and the JDK's own code, anew in every run: docs/archive.md, "What the JIT compiles".)
# Both profiles skip the bytecode verification of Spark's own jars (the JDK's are
# never verified): the first query of a large job waits on thousands of classes
# loading (7.9 -> 7.1 s from session to first task at 1M records).
NO_VERIFY = "-XX:+UnlockDiagnosticVMOptions -XX:-BytecodeVerificationRemote"
LARGE_JVM = ("-XX:+UseParallelGC -XX:Tier4InvocationThreshold=20000 -XX:Tier4CompileThreshold=40000 "
             f"-XX:Tier4BackEdgeThreshold=160000 {NO_VERIFY}")
SMALL_JVM = f"-XX:+UseSerialGC -XX:TieredStopAtLevel=1 {NO_VERIFY}"


def is_small(master: str, input_bytes: int | None) -> bool:
    """Whether a job over ``input_bytes`` of journals at ``master`` takes the small profile."""
    return input_bytes is not None and input_bytes <= SMALL_INPUT_BYTES and master.startswith("local")


def physical_memory() -> int | None:
    """Bytes of memory of this machine (None where the OS does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def driver_memory(input_bytes: int, memory: int | None) -> str:
    """``spark.driver.memory`` for a large local job: one and a half times the journals'
    size, at least 2 GiB, at most half of ``memory`` (the machine's), in whole GiB.

    In local mode the whole job lives in the driver JVM, and Spark's default of 1g
    leaves a 10M-record mission (2.4 GB of journals) collecting garbage; the
    benchmark's 4g is what this gives it.
    """
    gib = max(2, math.ceil(1.5 * input_bytes / 2**30))
    if memory:
        gib = max(1, min(gib, memory // 2 // 2**30))
    return f"{gib}g"


def session_conf(master: str, input_bytes: int | None = None,
                 conf: dict[str, str] | None = None) -> dict[str, str]:
    """The Spark configuration for a job over ``input_bytes`` of journals (``conf`` wins)."""
    small = is_small(master, input_bytes)
    settings = dict(LOCAL_CONF)
    if small:
        settings.update(SMALL_CONF)
    elif master.startswith("local") and input_bytes is not None:   # the job lives in this JVM
        settings["spark.driver.memory"] = driver_memory(input_bytes, physical_memory())
    jvm = SMALL_JVM if small else LARGE_JVM
    log_config = Path(__file__).with_name("log4j2.properties")
    driver = f"{jvm} {cds.java_options()}".strip()   # Spark's classes mapped, not loaded (cds.py)
    if log_config.exists():  # only errors from Spark itself: the job logs its own progress
        driver += f" -Dlog4j2.configurationFile=file:{log_config}"
    settings["spark.driver.extraJavaOptions"] = driver
    settings["spark.executor.extraJavaOptions"] = LARGE_JVM
    settings.update(conf or {})
    return settings


def shuffle_partitions(cores: int, input_bytes: int | None) -> int:
    """Partitions for the job's shuffles: sized to the input, at most 4 per core (at least 8)."""
    most = max(8, 4 * cores)
    if input_bytes is None:
        return most
    return max(1, min(most, math.ceil(input_bytes / BYTES_PER_PARTITION)))


def build_session(master: str = "local[*]", app_name: str = "rcm-spark-archive",
                  conf: dict[str, str] | None = None,
                  input_bytes: int | None = None) -> SparkSession:
    """A SparkSession for the archive (loopback only, no UI), sized to ``input_bytes``."""
    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in session_conf(master, input_bytes, conf).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    if "spark.sql.shuffle.partitions" not in (conf or {}) and not is_small(master, input_bytes):
        # Spark's 200 is far too many for a laptop and AQE cannot coalesce cached
        # or range-partitioned stages.
        cores = spark.sparkContext.defaultParallelism
        spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions(cores, input_bytes)))
    return spark


def choose_plan(master: str, input_bytes: int) -> str:
    """``driver`` for journals small enough that Spark's fixed costs would dominate (local
    masters only: a cluster was asked for), ``spark`` otherwise."""
    return "driver" if is_small(master, input_bytes) else "spark"


def materialize(df: DataFrame) -> DataFrame:
    """``df`` computed now and kept (memory, then disk), as a frame whose plan starts there.

    Unlike ``persist``, a local checkpoint cuts the lineage: every later
    operation on a persisted frame re-analyses its whole plan (the one pass's
    pivot, the transcript's joins), about 25 ms an operation against 4 ms on
    the checkpoint, which was most of the time of the tables' queries; and at
    10M records the whole job took 266 CPU-s with checkpoints, 295 with the
    columnar cache. The rows live in the executors' block managers (lost with
    an executor, as cached blocks are; the job is then re-run). ``release``
    frees them.
    """
    return df.localCheckpoint(eager=True)


def release(df: DataFrame) -> None:
    """Free what ``materialize`` (or ``persist``) kept for ``df``."""
    plan = df._jdf.queryExecution().logical()
    if plan.getClass().getSimpleName() == "LogicalRDD":
        plan.rdd().unpersist(False)
    else:
        df.unpersist()
