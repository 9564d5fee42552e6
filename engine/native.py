"""The one registry of compiled kernels, and the switches that govern them.

A store may ship C twins of its hottest pure functions as
``engine/<store>/_native.c`` (built by ``setup.py`` into ``engine.<store>._native``
when a compiler is present).  Every twin is named in :data:`KERNELS`, beside its
pure-Python reference and what it does; this module imports every native module
and binds every kernel once, at import, and the stores take theirs with
``kernel("store.fn")`` into a module-level constant.  Nothing else in the package
imports a ``_native`` module.

The Python code is always the reference: a kernel is a pure function of bytes and
plain values, returning the same bytes, objects and errors as its reference
(``tests/<store>/test_<store>_native.py`` run both on valid, damaged and hostile
input, also under ASan/UBSan in ``tox -e sanitize``).

A C module learns the Python objects it builds or raises (a ``NamedTuple``, a
codec's exception) one way: at its first call, from its reference module, through
``native_bind`` of ``engine/native.h``; its module init imports nothing.

Switches (environment, read once at import):

* ``ENGINE_PURE_PYTHON=1``: no kernel is bound, every store runs its reference.
* ``ENGINE_REQUIRE_NATIVE=1``: a kernel that is not built, or does not load, is an
  ``ImportError`` at import (the sanitizer run must fail, not fall back and pass).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from importlib.machinery import ExtensionFileLoader, PathFinder
from importlib.util import module_from_spec
from types import ModuleType
from typing import Any, NamedTuple

#: Environment variable that disables every native accelerator when set non-empty.
PURE_PYTHON_ENV = "ENGINE_PURE_PYTHON"
#: Environment variable that makes a missing kernel an error at import.
REQUIRE_NATIVE_ENV = "ENGINE_REQUIRE_NATIVE"


class Kernel(NamedTuple):
    """One compiled function: where it lives, its pure reference, what it does."""

    module: str  #: the extension module, ``engine.<store>._native``
    function: str  #: its name in that module
    reference: str  #: the pure-Python reference, ``engine.<module>.<function>``
    does: str  #: one line for the docs' table


#: Every compiled kernel, by ``"<store>.<function>"``.  The README and
#: docs/architecture.md list exactly these (tests/docs/test_kernel_table.py).
KERNELS: dict[str, Kernel] = {
    "applog.crc_failures": Kernel(
        "engine.applog._native", "crc_failures", "engine.applog.codec.crc_failures",
        "the records of a batch whose CRC-32 does not match its `.crc` entry"),
    "applog.encode_batch": Kernel(
        "engine.applog._native", "encode_batch", "engine.applog.batch.encode_batch",
        "frames a batch of records, their index entries and checksums into the writer's buffers"),
    "events.batch_crcs": Kernel(
        "engine.events._native", "batch_crcs", "engine.events.sums.batch_crcs_py",
        "the CRC-32 of every batch in a buffer (the `data.crc` entries)"),
    "events.walk_runs": Kernel(
        "engine.events._native", "walk_runs", "engine.events.runs.walk_runs_py",
        "walks one id's chain of blocks through a window of the file's bytes into events, "
        "stopping at the first damage or at the next window to read"),
    "kv.decode_node": Kernel(
        "engine.kv._native", "decode_node", "engine.kv.node.decode_node",
        "decodes a leaf or branch page, checking every offset"),
    "kv.encode_branch": Kernel(
        "engine.kv._native", "encode_branch", "engine.kv.node.branch_image",
        "encodes a branch page"),
    "kv.find": Kernel(
        "engine.kv._native_descent", "find", "engine.kv.descent.find_image",
        "a get: the descent from the root to a key's leaf over verified page images, in one call"),
    "kv.leaf_items": Kernel(
        "engine.kv._native_descent", "leaf_items", "engine.kv.descent.leaf_items_image",
        "one leaf's keys and values over verified page images, in one call (a transaction's copy of a leaf)"),
    "kv.leaf_pairs": Kernel(
        "engine.kv._native_descent", "leaf_pairs", "engine.kv.descent.leaf_pairs_image",
        "one leaf of a scan over verified page images: its (key, value) pairs in a range, in one call"),
    "kv.diff_span": Kernel(
        "engine.kv._native", "diff_span", "engine.kv.node.diff_span",
        "where a node's new page image differs from its committed one (what a commit journals)"),
    "kv.encode_leaf": Kernel(
        "engine.kv._native", "encode_leaf", "engine.kv.node.leaf_image",
        "encodes a leaf page"),
    "queue.decode_batch": Kernel(
        "engine.queue._native", "decode_batch", "engine.queue.codec.decode_batch",
        "decodes the records of a journal from a position into `Put`s"),
    "queue.decode_columns": Kernel(
        "engine.queue._native", "decode_columns", "engine.queue.codec.decode_columns",
        "decodes a run of PUT records into columns (the readers' path)"),
    "queue.encode_check": Kernel(
        "engine.queue._native", "encode_check", "engine.queue.codec.encode_check",
        "the CHECK record (CRC-32 and length) after a batch of records"),
    "queue.encode_put": Kernel(
        "engine.queue._native", "encode_put", "engine.queue.codec.encode_put",
        "encodes one PUT record"),
    "streams.crc64": Kernel(
        "engine.streams._native", "crc64", "engine.streams.codec.crc64_reference",
        "the CRC-64/GO-ISO check code of a record (crcmod's semantics, `crc` chaining)"),
}


def _flag(name: str) -> bool:
    return os.environ.get(name, "") not in ("", "0")


def pure_python_forced() -> bool:
    """Whether ``ENGINE_PURE_PYTHON`` asks for the pure-Python code everywhere."""
    return _flag(PURE_PYTHON_ENV)


def _extension(name: str) -> ModuleType:
    """The extension module ``name`` (``engine.<store>._native``), loaded from its
    file beside the store's sources *without* importing the store's package: the
    packages import this registry, so going through them would be a cycle (and
    find this module half-initialised).  A kernel module imports nothing when it
    loads (see ``engine/native.h``), so it is a leaf."""
    if name in sys.modules:
        return sys.modules[name]
    package, _, leaf = name.rpartition(".")
    store_dir = os.path.join(os.path.dirname(os.path.abspath(__file__)), package.rpartition(".")[2])
    spec = PathFinder.find_spec(name, [store_dir])
    if spec is None or spec.loader is None or not isinstance(spec.loader, ExtensionFileLoader):
        raise ImportError(f"{name} is not built (no {leaf} extension in {store_dir})")
    module = module_from_spec(spec)
    spec.loader.exec_module(module)
    sys.modules[name] = module
    return module


def _bind() -> dict[str, Callable[..., Any]]:
    """Every kernel that is built, by name (none in pure mode); raises
    ``ImportError`` for a missing one when ``ENGINE_REQUIRE_NATIVE`` is set."""
    required = _flag(REQUIRE_NATIVE_ENV)
    if pure_python_forced():
        if required:
            raise ImportError(f"{REQUIRE_NATIVE_ENV} and {PURE_PYTHON_ENV} contradict each other")
        return {}
    bound: dict[str, Callable[..., Any]] = {}
    for name, (module, function, _, _) in KERNELS.items():
        try:
            fn: Callable[..., Any] = getattr(_extension(module), function)
        except (ImportError, AttributeError) as exc:
            if required:
                raise ImportError(f"{REQUIRE_NATIVE_ENV}: kernel {name} ({module}.{function}) "
                                  f"is not built or does not load: {exc}") from exc
            continue
        bound[name] = fn
    return bound


_BOUND = _bind()


def kernel(name: str) -> Callable[..., Any] | None:
    """The compiled kernel ``name`` (a key of :data:`KERNELS`), or ``None`` when it
    is not built or pure Python is forced (the caller then binds its reference)."""
    if name not in KERNELS:
        raise KeyError(f"no kernel {name!r} in engine.native.KERNELS")
    return _BOUND.get(name)
