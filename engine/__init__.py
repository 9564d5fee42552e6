"""engine: an embedded, durable storage engine for Python.

Stores (each on a documented on-disk format, see ``docs/formats/``):

* :class:`Queue` – persistent multi-reader queue (libkestrel journal format);
* :class:`PageStore` – transactional page store protected by the JRNL WAL;
* :class:`StreamJournal` – multiplexed stream journal (journald v2 format);
* :class:`AppendLog` – TTL'd append logs (LOG/IDX format);
* :class:`EventJournal` – event-sourcing journal (akka file-journal format);
* :class:`KV` – ordered key-value store: a B+tree in page-store transactions.

The store classes are imported lazily so that ``import engine`` stays cheap and a
program that uses one store does not load the others.
"""

from __future__ import annotations

import importlib
import os.path as _ospath
from typing import TYPE_CHECKING, Any

from engine.errors import (
    ClosedError,
    ConfigError,
    CorruptFileError,
    DiskFullError,
    EmptyError,
    EngineError,
    FormatError,
    FullError,
    LockedError,
    PageError,
    PoisonedError,
    RecoveryNeededError,
    SequenceNumberError,
    StreamRejected,
    UnknownFormatError,
)

# The README installs engine editable in setuptools' strict mode: the environment
# holds links to the checkout's files (which type checkers follow, unlike the
# default mode's import hook).  Looking for submodules in the checkout itself first
# keeps a module added to it since the install importable without reinstalling.
# In a regular install both paths are the same directory and nothing changes.
_checkout = _ospath.dirname(_ospath.realpath(__file__))
if _checkout not in __path__:
    __path__.insert(0, _checkout)

__version__ = "0.1.0"

_LAZY = {
    "Queue": "engine.queue",
    "PageStore": "engine.pages",
    "StreamJournal": "engine.streams",
    "AppendLog": "engine.applog",
    "EventJournal": "engine.events",
    "KV": "engine.kv",
}

if TYPE_CHECKING:  # pragma: no cover
    from engine.applog import AppendLog
    from engine.events import EventJournal
    from engine.kv import KV
    from engine.pages import PageStore
    from engine.queue import Queue
    from engine.streams import StreamJournal


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'engine' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "KV",
    "AppendLog",
    "ClosedError",
    "ConfigError",
    "CorruptFileError",
    "DiskFullError",
    "EmptyError",
    "EngineError",
    "EventJournal",
    "FormatError",
    "FullError",
    "LockedError",
    "PageError",
    "PageStore",
    "PoisonedError",
    "Queue",
    "RecoveryNeededError",
    "SequenceNumberError",
    "StreamJournal",
    "StreamRejected",
    "UnknownFormatError",
]


def __dir__() -> list[str]:
    """The public names only (the stores and the errors), not this module's helpers."""
    return sorted([*__all__, "__version__"])
