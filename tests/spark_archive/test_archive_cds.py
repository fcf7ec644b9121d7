"""The class data sharing archive: keyed to the JVM and the jars, used only when it maps."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from spark_archive import cds
from spark_archive.session import session_conf

BUILT = cds.archive_path()      # set-up's archive, found before a test moves the cache


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(cds.DISABLE_ENV, raising=False)
    return tmp_path / "cache" / "rcm-suite"


def test_a_session_maps_the_archive_only_once_it_is_built(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = cds.archive_path()
    if path is None:
        pytest.skip("no java on this machine")
    assert path.parent == cache
    options = lambda: session_conf("local[2]", 10**9)["spark.driver.extraJavaOptions"]  # noqa: E731
    assert "SharedArchiveFile" not in options() and cds.java_options() == ""
    cache.mkdir(parents=True)
    path.write_bytes(b"built")
    assert f"-XX:SharedArchiveFile={path}" in options()
    assert f"-XX:SharedArchiveFile={path}" in session_conf("local[2]", 1000)["spark.driver.extraJavaOptions"]
    monkeypatch.setenv(cds.DISABLE_ENV, "0")
    assert "SharedArchiveFile" not in options()


def test_the_archive_is_keyed_to_the_spark_jars(cache: Path, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    if cds.java_executable() is None:
        pytest.skip("no java on this machine")
    home = tmp_path / "spark"
    (home / "jars").mkdir(parents=True)
    (home / "jars" / "spark-core.jar").write_bytes(b"1")
    monkeypatch.setattr(cds, "spark_home", lambda: home)
    before = cds.archive_path()
    (home / "jars" / "spark-sql.jar").write_bytes(b"2")
    assert cds.archive_path() != before


def test_an_archive_cut_short_is_never_installed(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """HotSpot crashes on a truncated archive: the dump is mapped once by a JVM started as
    Spark starts it before it takes the archive's name, and is dropped when that fails."""
    if cds.java_executable() is None:
        pytest.skip("no java on this machine")
    real_submit = cds._submit

    def training_cut_short(options: str, *args: str, timeout: float) -> subprocess.CompletedProcess:
        if "--version" in args:                      # the check runs for real
            return real_submit(options, *args, timeout=timeout)
        dump = Path(options.split("-XX:ArchiveClassesAtExit=")[1].split()[0])
        if BUILT is not None and BUILT.is_file():    # a real archive's first part: SIGBUS if mapped
            with BUILT.open("rb") as whole:
                dump.write_bytes(whole.read(BUILT.stat().st_size // 3))
        else:
            dump.write_bytes(b"\0" * 4096)
        return subprocess.CompletedProcess(args, 0, "", "")

    monkeypatch.setattr(cds, "_submit", training_cut_short)
    assert cds.build() is None
    assert list(cache.iterdir()) == []               # neither the archive nor the dump


def test_the_built_archive_maps() -> None:
    """The archive set-up built (``python -m spark_archive.cds``) is one a JVM maps."""
    if BUILT is None or not BUILT.is_file():
        pytest.skip("no archive built on this machine (set-up builds it)")
    assert cds.usable(BUILT)


def test_the_cache_keeps_the_newest_archives(cache: Path) -> None:
    cache.mkdir(parents=True)
    made = []
    for i in range(5):
        path = cache / f"{cds.PREFIX}{i}.jsa"
        path.write_bytes(b"x")
        os.utime(path, (1000 + i, 1000 + i))
        made.append(path)
    (cache / "unrelated.txt").write_text("kept")
    cds._prune(made[0])                       # the one just built, however old its time
    assert sorted(p.name for p in cache.iterdir()) == sorted(
        [made[0].name, made[4].name, made[3].name, "unrelated.txt"])
