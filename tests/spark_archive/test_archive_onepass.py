"""The one pass reads the journals once: one scan, one shuffle shared by both aggregations."""
from __future__ import annotations

from pathlib import Path

from spark_archive import onepass
from spark_archive.journals import list_journal_files


def test_both_aggregations_share_one_scan_and_exchange(spark, known_journals: Path) -> None:
    files = list_journal_files(known_journals)
    sites = sorted({f.path_site for f in files if f.path_site})
    with onepass.shared_shuffle(spark):
        both = onepass.one_pass(onepass.shuffled_lines(spark, [f.path for f in files], sites, 4), sites)
        rows = both.collect()
        plan = both._jdf.queryExecution().executedPlan().toString()
    assert plan.count("ReusedExchange") == 1
    assert plan.count("FileScan json") == 1
    assert sum(1 for r in rows if r["part"] == "m" and r["msg_id"]) == 4
    # The rule is back on once the query has run.
    assert "ColumnPruning" not in (spark.conf.get("spark.sql.optimizer.excludedRules", "") or "")


def test_without_the_shared_shuffle_each_branch_scans(spark, known_journals: Path) -> None:
    """What ``shared_shuffle`` is for: left alone, Spark prunes each branch and scans twice."""
    files = list_journal_files(known_journals)
    sites = sorted({f.path_site for f in files if f.path_site})
    both = onepass.one_pass(onepass.shuffled_lines(spark, [f.path for f in files], sites, 4), sites)
    both.collect()
    plan = both._jdf.queryExecution().executedPlan().toString()
    assert plan.count("FileScan json") == 2


def test_journals_outside_the_site_layout_take_a_second_pass(spark, known_journals: Path,
                                                             tmp_path: Path) -> None:
    """No ``<site>/journal/`` path names a site: the first pivot is empty, so the message
    records name unknown sites and the pass runs again with them."""
    for path in sorted(known_journals.rglob("*.jsonl")):
        flat = "-".join(path.relative_to(known_journals).parts)
        (tmp_path / flat).write_bytes(path.read_bytes())
    mission = onepass.read_mission(spark, list_journal_files(tmp_path))
    try:
        assert mission.passes == 2
        assert mission.sites == ["A", "B", "C", "E"]      # D's journal is empty: no name for it
        assert sorted(r["msg_id"] for r in mission.messages.collect()) == ["A:1", "B:1", "B:2", "C:1"]
    finally:
        mission.unpersist()


def test_status_only_journals_outside_the_site_layout(spark, tmp_path: Path) -> None:
    """No path site and no message at all: an empty pivot, no messages, the events kept."""
    (tmp_path / "only.jsonl").write_text(
        '{"kind":"status","site":"X","at":1.0,"peer":"Y","status":"connected"}\n')
    mission = onepass.read_mission(spark, list_journal_files(tmp_path))
    try:
        assert (mission.passes, mission.sites, mission.messages.count()) == (1, ["X"], 0)
        assert [tuple(r) for r in mission.status.collect()] == [("X", "Y", 1.0, "connected")]
    finally:
        mission.unpersist()


def test_lines_name_their_file_by_a_hash_the_driver_reads_back(spark, known_journals: Path,
                                                               tmp_path: Path) -> None:
    """Each line carries the hash of Spark's name for its file; every spelling of every
    path hashes back to that path, so the scan table counts lines per real path."""

    from spark_archive.filekeys import FileKeys, file_name
    first = sorted(known_journals.rglob("*.jsonl"))[0]
    extra = []
    # Paths Spark's URI percent-encodes: a space; and Java's way, not Python's: it
    # encodes the space but keeps "ô" and "+" (``filekeys._java_quoted``).
    for name in ("a site", "hôpital a+b"):
        journal = tmp_path / name / "journal"
        journal.mkdir(parents=True)
        (journal / "0001.jsonl").write_bytes(first.read_bytes())
        extra.append(str(journal / "0001.jsonl"))
    paths = [f.path for f in list_journal_files(known_journals)] + extra
    keys = FileKeys.hashed()
    files_of = keys.decode(spark, paths)
    assert files_of is not None and sorted(set(files_of.values())) == list(range(len(paths)))
    read = spark.read.text(paths).select(keys.column.alias("k"), file_name().alias("name"))
    seen = {files_of.get(r["k"]) for r in read.distinct().collect()}
    assert None not in seen
    assert {paths[i] for i in seen} == {p for p in paths if Path(p).stat().st_size}


def test_two_paths_whose_names_hash_alike_are_read_again_by_index(spark, known_journals: Path,
                                                                 monkeypatch) -> None:
    """Should two paths' spellings hash alike, the pass runs again with each line
    carrying its path's index, and the scan table still names every file."""
    from spark_archive import filekeys
    files = list_journal_files(known_journals)
    real = filekeys._spellings
    monkeypatch.setattr(filekeys, "_spellings", lambda path: (*real(path), "shared"))
    assert filekeys.FileKeys.hashed().decode(spark, [f.path for f in files]) is None
    mission = onepass.read_mission(spark, files)
    assert mission.passes == 2
    named = {r["file"] for r in mission.scan}
    assert named == {f.path for f in files if f.size}
    mission.unpersist()
