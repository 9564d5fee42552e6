"""``engine inspect`` / ``engine verify`` support for datasets written by the engine-log sink.

A sink dataset is a directory with a ``_SHARDS.json`` manifest listing append
logs (shards).  Verifying it checks the manifest, that every listed shard
exists, and each shard with the append log's own self-check
(:func:`engine.applog.handler.verify`: every entry, record and ``.crc``
checksum); job directories no manifest lists are notes (``engine spark
cleanup`` removes them).  Imports neither numpy, pyarrow nor pyspark, so it
works without the ``spark`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping

from engine.applog import handler as applog_handler
from engine.applog.log import AppendLog
from engine.errors import CorruptFileError
from engine.formats import FormatHandler
from engine.fs import FileSystem
from engine.spark.manifest import JOB_PREFIX, MANIFEST, join, read_document, read_manifest


def _sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    return is_dir and fs.exists(join(path, MANIFEST))


def stats(fs: FileSystem, path: str) -> Mapping[str, object]:
    """Shards, records, the streams' last published batches and the unpublished
    job directories of a sink dataset, as numbers."""
    doc = read_document(fs, path) or {}
    shards = list(doc.get("shards", []))  # type: ignore[call-overload]
    records = 0
    for name in shards:
        with AppendLog.open_reader(join(path, name), fs=fs) as reader:
            records += reader.next_index - reader.first_index
    streams = doc.get("streams")
    return {
        "shards": len(shards),
        "records": records,
        "streams": dict(streams) if isinstance(streams, dict) else {},
        "unpublished_job_directories": len(_unlisted(fs, path, shards)),
    }


def summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    """:func:`stats` in words."""
    raw = stats(fs, path)
    out: dict[str, object] = {"shards": raw["shards"], "records": raw["records"]}
    streams = raw["streams"]
    if isinstance(streams, dict) and streams:
        out["streams (last published batch)"] = ", ".join(f"{k}={v}" for k, v in sorted(streams.items()))
    if raw["unpublished_job_directories"]:
        out["unpublished job directories"] = raw["unpublished_job_directories"]
    return out


def _unlisted(fs: FileSystem, path: str, shards: list[str]) -> list[str]:
    return [join(path, e) for e in sorted(fs.listdir(path))
            if e.startswith(JOB_PREFIX) and not any(s.startswith(e + "/") for s in shards)]


def verify(fs: FileSystem, path: str) -> list[str]:
    """The manifest parses, every listed shard exists and passes the append log's
    own verify; returns notes (records per shard, unpublished job directories)."""
    listed = read_manifest(fs, path)
    if listed is None:
        raise CorruptFileError(join(path, MANIFEST), 0, "a sink manifest", "no such file")
    notes = []
    for name in listed:
        shard = join(path, name)
        if not fs.isdir(shard):
            raise CorruptFileError(join(path, MANIFEST), 0, f"shard {name!r} to exist", "it is missing")
        for note in applog_handler.verify(fs, shard):
            notes.append(f"{name}: {note}")
        with AppendLog.open_reader(shard, fs=fs) as reader:
            notes.append(f"{name}: {reader.next_index - reader.first_index} records")
    notes.extend(f"{d}: not published (engine spark cleanup removes it)" for d in _unlisted(fs, path, listed))
    return notes


HANDLER = FormatHandler(
    name="spark-sink",
    description="dataset written by the engine-log Spark sink (a manifest of append-log shards)",
    sniff=_sniff,
    summarize=summarize,
    verify=verify,
    stats=stats,
)
