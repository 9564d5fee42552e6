"""The Python reference reader of ``engine-kv`` batch reads, without Spark.

Spark's ``engine-kv`` is the JVM connector (``engine.spark.KvSource``,
``engine/spark/java``); this module is no Spark data source any more.
:class:`KVSourceReader` is the reference the connector's parity tests compare
it with (key for key, error for error: ``tests/spark/test_spark_jvm_kv_parity.py``,
``test_spark_jvm_kv.py``), driven directly, and what ``stress/readpaths`` reads
damaged stores through::

    reader = KVSourceReader({"path": "/data/app.kv", "tree": "users"}, KV_SCHEMA)
    for part in reader.partitions():
        for batch in reader.read(part):   # pyarrow RecordBatches
            ...

One row per key: ``store`` (the file's name), ``tree``, ``key``, ``value``
(binary), in key order within each partition.  Key ranges are options:
``start`` (inclusive), ``stop`` (exclusive) and ``prefix`` bound the scan
itself, so only the leaves in range are read; ``hex=true`` gives them in hex
instead of UTF-8.  ``partitions`` (default 4) splits the range at separator keys
of the tree's upper levels.  Each partition reads through one read-only snapshot
(``KV.open_reader(path)``), so it never sees half a commit; beside a
live writer, two partitions may see different commits.  ``mode`` says what
damage (a ``CorruptFileError``) does.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceReader, InputPartition
from pyspark.sql.types import BinaryType, StringType, StructField, StructType

from engine.errors import ConfigError
from engine.fs import FileSystem, resolve
from engine.kv import KVReader
from engine.kv.api import DEFAULT_TREE, prefix_end, tree_label, tree_name
from engine.kv.node import Branch
from engine.spark.batches import guarded, record_batch, repeat_string
from engine.spark.options import (
    bool_option,
    check_options,
    input_paths,
    int_option,
    lower,
    mode_option,
    read_schema,
    user_schema,
)

SOURCE = "engine-kv"
OPTIONS = ("tree", "start", "stop", "prefix", "hex", "partitions", "mode")
BATCH_ROWS = 4096

#: engine-kv: one row per key.
KV_SCHEMA = StructType(
    [
        StructField("store", StringType(), False),  # the store file's name
        StructField("tree", StringType(), False),  # the tree's name ("" for the default tree)
        StructField("key", BinaryType(), False),
        StructField("value", BinaryType(), False),
    ]
)


class KVPartition(InputPartition):
    """Keys ``[start, stop)`` of one tree of one store (None: unbounded)."""

    def __init__(self, path: str, tree: bytes, start: bytes | None, stop: bytes | None) -> None:
        super().__init__((path, tree, start, stop))
        self.path = path
        self.tree = tree
        self.start = start
        self.stop = stop


def key_bounds(opts: dict[str, str]) -> tuple[bytes | None, bytes | None]:
    """The (start, stop) the options ask for; a prefix narrows them further."""
    as_hex = bool_option(opts, "hex", False)

    def raw(name: str) -> bytes | None:
        text = opts.get(name)
        if text is None:
            return None
        try:
            return bytes.fromhex(text) if as_hex else text.encode()
        except ValueError as exc:
            raise ConfigError(f"{SOURCE}: option {name} is not hex: {text!r}") from exc

    start, stop, prefix = raw("start"), raw("stop"), raw("prefix")
    if prefix:
        start = prefix if start is None else max(start, prefix)
        end = prefix_end(prefix)
        if end is not None:
            stop = end if stop is None else min(stop, end)
    return start, stop


def split_points(reader: KVReader, tree: bytes, start: bytes | None, stop: bytes | None, parts: int) -> list[bytes]:
    """Up to ``parts - 1`` keys inside (start, stop) that cut the range evenly,
    taken from the separators of the tree's upper levels (no leaf is read)."""
    if parts <= 1:
        return []
    with reader.snapshot():
        info = reader.tree_info(tree)
        if info is None or info.height == 1:
            return []
        level = [info.root]
        seps: list[bytes] = []
        for _ in range(info.height - 1):
            seps, children = [], []
            for page in level:
                node = reader.node(page)
                assert isinstance(node, Branch)
                seps += node.keys
                children += node.children
            inside = [k for k in seps if (start is None or k > start) and (stop is None or k < stop)]
            if len(inside) >= parts - 1 or len(children) > 4096:
                seps = inside
                break
            seps = inside
            level = children
    if len(seps) <= parts - 1:
        return seps
    step = len(seps) / parts
    return sorted({seps[int(step * i)] for i in range(1, parts)})


def read_keys(schema: StructType, part: KVPartition, fs: FileSystem | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of one partition, read through one snapshot."""
    name = part.path.rstrip("/").rsplit("/", 1)[-1]
    label = tree_label(part.tree)
    with KVReader.open(part.path, fs=resolve(fs)) as reader:
        if part.tree != DEFAULT_TREE and label not in reader.trees():
            return
        view = reader if part.tree == DEFAULT_TREE else reader.tree(part.tree)
        keys: list[bytes] = []
        values: list[bytes] = []
        for key, value in view.items(part.start, part.stop):
            keys.append(key)
            values.append(value)
            if len(keys) == BATCH_ROWS:
                yield _batch(schema, name, label, keys, values)
                keys, values = [], []
        if keys:
            yield _batch(schema, name, label, keys, values)


def _batch(schema: StructType, name: str, tree: str, keys: list[bytes], values: list[bytes]) -> pa.RecordBatch:
    n = len(keys)
    cols = {  # built only when the schema names them
        "store": lambda: repeat_string(name, n),
        "tree": lambda: repeat_string(tree, n),
        "key": lambda: pa.array(keys, type=pa.binary()),
        "value": lambda: pa.array(values, type=pa.binary()),
    }
    return record_batch(schema, cols, n)


class KVSourceReader(DataSourceReader):
    """Batch reader: key ranges of one tree of each store."""

    def __init__(self, options: dict[str, str], schema: StructType, fs: FileSystem | None = None) -> None:
        opts = lower(options)
        check_options(SOURCE, opts, OPTIONS)
        self.schema = user_schema(SOURCE, read_schema(KV_SCHEMA, opts), schema, opts)
        self.paths = input_paths(SOURCE, opts)
        self.tree = tree_name(opts.get("tree", ""))
        self.start, self.stop = key_bounds(opts)
        self.parts = int_option(opts, "partitions", 4) or 1
        self.mode = mode_option(opts)
        self.fs = fs

    def partitions(self) -> Sequence[InputPartition]:
        out: list[InputPartition] = []
        if self.start is not None and self.stop is not None and self.start >= self.stop:
            return out
        for path in self.paths:
            with KVReader.open(path, fs=resolve(self.fs)) as reader:
                cuts = split_points(reader, self.tree, self.start, self.stop, self.parts)
            bounds = [self.start, *cuts, self.stop]
            out.extend(KVPartition(path, self.tree, a, b) for a, b in itertools.pairwise(bounds))
        return out

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:  # type: ignore[override]
        if not isinstance(partition, KVPartition):
            return  # an empty plan is read as one InputPartition(None)
        name = partition.path.rstrip("/").rsplit("/", 1)[-1]
        yield from guarded(
            self.schema,
            self.mode,
            read_keys(self.schema, partition, self.fs),
            {"store": name, "tree": partition.tree.decode(errors="replace")},
            partition.path,
        )

