"""Class data sharing: the archive's JVM maps Spark's classes from a file instead of loading them.

Theory of operation
-------------------
Every archive run starts a JVM that loads, parses and links about 15,000 of
Spark's classes before the first task runs. HotSpot can dump the classes a run
loaded into a *dynamic archive* (``-XX:ArchiveClassesAtExit``) and map them
from it on the next start (``-XX:SharedArchiveFile``). Measured at local[2]:
the Spark plan of the demo mission 18.3 -> 15.9 s, and 1M records 48.6 ->
44.1 s from process start to end (session to first task 7.1 -> 5.9 s).

The archive belongs to one JVM build and one set of Spark jars (the JVM checks
each jar's path, size and time), so its name carries a key of both
(``archive_path``), under the user's cache directory, which keeps the ``KEEP``
newest. It is built once, by ``python -m spark_archive.cds`` (``make demo``
runs it; ``make test`` does not: on two cores its 40 s cost the suite more than
its JVMs' starts gain), never during a job:

* a *training* run archives a generated demo-sized mission with the Spark plan
  through ``spark-submit``, whose JVM dumps the archive when it exits, to a
  temporary name;
* HotSpot crashes (SIGBUS) on an archive cut short, so the dump is checked by
  starting a JVM that must map it (``-Xshare:on``) before it is renamed into
  place; a failed training leaves no archive, and runs go on without one.

``java_options`` gives a session the options that use the archive when it
exists (nothing otherwise, or with ``RCM_SPARK_CDS=0``). Only the driver's JVM
uses it: executors of a cluster run elsewhere.
"""
from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyspark

DISABLE_ENV = "RCM_SPARK_CDS"
PREFIX = "spark-classes-"
KEEP = 3            # archives kept in the cache (other virtualenvs, older versions), newest first
# Neither a mismatch (another JVM, other jars: the archive is then just not used) nor
# the dump's notes print.
LOG_OFF = "-Xlog:cds=off -Xlog:cds+dynamic=off"
TRAINING_CONF = {   # the large profile's planning and code generation, on a small input
    "spark.sql.codegen.wholeStage": "true",
    "spark.sql.adaptive.enabled": "true",
    "spark.sql.shuffle.partitions": "2",
}


def spark_home() -> Path:
    return Path(pyspark.__file__).resolve().parent


def java_executable() -> Path | None:
    """The ``java`` Spark's launcher runs: ``$JAVA_HOME/bin/java``, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "rcm-suite"


def archive_path() -> Path | None:
    """Where the archive for this JVM and these Spark jars lives (None without a JVM)."""
    java = java_executable()
    if java is None:
        return None
    # The JVM checks the class path the archive was made with (each jar's path, size and
    # time), so a virtualenv elsewhere, or pyspark installed again, needs an archive of its own.
    jars = spark_home() / "jars"
    key = hashlib.sha256()
    stat = java.stat()
    key.update(f"{java}:{stat.st_size}:{stat.st_mtime_ns}\n{pyspark.__version__}\n{jars}\n".encode())
    for jar in sorted(jars.glob("*.jar")) if jars.is_dir() else ():
        jar_stat = jar.stat()
        key.update(f"{jar.name}:{jar_stat.st_size}:{jar_stat.st_mtime_ns}\n".encode())
    return cache_dir() / f"{PREFIX}{key.hexdigest()[:16]}.jsa"


def java_options() -> str:
    """JVM options that map the archive, or "" (none built, or ``RCM_SPARK_CDS=0``)."""
    if os.environ.get(DISABLE_ENV) == "0":
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    return f"-XX:SharedArchiveFile={path} -Xshare:auto {LOG_OFF}"


def _submit(java_options: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """``spark-submit`` with the driver's JVM options, in a scratch directory: a JVM that
    crashes (the check of an archive cut short) leaves its error file there."""
    env = {**os.environ, "SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
           "PYSPARK_DRIVER_PYTHON": sys.executable,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parent.parent),
                                         os.environ.get("PYTHONPATH", "")])}
    with tempfile.TemporaryDirectory(prefix="rcm-cds-jvm-") as scratch:
        options = f"{java_options} -XX:ErrorFile={scratch}/hs_err_%p.log -XX:-CreateCoredumpOnCrash"
        return subprocess.run([str(spark_home() / "bin" / "spark-submit"), "--driver-java-options", options,
                               *args], env=env, capture_output=True, text=True, timeout=timeout, cwd=scratch)


def usable(archive: Path, timeout: float = 120) -> bool:
    """Whether a JVM started as Spark starts it maps ``archive`` (``-Xshare:on`` fails otherwise)."""
    done = _submit(f"-XX:SharedArchiveFile={archive} -Xshare:on", "--version", timeout=timeout)
    return done.returncode == 0


def build(force: bool = False, timeout: float = 600) -> Path | None:
    """Train, check and install the archive (see the module doc); its path, or None."""
    from .session import NO_VERIFY
    path = archive_path()
    if path is None:
        return None
    if path.is_file() and not force:
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    with tempfile.TemporaryDirectory(prefix="rcm-cds-") as work:
        journals, out = Path(work) / "journals", Path(work) / "out"
        subprocess.run([sys.executable, "-m", "spark_archive.generate", "--sites", "4", "--messages", "200",
                        "--seed", "1", "--out", str(journals)], check=True, capture_output=True,
                       cwd=Path(__file__).resolve().parent.parent, timeout=timeout)
        script = Path(work) / "train.py"
        script.write_text("import runpy, sys\nsys.argv[0] = 'spark_archive'\n"
                          "runpy.run_module('spark_archive', run_name='__main__')\n")
        conf = [x for k, v in TRAINING_CONF.items() for x in ("--conf", f"{k}={v}")]
        # Dumped without verifying Spark's jars, as both profiles run (``session.NO_VERIFY``).
        done = _submit(f"{NO_VERIFY} -XX:ArchiveClassesAtExit={tmp} {LOG_OFF}",
                       "--master", "local[2]", str(script), "--journals", str(journals), "--out", str(out),
                       "--plan", "spark", "--quiet", *conf, timeout=timeout)
    try:
        if done.returncode != 0 or not tmp.is_file() or not usable(tmp):
            return None
        os.replace(tmp, path)
        _prune(path)
        return path
    finally:
        tmp.unlink(missing_ok=True)


def _prune(keep: Path) -> None:
    """Drop all but the ``KEEP`` newest archives (``keep`` among them): 180 MB each."""
    others = sorted((p for p in keep.parent.glob(f"{PREFIX}*.jsa") if p != keep),
                    key=lambda p: p.stat().st_mtime, reverse=True)
    for old in others[KEEP - 1:]:
        old.unlink(missing_ok=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m spark_archive.cds",
        description="Build the class data sharing archive the archive job's JVM starts from (once).")
    parser.add_argument("--force", action="store_true", help="build it again")
    args = parser.parse_args(argv)
    t0 = time.perf_counter()
    before = archive_path()
    existed = before is not None and before.is_file()
    try:
        path = build(force=args.force)
    except (OSError, subprocess.SubprocessError) as exc:
        print(f"spark class archive: not built ({exc}); the archive job starts without it", file=sys.stderr)
        return 0
    if path is None:
        print("spark class archive: not built (no java, or the training run failed); "
              "the archive job starts without it", file=sys.stderr)
    elif existed and not args.force:
        print(f"spark class archive: {path}")
    else:
        print(f"spark class archive: built {path} ({path.stat().st_size / 2**20:.0f} MiB) "
              f"in {time.perf_counter() - t0:.1f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
