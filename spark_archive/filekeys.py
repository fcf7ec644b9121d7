"""How each journal line names its file, cheaply, through the one pass's shuffle.

Spark gives every line its file as ``_metadata.file_path``, a URI string of
about 80 bytes: too wide to shuffle with ten million lines, and too slow to look
up among every spelling of every path on each line (``file_index``: 4
CPU-seconds per 10M lines, a tenth of the parse). ``file_keys`` instead hashes
the string on each line (Spark's ``xxhash64``) and gives the driver, once, the
hash of every spelling of every path, to turn the hashes the side rows carry
back into paths.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import Column, SparkSession
from pyspark.sql import functions as F


def lookup(index: dict[str, int], column: Column) -> Column:
    """``index[column]`` (null when absent)."""
    if not index:
        return F.lit(None).cast("int")
    return F.try_element_at(F.create_map(*[x for name, i in index.items()
                                           for x in (F.lit(name), F.lit(i))]), column)


def _spellings(path: str) -> tuple[str, ...]:
    """Every way Spark's ``_metadata.file_path`` may name the local file ``path``.

    Spark writes a local file as ``file:/x`` there (``file:///x`` elsewhere) and
    percent-encodes what a URI must.
    """
    uri = Path(path).as_uri()                    # file:///x%20y
    return (uri, "file:" + uri[len("file://"):], "file://" + path, "file:" + path)


def file_index(paths: Sequence[str]) -> Column:
    """Index in ``paths`` of each line's file, from Spark's ``_metadata.file_path``
    (a lookup in a map of every spelling: linear in them, on every line)."""
    return lookup({name: i for i, path in enumerate(paths) for name in _spellings(path)},
                  F.col("_metadata.file_path"))


@dataclass(frozen=True)
class FileKeys:
    """How each line names its file in the shuffle, and how the driver reads it back.

    ``column`` is Spark's ``xxhash64`` of ``_metadata.file_path`` (see the module
    doc); ``by_hash`` maps the hash of every spelling of a path to its index.
    Should two paths' spellings share a hash, ``column`` is ``file_index`` and
    its values are indexes already (``by_hash`` is None).
    """

    column: Column
    by_hash: dict[int, int] | None

    def index(self, value: int | None) -> int | None:
        """Index in the paths of a ``column`` value (None: not one of the paths)."""
        if value is None or self.by_hash is None:
            return value
        return self.by_hash.get(value)


def file_keys(spark: SparkSession, paths: Sequence[str]) -> FileKeys:
    """``FileKeys`` for ``paths`` (see there)."""
    names = [(name, i) for i, path in enumerate(paths) for name in _spellings(path)]
    by_hash: dict[int, int] = {}
    if names:
        hashed = spark.createDataFrame(names, "name string, i int") \
            .select(F.xxhash64("name").alias("h"), "i").collect()
        for h, i in hashed:
            if by_hash.setdefault(h, i) != i:
                return FileKeys(file_index(paths), None)
    return FileKeys(F.xxhash64(F.col("_metadata.file_path")), by_hash)
