"""``python -m spark_archive --journals DIR --out DIR [--master URL]``: the mission archive."""
from __future__ import annotations

import argparse
import logging
import os
import sys
from pathlib import Path
from typing import NoReturn, Sequence

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
                        help="spark.sql.shuffle.partitions (default: Spark's, coalesced by AQE)")
    parser.add_argument("--driver-memory", default=None, metavar="SIZE",
                        help="spark.driver.memory, e.g. 4g (local mode: the whole job's memory)")
    parser.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                        help="extra Spark configuration (repeatable)")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    args = parser.parse_args(argv)
    for item in args.conf:
        if "=" not in item:
            parser.error(f"--conf {item!r}: expected KEY=VALUE")
    if args.report_rows < 0:
        parser.error("--report-rows must be >= 0")
    return args


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

    from .job import build_session, run_archive  # pyspark import is slow: only when needed

    conf = dict(item.split("=", 1) for item in args.conf)
    if args.shuffle_partitions:
        conf["spark.sql.shuffle.partitions"] = str(args.shuffle_partitions)
    if args.driver_memory:
        conf["spark.driver.memory"] = args.driver_memory
    try:
        spark = build_session(args.master, conf=conf)
    except Exception as exc:  # the JVM did not start or the master is unreachable
        print(f"error: cannot start Spark with master {args.master}: {str(exc).splitlines()[0]}",
              file=sys.stderr)
        return 1
    try:
        summary = run_archive(spark, args.journals, out, report_rows=args.report_rows)
    except JournalInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        print(f"error: archive job failed: {first}", file=sys.stderr)
        return 1
    finally:
        spark.stop()
    print(f"archived {summary['messages']} messages from {summary['files']} files "
          f"({summary['records']} records, {summary['bad_lines']} unparseable lines, "
          f"{summary['duplicate_lines']} duplicate lines, {summary['redeliveries']} re-deliveries) "
          f"for {len(summary['sites'])} sites in {summary['seconds']:.1f}s")
    print(f"  deliveries {summary['deliveries']}, late {summary['late_deliveries']}, "
          f"never arrived {summary['never_arrived']}")
    print(f"  outputs: {summary['out']}/{{{','.join(summary['outputs'])}}}")
    print(f"  summary: {os.path.join(summary['out'], 'summary.json')}")
    print(f"  report:  {summary['report']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
