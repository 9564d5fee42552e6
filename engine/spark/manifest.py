"""The manifest of a dataset written by the engine-log sink (pure: json and the fs seam).

A sink dataset is a directory whose ``_SHARDS.json`` lists the append logs
(shards, ``job-<id>/shard-...``) that make it up; see :mod:`engine.spark.sink`
for the commit protocol and ``docs/pipeline.md`` for the layout.  This module
only reads it, without numpy, pyarrow or pyspark, so that ``engine verify`` and
``engine inspect`` recognise sink datasets without the ``spark`` extra.
"""

from __future__ import annotations

import json

from engine.errors import CorruptFileError
from engine.fs import FileSystem

MANIFEST = "_SHARDS.json"
JOB_PREFIX = "job-"


def join(*parts: str) -> str:
    """Join path parts with '/' (the FileSystem seam takes POSIX paths)."""
    out = parts[0]
    for p in parts[1:]:
        out = out.rstrip("/") + "/" + p
    return out


def read_document(fs: FileSystem, path: str) -> dict[str, object] | None:
    """The manifest of the dataset at ``path`` as a dict, or None if it has none."""
    mpath = join(path, MANIFEST)
    if not fs.exists(mpath):
        return None
    with fs.open(mpath) as h:
        raw = h.read_all()
    try:
        doc = json.loads(raw.decode("utf-8"))
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        shards = doc["shards"]
        if not isinstance(shards, list) or not all(isinstance(s, str) for s in shards):
            raise ValueError("shards is not a list of names")
    except (ValueError, KeyError, UnicodeDecodeError) as exc:
        raise CorruptFileError(mpath, 0, "a JSON manifest with a list of shards", str(exc)) from exc
    return doc


def read_manifest(fs: FileSystem, path: str) -> list[str] | None:
    """The shard names a sink manifest lists, or None if ``path`` has no manifest."""
    doc = read_document(fs, path)
    return None if doc is None else list(doc["shards"])  # type: ignore[call-overload]
