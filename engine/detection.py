"""Recognising engine's files and directories, for ``engine inspect`` and ``verify``.

Each store contributes one :class:`~engine.formats.FormatHandler` from its
``handler`` module (``engine.<store>.handler.HANDLER``).  Detection goes by magic
bytes for files and by file names for the directory-shaped stores.
"""

from __future__ import annotations

import importlib

from engine.errors import UnknownFormatError
from engine.formats import HEAD_BYTES, FormatHandler
from engine.fs import FileSystem, resolve

#: The stores' handler modules, in the order detection tries them.
HANDLER_MODULES = (
    "engine.queue.handler",
    "engine.kv.handler",  # a KV store is a page store file: before the page store
    "engine.pages.handler",
    "engine.streams.handler",
    "engine.spark.handler",  # a sink dataset: before the append log (its shards are logs)
    "engine.applog.handler",
    "engine.events.handler",
)


def handlers() -> list[FormatHandler]:
    """Every store's handler, in detection order.

    Every store is part of engine: a handler module that fails to import raises
    an :class:`ImportError` naming it (the cause chained), never a store skipped,
    which would make its files "unrecognised".
    """
    found = []
    for module_name in HANDLER_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise ImportError(
                f"the format handler {module_name} failed to import ({type(exc).__name__}: {exc})",
                name=module_name,
            ) from exc
        found.append(module.HANDLER)
    return found


def detect(path: str, fs: FileSystem | None = None) -> FormatHandler:
    """The handler that recognises ``path``; raises UnknownFormatError otherwise
    (OSError when ``path`` cannot be looked at, e.g. permission denied)."""
    fs = resolve(fs)
    if not fs.exists(path):
        # exists() says False for a path behind a directory we may not search as
        # well: that is "permission denied" (the OS's error), not "no such file".
        denied = fs.lookup_error(path)
        if denied is not None:
            raise denied
        raise UnknownFormatError(f"{path}: no such file or directory")
    is_dir = fs.isdir(path)
    head = b""
    if not is_dir:
        with fs.open(path) as handle:
            head = handle.read_at(0, HEAD_BYTES)
    for handler in handlers():
        if handler.sniff(fs, path, head, is_dir):
            return handler
    kinds = ", ".join(h.name for h in handlers())
    what = "directory" if is_dir else f"file (first bytes {head[:8].hex(' ') or 'none: empty'})"
    raise UnknownFormatError(f"{path}: not a {kinds} file or directory: unrecognised {what}")
