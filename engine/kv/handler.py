"""``engine inspect`` / ``engine verify`` support for key-value stores.

A key-value store *is* a page store (ENGPAGES) whose page 1 is the key-value
meta page (magic ``ENGKVDB1``), so this handler must be tried before the page
store's: it claims a store file only when that meta page is there, and leaves
the journal and checksum files (and plain page stores) to ``engine.pages``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping

from engine.formats import FormatHandler
from engine.fs import FileSystem, OpenMode
from engine.kv import node as nodes
from engine.kv.reader import KVReader
from engine.pages import RecoveryNeededError, diagnose, store_codec

_PAGE_SIZE = struct.Struct("<I")  # the page store header's page size, at offset 12


def is_kv_store(fs: FileSystem, path: str, head: bytes) -> bool:
    """Whether ``path`` (whose first bytes are ``head``) is a key-value store file."""
    if head[:8] != store_codec.MAGIC or len(head) < 16:
        return False
    (page_size,) = _PAGE_SIZE.unpack_from(head, 12)
    if not store_codec.valid_page_size(page_size):
        return False
    with fs.open(path, OpenMode.READ) as handle:
        return nodes.is_meta(handle.read_at(page_size, len(nodes.META_MAGIC)))


def _sniff(fs: FileSystem, path: str, head: bytes, is_dir: bool) -> bool:
    return not is_dir and is_kv_store(fs, path, head)


def _summarize(fs: FileSystem, path: str) -> Mapping[str, object]:
    out: dict[str, object] = dict(diagnose.summarize(fs, path))
    try:
        with KVReader.open(path, fs=fs) as reader:
            stats = reader.stats()
        out["kv txid"] = stats["txid"]
        out["kv trees"] = stats["trees"]
    except RecoveryNeededError as exc:
        out["kv trees"] = f"not read: {exc}"
    return out


def _stats(fs: FileSystem, path: str) -> Mapping[str, object]:
    """:func:`engine.pages.diagnose.file_stats` and the trees' figures."""
    out: dict[str, object] = dict(diagnose.file_stats(fs, path))
    try:
        with KVReader.open(path, fs=fs) as reader:
            stats = reader.stats()
    except RecoveryNeededError as exc:
        out.update({"kv_txid": None, "kv_trees": None, "kv_trees_not_read": str(exc)})
        return out
    out.update({"kv_txid": stats["txid"], "kv_trees": stats["trees"]})
    return out


def _verify(fs: FileSystem, path: str) -> list[str]:
    notes = diagnose.verify_files(fs, path)
    try:
        with KVReader.open(path, fs=fs) as reader:
            notes += reader.verify()
    except RecoveryNeededError as exc:
        notes.append(f"trees not checked: {exc}")
    return notes


HANDLER = FormatHandler(
    name="kv",
    description="key-value store (B+trees in an ENGPAGES page store, meta page ENGKVDB1)",
    sniff=_sniff,
    summarize=_summarize,
    verify=_verify,
    stats=_stats,
)
