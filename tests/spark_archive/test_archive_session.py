"""The session sized to its input (no JVM started here)."""
from __future__ import annotations

from spark_archive.session import (
    SMALL_INPUT_BYTES,
    SMALL_JVM,
    choose_plan,
    driver_memory,
    physical_memory,
    session_conf,
    shuffle_partitions,
)


def test_small_local_inputs_take_the_driver_plan_and_a_short_lived_jvm() -> None:
    assert choose_plan("local[2]", 200_000) == "driver"
    assert choose_plan("local[*]", SMALL_INPUT_BYTES + 1) == "spark"
    assert choose_plan("spark://head:7077", 200_000) == "spark"   # a cluster was asked for
    small = session_conf("local[2]", 200_000)
    assert small["spark.sql.shuffle.partitions"] == "1" and small["spark.sql.adaptive.enabled"] == "false"
    assert small["spark.driver.extraJavaOptions"].startswith(SMALL_JVM)
    large = session_conf("local[2]", 2 * 10**9, {"spark.sql.adaptive.enabled": "false"})
    assert "TieredStopAtLevel" not in large["spark.driver.extraJavaOptions"]
    assert large["spark.sql.adaptive.enabled"] == "false"            # the caller's conf wins


def test_shuffle_partitions_follow_the_input() -> None:
    assert shuffle_partitions(2, 1) == 1
    assert shuffle_partitions(2, 100 * 2**20) == 4
    assert shuffle_partitions(2, 2_400 * 2**20) == 8                  # 10M records: as before
    assert shuffle_partitions(16, 2_400 * 2**20) == 64
    assert shuffle_partitions(2, None) == 8


def test_a_large_local_job_gets_driver_memory_sized_to_its_journals() -> None:
    """Spark's default 1g is far too little for a 10M-record mission in one local JVM."""
    gib = 2**30
    assert driver_memory(int(2.4 * gib), 24 * gib) == "4g"            # 10M records: the benchmark's 4g
    assert driver_memory(100 * 2**20, 24 * gib) == "2g"               # at least 2 GiB
    assert driver_memory(40 * gib, 24 * gib) == "12g"                 # at most half the machine
    assert driver_memory(40 * gib, None) == "60g"                     # the OS did not say
    large = session_conf("local[2]", int(2.4 * gib))
    assert large["spark.driver.memory"] == driver_memory(int(2.4 * gib), physical_memory())
    assert session_conf("local[2]", int(2.4 * gib), {"spark.driver.memory": "6g"})["spark.driver.memory"] == "6g"
    assert "spark.driver.memory" not in session_conf("spark://head:7077", int(2.4 * gib))
    assert "spark.driver.memory" not in session_conf("local[2]", 200_000)   # the small profile
