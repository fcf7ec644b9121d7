"""``python -m spark_archive --journals DIR --out DIR [--master URL]``: the mission archive."""
from __future__ import annotations

import argparse
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from .journals import JournalInputError, list_journal_files


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """Bad arguments: one line on stderr, exit 2."""
        self.exit(2, f"error: {message} (see --help)\n")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    """Parse the command line."""
    parser = _Parser(
        prog="python -m spark_archive",
        description="Merge every site's journal into one globally ordered transcript per room, "
                    "with divergence, latency and connectivity tables and an HTML report.")
    parser.add_argument("--journals", required=True, metavar="DIR",
                        help="mission data_dir (<site>/journal/*.jsonl) or any tree of *.jsonl files")
    parser.add_argument("--out", required=True, metavar="DIR", help="output directory")
    parser.add_argument("--master", default="local[*]", metavar="URL",
                        help="Spark master: local[*] (default), local[N], spark://HOST:PORT, ...")
    parser.add_argument("--report-rows", type=int, default=200, metavar="N",
                        help="transcript rows shown per room in report.html (default 200)")
    parser.add_argument("--shuffle-partitions", type=int, default=None, metavar="N",
                        help="spark.sql.shuffle.partitions (default: sized to the journals)")
    parser.add_argument("--driver-memory", default=None, metavar="SIZE",
                        help="spark.driver.memory, e.g. 4g (local mode: the whole job's memory)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark configuration (repeatable)")
    parser.add_argument("--plan", choices=("auto", "spark", "driver"), default="auto",
                        help="spark: compute with Spark; driver: compute in this process and use "
                             "Spark to write (small missions); auto (default): driver for local "
                             "masters and journals up to 16 MiB")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    for item in args.conf:
        if "=" not in item:
            parser.error(f"--conf {item!r}: expected KEY=VALUE")
    if args.report_rows < 0:
        parser.error("--report-rows must be >= 0")
    return args


class SessionError(Exception):
    """Spark could not start."""


class _SessionStart:
    """The SparkSession, starting in a thread of its own; calling it waits for it."""

    def __init__(self, start: Callable[[], Any]) -> None:
        self._session: Any = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(start,), daemon=True)
        self._thread.start()

    def _run(self, start: Callable[[], Any]) -> None:
        try:
            self._session = start()
        except BaseException as exc:  # reported to whoever waits for the session
            self._error = exc

    def join(self) -> None:
        self._thread.join()
        if self._error is not None:
            raise SessionError((str(self._error).strip().splitlines() or [type(self._error).__name__])[0])

    def __call__(self) -> Any:
        self.join()
        return self._session

    def stop(self) -> None:
        self._thread.join()
        if self._session is not None:
            self._session.stop()


def _import_report() -> None:
    try:
        from . import report  # noqa: F401
    except Exception:  # the job imports it again and reports the error there
        pass


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(argv)
    try:
        files = list_journal_files(args.journals)
    except JournalInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"error: --out {args.out}: exists and is not a directory", file=sys.stderr)
        return 2
    log = logging.getLogger("spark_archive")
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s spark_archive: %(message)s", "%H:%M:%S"))
    log.addHandler(handler)
    log.setLevel(logging.WARNING if args.quiet else logging.INFO)
    log.info("%d journal files, %.1f MB, master %s", len(files),
             sum(f.size for f in files) / 1e6, args.master)

    # The report's plotting library loads while the JVM starts (the driver only waits then).
    threading.Thread(target=_import_report, daemon=True).start()
    from .job import run_archive  # pyspark import is slow: only when needed
    from .session import build_session, choose_plan

    conf = dict(item.split("=", 1) for item in args.conf)
    if args.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(args.shuffle_partitions)
    if args.driver_memory:
        conf["spark.driver.memory"] = args.driver_memory
    input_bytes = sum(f.size for f in files)
    plan = choose_plan(args.master, input_bytes) if args.plan == "auto" else args.plan
    # The driver plan reads and computes while the JVM starts; the Spark plan needs it first.
    session = _SessionStart(lambda: build_session(args.master, conf=conf, input_bytes=input_bytes))
    if plan == "spark":
        session.join()
    try:
        summary = run_archive(session, args.journals, out, report_rows=args.report_rows, plan=plan)
    except SessionError as exc:  # the JVM did not start or the master is unreachable
        print(f"error: cannot start Spark with master {args.master}: {exc}", file=sys.stderr)
        return 1
    except JournalInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"error: archive job failed: {first}", file=sys.stderr)
        return 1
    finally:
        session.stop()
    print(f"archived {summary['messages']} messages from {summary['files']} files "
          f"({summary['records']} records, {summary['bad_lines']} unparseable lines, "
          f"{summary['duplicate_lines']} duplicate lines, {summary['redeliveries']} re-deliveries) "
          f"for {len(summary['sites'])} sites in {summary['seconds']:.1f}s")
    print(f"  deliveries {summary['deliveries']}, late {summary['late_deliveries']}, "
          f"never arrived {summary['never_arrived']}")
    labeled = [name for name in summary["labels"] if name != "unlabeled"]
    print(f"  leaks: {summary['leaks']}" + (f" ({len(labeled)} labels)" if labeled else " (unlabeled journals)"))
    print(f"  outputs: {summary['out']}/{{{','.join(summary['outputs'])}}}")
    print(f"  summary: {os.path.join(summary['out'], 'summary.json')}")
    print(f"  report:  {summary['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
