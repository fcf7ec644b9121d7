"""Durability (docs/rcm.md, "Durability"): the write-ahead log's records (``records``) and file (``wal``),
the state file (``state``), the log read back into each layer and the compaction rule (``recovery``), and
the clients' delivery numbering and replay log (``replay``)."""
