"""A session-scoped local SparkSession and hand-built journals with known answers."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:  # noqa: F821
    """One local Spark for the whole test session (loopback only, no UI, few partitions)."""
    from spark_archive.job import build_session
    from spark_archive.session import session_conf

    # The small-input profile's short-lived JVM (spark_archive/session.py: the client compiler only, serial GC):
    # a test session runs hundreds of small queries, and the optimising compiler's threads cost more than they
    # gain (measured: the extension and generated missions' archive runs took the JVM 98 CPU-s with the large
    # profile's JIT, 70 with this one). A larger code cache than the client compiler's default, which the
    # session's many generated classes filled. Four shuffle partitions, so that numbering across partitions is
    # exercised.
    # Expressions are interpreted, not compiled (whole-stage code generation off, and Spark's own switch for
    # its interpreted expressions, factoryMode NO_CODEGEN, with which Spark's own tests run both paths): every
    # query here is planned and run once on a few hundred rows, and compiling its generated Java cost more than
    # running it (2026-11-28, the in-process Spark tests alone on two workers: 348 -> 273 CPU-s of the machine,
    # 192 -> 147 s; test_archive_job.py alone 91 -> 62 CPU-s). The answers are the same by Spark's contract; the
    # generated code of the job's real plans is run by test_archive_cluster.py (the CLI on a standalone cluster,
    # whole-stage on) and the archive benchmark's quick run (test_archive_cli.py, the small profile's expression
    # code).
    jvm = session_conf("local[2]", 1)["spark.driver.extraJavaOptions"] + " -XX:ReservedCodeCacheSize=256m"
    session = build_session("local[2]", app_name="rcm-archive-tests", input_bytes=1, conf={
        "spark.sql.adaptive.enabled": "false",
        "spark.sql.codegen.wholeStage": "false",
        "spark.sql.codegen.factoryMode": "NO_CODEGEN",
        "spark.sql.shuffle.partitions": "4",
        "spark.default.parallelism": "2",
        "spark.driver.memory": "1g",
        "spark.driver.extraJavaOptions": jvm,
    })
    yield session
    session.stop()


def line(**fields: object) -> str:
    """One journal line, compact JSON as a chat server writes it."""
    return json.dumps(fields, separators=(",", ":"))


def msg(kind: str, site: str, at: float, msg_id: str, order: list, room: str, user: str,
        text: str, sent_at: float, n: int | None = None, late: bool = False) -> str:
    """A send or deliver line."""
    origin, seq = msg_id.split(":")
    fields: dict = {"kind": kind, "site": site}
    if kind == "deliver":
        fields["n"] = n
    fields.update(at=at, msg_id=msg_id, origin=origin, seq=int(seq), order=order)
    if kind == "deliver":
        fields["late"] = late
    fields.update(room=room, user=user, text=text, sent_at=sent_at)
    return line(**fields)


A1 = dict(msg_id="A:1", order=[1, "A"], room="ops", user="alice", text="hello", sent_at=101.0)
B1 = dict(msg_id="B:1", order=[2, "B"], room="ops", user="bob", text="copy", sent_at=102.0)
B2 = dict(msg_id="B:2", order=[3, "B"], room="intel", user="bob", text="second", sent_at=104.0)
C1 = dict(msg_id="C:1", order=[3, "C"], room="intel", user="carol", text="fires", sent_at=103.0)


def status(site: str, at: float, peer: str, what: str) -> str:
    return line(kind="status", site=site, at=at, peer=peer, status=what)


@pytest.fixture(scope="session")
def known_journals(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Five sites. A restarts (torn line, an exact duplicate, a re-delivery), B reports a
    loss, C has a garbage line and a duplicated status line, D's journal is empty, E
    journals only status events. Expected answers are spelled out in the tests."""
    root = tmp_path_factory.mktemp("mission")
    late_b2 = msg("deliver", "A", 108.0, n=4, late=True, **B2)
    journals = {
        "A/journal/0001.jsonl": "\n".join([
            status("A", 100.0, "B", "connected"),
            status("A", 100.5, "C", "connected"),
            msg("send", "A", 101.0, **A1),
            msg("deliver", "A", 101.1, n=1, **A1),
            msg("deliver", "A", 103.0, n=2, **B1),
            status("A", 104.0, "B", "suspected"),
            msg("deliver", "A", 105.0, n=3, **C1),
            status("A", 107.0, "B", "connected"),
            late_b2,
        ]) + "\n" + '{"kind":"deliver","site":"A","n":5,"at":1',   # torn by the crash
        "A/journal/0002.jsonl": "\n".join([
            late_b2,                                                 # replayed: exact duplicate
            msg("deliver", "A", 112.0, n=5, **C1),                   # re-delivered after restart
        ]) + "\n",
        "B/journal/0001.jsonl": "\n".join([
            status("B", 100.2, "A", "connected"),
            msg("send", "B", 102.0, **B1),
            msg("deliver", "B", 102.1, n=1, **B1),
            msg("deliver", "B", 102.5, n=2, late=True, **A1),
            msg("send", "B", 104.0, **B2),
            msg("deliver", "B", 104.1, n=3, **B2),
            line(kind="missing", site="B", at=120.0, origin="C", seqs=[1, 7]),
        ]) + "\n",
        "C/journal/0001.jsonl": "\n".join([
            status("C", 100.4, "A", "connected"),
            status("C", 100.4, "A", "connected"),                    # journaled twice
            msg("send", "C", 103.0, **C1),
            "not json at all",
            msg("deliver", "C", 103.2, n=1, **C1),
            msg("deliver", "C", 103.5, n=2, late=True, **A1),
        ]) + "\n",
        "D/journal/0001.jsonl": "",
        "E/journal/0001.jsonl": "\n".join([
            status("E", 110.0, "A", "suspected"),
            status("E", 130.0, "A", "connected"),
        ]) + "\n",
    }
    for rel, content in journals.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(content)
    return root
