"""Stress adapter for the key-value store (``engine.kv``: B+trees in a page store).

Workload: transactions of 1 to 6 actions (put a self-describing payload under one
of 300 keys, small or spilling onto overflow pages; delete a key; delete the
next few keys from one on, found by a range scan), some rolled back on purpose,
explicit checkpoints and compactions.  512-byte pages and a 4 KiB checkpoint
threshold, so that nodes split and merge and the journal is reset often.

Oracle: a plain dict model.  After recovery the store must hold exactly the
state after the last acknowledged transaction, or after the one in flight
(checkpoints and compactions change no key); ``verify()`` (the page store's and
every tree's invariants) must pass.  Readers beside the writer read whole
snapshots: every value must be a whole payload and ``len()`` must match the
keys they iterate.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from typing import Any

from engine.errors import EngineError, LockedError
from engine.fs import FileSystem, OsFileSystem, make_dirs
from engine.kv import KV, KVReader
from engine.pages import RecoveryNeededError, store_codec
from stress.core import Op, Session, Step, StoreAdapter, Violation, count_read, payload, payload_ok

PAGE = 512
OPTIONS: dict[str, Any] = {"checkpoint_bytes": 4096, "checkpoint_max_bytes": 8192}
KEYS = 300

Model = dict[bytes, bytes]


def _path(root: str) -> str:
    return root.rstrip("/") + "/store.kv"


def _key(index: int) -> bytes:
    return b"key%04d" % (index % KEYS)


class _Rollback(Exception):
    """Raised inside a transaction to roll it back on purpose."""


def apply_tx(model: Model, actions: tuple[Any, ...]) -> Model:
    """The model after one committed transaction."""
    m = dict(model)
    for action in actions:
        kind = action[0]
        if kind == "put":
            m[_key(action[1])] = payload(0, action[2], action[3])
        elif kind == "del":
            m.pop(_key(action[1]), None)
        elif kind == "delrange":
            start = _key(action[1])
            for key in sorted(k for k in m if k >= start)[: action[2]]:
                del m[key]
    return m


class KVSession(Session):
    def __init__(self, fs: FileSystem, root: str) -> None:
        self.kv = KV.open(_path(root), page_size=PAGE, fs=fs, **OPTIONS)

    def run(self, op: Op) -> Any:
        kind = op[0]
        if kind == "checkpoint":
            self.kv.checkpoint()
            return ("checkpoint",)
        if kind == "compact":
            return ("compact", self.kv.compact())
        try:
            with self.kv.transaction() as tx:
                for action in op[1]:
                    if action[0] == "put":
                        tx[_key(action[1])] = payload(0, action[2], action[3])
                    elif action[0] == "del":
                        tx.delete(_key(action[1]))
                    elif action[0] == "delrange":
                        doomed = [k for k, _ in zip(tx.items(start=_key(action[1])), range(action[2]))]
                        for key, _ in doomed:
                            del tx[key]
                if kind == "rollback":
                    raise _Rollback()
        except _Rollback:
            return ("rollback",)
        return ("tx",)

    def close(self) -> None:
        self.kv.close()


def read_store(fs: FileSystem, root: str, *, readonly: bool = False) -> Model:
    """Open (recover unless ``readonly``), verify, and read every key."""
    kv: KV | KVReader = (
        KV.open_reader(_path(root), fs=fs) if readonly else KV.open(_path(root), create=False, fs=fs, **OPTIONS)
    )
    try:
        kv.verify()
        found = dict(kv.items())
        if len(kv) != len(found):
            raise Violation(f"len() says {len(kv)} keys, iteration found {len(found)}")
        return found
    finally:
        kv.close()


def _actions(rng: random.Random) -> tuple[Any, ...]:
    out: list[Any] = []
    for _ in range(rng.randint(1, 6)):
        r = rng.random()
        if r < 0.65:
            size = rng.choice([20, 60, 110, 400, 1500])
            out.append(("put", rng.randrange(KEYS), rng.randrange(2**40), size))
        elif r < 0.9:
            out.append(("del", rng.randrange(KEYS)))
        else:
            out.append(("delrange", rng.randrange(KEYS), rng.randint(1, 8)))
    return tuple(out)


def _describe(m: Model) -> str:
    return f"{len(m)} keys" + (f" from {min(m)!r} to {max(m)!r}" if m else "")


def _diff(found: Model, want: Model) -> str:
    for key in sorted(set(found) | set(want)):
        if found.get(key) != want.get(key):
            return f"; first differing key {key!r}"
    return ""


class KVAdapter(StoreAdapter):
    name = "kv"
    module = "engine.kv"
    concurrent_readers = True

    def workload(self, rng: random.Random, n: int) -> list[Op]:
        ops: list[Op] = []
        for _ in range(n):
            r = rng.random()
            if r < 0.82:
                ops.append(("tx", _actions(rng)))
            elif r < 0.92:
                ops.append(("rollback", _actions(rng)))
            elif r < 0.97:
                ops.append(("checkpoint",))
            else:
                ops.append(("compact",))
        return ops

    def is_write(self, op: Op) -> bool:
        return op[0] != "rollback"

    def prepare(self, fs: FileSystem, root: str) -> None:
        make_dirs(fs, root)

    def store_exists(self, fs: FileSystem, root: str) -> bool:
        path = _path(root)
        return fs.exists(path) and fs.file_size(path) >= store_codec.HEADER_SIZE

    def session(self, fs: FileSystem, root: str) -> Session:
        return KVSession(fs, root)

    def empty_model(self) -> Any:
        return {}

    def check(self, fs: FileSystem, root: str, base: Any, acked: list[Step], inflight: Op | None) -> Any:
        model: Model = base
        for step in acked:
            if step.op[0] == "tx":
                model = apply_tx(model, step.op[1])
        if not fs.exists(_path(root)):
            if model:
                raise Violation("the store file is gone")
            return {}
        found = read_store(fs, root)
        if found == model:
            return found
        if inflight is not None and inflight[0] == "tx":
            after = apply_tx(model, inflight[1])
            if found == after:
                return found
            raise Violation(
                f"state is neither after the last acknowledged transaction ({_describe(model)}) nor after the "
                f"one in flight ({_describe(after)}): {_describe(found)}{_diff(found, after)}"
            )
        raise Violation(
            f"state differs from the last acknowledged transaction ({_describe(model)}): "
            f"{_describe(found)}{_diff(found, model)}"
        )

    def snapshot(self, fs: FileSystem, root: str) -> Any:
        return read_store(fs, root, readonly=True)

    def reader_loop(self, root: str, stop: Callable[[], bool]) -> str | None:
        """Read whole snapshots beside the writer: every value a whole payload,
        keys ascending, ``len()`` equal to what the iteration found."""
        fs = OsFileSystem()
        kv: KVReader | None = None
        while not stop():
            try:
                if kv is None:
                    kv = KV.open_reader(_path(root), fs=fs)
                with kv.snapshot() as snap:
                    items = list(snap.items())
                    count = len(snap)
                keys = [k for k, _ in items]
                if keys != sorted(set(keys)) or count != len(items):
                    return f"a reader saw {len(items)} keys out of order or len() {count}"
                bad = next((k for k, v in items if not payload_ok(v)), None)
                if bad is not None:
                    return f"a reader saw a damaged value under {bad!r}"
                count_read()
            except (FileNotFoundError, RecoveryNeededError, LockedError):
                if kv is not None:
                    kv.close()
                kv = None
            except EngineError as exc:
                return f"a reader beside the writer got {type(exc).__name__}: {exc}"
            time.sleep(0.005)
        if kv is not None:
            kv.close()
        return None


ADAPTER = KVAdapter()
