"""What a store's files are, for ``engine inspect`` and ``verify``: the
:class:`FormatHandler` each store contributes from its ``handler`` module
(``engine.<store>.handler.HANDLER``).

Finding the handler for a path is :mod:`engine.detection`'s: it names the handler
modules, which import this module, so this module names none of them (no import
cycle, by string or otherwise).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from engine.fs import FileSystem

#: How many leading bytes of a file are given to ``sniff``.
HEAD_BYTES = 64


@dataclass(frozen=True)
class FormatHandler:
    """What ``engine inspect``/``verify`` need to know about one store's files.

    Every callback takes the file system first, like everything else that reads
    files (the tests pass the crash simulator).  ``sniff(fs, path, head, is_dir)``
    says whether ``path`` is this store's (``head`` is the first
    :data:`HEAD_BYTES` bytes of a file, empty for a directory).
    ``summarize(fs, path)`` returns name/value pairs to print (words and units);
    ``stats(fs, path)`` the same figures for ``engine inspect --json``: snake_case
    keys, raw numbers, times as integers whose unit ends the key.  ``verify(fs, path)``
    runs the store's full self-check and raises an :class:`EngineError` on any
    problem; it returns notes (for example a torn tail that would be cut on open).
    """

    name: str
    description: str
    sniff: Callable[[FileSystem, str, bytes, bool], bool]
    summarize: Callable[[FileSystem, str], Mapping[str, object]]
    verify: Callable[[FileSystem, str], list[str]]
    stats: Callable[[FileSystem, str], Mapping[str, object]]
