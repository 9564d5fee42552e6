"""Stress adapter for the page store (``engine.pages``, store file + JRNL journal).

Workload: transactions of 1 to 4 actions (allocate a page and write into it, write
into a live page, free a live page), some rolled back on purpose, and explicit
checkpoints.  512-byte pages and a 2 KiB checkpoint threshold, so that the journal
is reset often.

Oracle (issue 9: "the state equals some committed prefix that includes every
returned commit"): a pure model of the store (LIFO free list: a freed page is
pushed at the head, allocation pops the head or appends a page; allocated pages
are zero-filled) computes the logical state, page count, free list in order and
every live page's bytes, after each transaction.  After recovery the store must
show exactly the state after the last acknowledged transaction, or after the
transaction in flight; ``verify()`` must pass.  Page ids returned by ``allocate``
are checked against the model as the workload runs.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from engine.errors import EngineError, LockedError
from engine.fs import FileSystem, OsFileSystem, make_dirs
from engine.pages import PageError, PageReader, PageStore, RecoveryNeededError, store_codec
from stress.core import Op, Session, Step, StoreAdapter, Violation, count_read, payload

PAGE = 512
# Checkpoints every 2 KB, or up to 4 KB while many pages are pending (the adaptive
# policy of the defaults, scaled down so that stress runs reach it often).
OPTIONS: dict[str, Any] = {"checkpoint_bytes": 2048, "checkpoint_max_bytes": 4096}
# Every third writer session writes committed pages to the store file at each
# commit (apply="commit"), the others at checkpoints: a store one left behind
# after a crash is recovered by a writer of the other kind too.
_sessions = itertools.count()


def _path(root: str) -> str:
    return root.rstrip("/") + "/store.db"


class _Rollback(Exception):
    """Raised inside a transaction to roll it back on purpose."""


@dataclass
class PagesModel:
    """Logical state: page count, free list (next allocation first), live pages."""

    page_count: int = 0
    free: list[int] = field(default_factory=list)
    pages: dict[int, bytes] = field(default_factory=dict)

    def copy(self) -> PagesModel:
        return PagesModel(self.page_count, list(self.free), dict(self.pages))


def apply_tx(model: PagesModel, actions: tuple[Any, ...]) -> tuple[PagesModel, list[int]]:
    """The model after one committed transaction, and the pages it allocated."""
    m = model.copy()
    allocated = []
    for action in actions:
        kind = action[0]
        if kind == "alloc":
            if m.free:
                page = m.free.pop(0)
            else:
                m.page_count += 1
                page = m.page_count
            m.pages[page] = bytes(PAGE)
            allocated.append(page)
            _write(m, page, action[1], action[2], action[3])
        elif kind == "write":
            live = sorted(m.pages)
            if live:
                _write(m, live[action[1] % len(live)], action[2], action[3], action[4])
        elif kind == "free":
            live = sorted(m.pages)
            if live:
                page = live[action[1] % len(live)]
                del m.pages[page]
                m.free.insert(0, page)
    return m, allocated


def _write(m: PagesModel, page: int, tag: int, size: int, offset: int) -> None:
    data = payload(0, tag, size)
    buf = bytearray(m.pages[page])
    buf[offset : offset + size] = data
    m.pages[page] = bytes(buf)


class PagesSession(Session):
    def __init__(self, fs: FileSystem, root: str) -> None:
        apply = "commit" if next(_sessions) % 3 == 2 else "checkpoint"
        self.store = PageStore.open(_path(root), page_size=PAGE, fs=fs, apply=apply, **OPTIONS)

    def run(self, op: Op) -> Any:
        if op[0] == "checkpoint":
            self.store.checkpoint()
            return ("checkpoint",)
        allocated: list[int] = []
        try:
            with self.store.transaction() as tx:
                live = sorted(self.store.live_pages)
                for action in op[1]:
                    kind = action[0]
                    if kind == "alloc":
                        page = tx.allocate()
                        allocated.append(page)
                        live = sorted([*live, page])
                        tx.write(page, action[3], payload(0, action[1], action[2]))
                    elif kind == "write" and live:
                        tx.write(live[action[1] % len(live)], action[4], payload(0, action[2], action[3]))
                    elif kind == "free" and live:
                        page = live[action[1] % len(live)]
                        tx.free(page)
                        live.remove(page)
                if op[0] == "rollback":
                    raise _Rollback()
        except _Rollback:
            return ("rollback",)
        return ("tx", tuple(allocated))

    def close(self) -> None:
        self.store.close()


def read_store(fs: FileSystem, root: str, *, readonly: bool = False) -> PagesModel:
    """Open (recover), verify, and read the logical state."""
    store: PageStore | PageReader
    if readonly:
        store = PageStore.open_reader(_path(root), fs=fs)
    else:
        store = PageStore.open(_path(root), fs=fs, create=False, **OPTIONS)
    try:
        store.verify()
        free = store.free_pages
        live = [p for p in range(1, store.page_count + 1) if p not in set(free)]
        return PagesModel(store.page_count, list(free), {p: store.read(p) for p in live})
    finally:
        store.close()


def _actions(rng: random.Random) -> tuple[Any, ...]:
    out: list[Any] = []
    for _ in range(rng.randint(1, 4)):
        r = rng.random()
        size = rng.randint(40, 160)
        if r < 0.4:
            out.append(("alloc", rng.randrange(2**40), size, rng.randrange(PAGE - size + 1)))
        elif r < 0.8:
            out.append(("write", rng.randrange(16), rng.randrange(2**40), size, rng.randrange(PAGE - size + 1)))
        else:
            out.append(("free", rng.randrange(16)))
    return tuple(out)


def _describe(m: PagesModel) -> str:
    return f"{m.page_count} pages, free {m.free}, live {sorted(m.pages)}"


class PagesAdapter(StoreAdapter):
    name = "pages"
    module = "engine.pages"
    concurrent_readers = True

    def workload(self, rng: random.Random, n: int) -> list[Op]:
        ops: list[Op] = []
        for _ in range(n):
            r = rng.random()
            if r < 0.8:
                ops.append(("tx", _actions(rng)))
            elif r < 0.9:
                ops.append(("rollback", _actions(rng)))
            else:
                ops.append(("checkpoint",))
        return ops

    def is_write(self, op: Op) -> bool:
        return op[0] != "rollback"

    def prepare(self, fs: FileSystem, root: str) -> None:
        make_dirs(fs, root)

    def store_exists(self, fs: FileSystem, root: str) -> bool:
        """The store file with its whole header.  A crash while creating the store
        can leave only the writer's lock file (taken first) or an empty store file:
        debris, not a store, so creating it again may be interrupted the same way."""
        path = _path(root)
        return fs.exists(path) and fs.file_size(path) >= store_codec.HEADER_SIZE

    def session(self, fs: FileSystem, root: str) -> Session:
        return PagesSession(fs, root)

    def empty_model(self) -> Any:
        return PagesModel()

    def check(self, fs: FileSystem, root: str, base: Any, acked: list[Step], inflight: Op | None) -> Any:
        model = base
        for step in acked:
            if step.op[0] != "tx":
                continue
            model, allocated = apply_tx(model, step.op[1])
            if tuple(allocated) != tuple(step.result[1]):
                raise Violation(f"allocate returned pages {step.result[1]}, the model expected {allocated}")
        if not fs.exists(_path(root)):
            if model.pages or model.page_count:
                raise Violation("the store file is gone")
            return PagesModel()
        found = read_store(fs, root)
        if found == model:
            return found
        if inflight is not None and inflight[0] == "tx":
            after, _ = apply_tx(model, inflight[1])
            if found == after:
                return found
            raise Violation(
                f"state is neither after the last acknowledged transaction ({_describe(model)}) nor after the "
                f"one in flight ({_describe(after)}): {_describe(found)}{_page_diff(found, after)}"
            )
        raise Violation(f"state differs from the last acknowledged transaction ({_describe(model)}): "
                        f"{_describe(found)}{_page_diff(found, model)}")

    def snapshot(self, fs: FileSystem, root: str) -> Any:
        return read_store(fs, root)

    def reader_loop(self, root: str, stop: Callable[[], bool]) -> str | None:
        """Verify and read the store over and over beside the writer.

        Each ``verify()`` runs under the readers' shared lock, so it must always
        find a consistent store (free list, header, journal): a half-applied
        transaction would fail it.  Between two calls the writer may commit, so a
        page listed live a moment ago may be free when read: that PageError is not
        a fault.
        """
        fs = OsFileSystem()
        store: PageReader | None = None
        while not stop():
            try:
                if store is None:
                    store = PageStore.open_reader(_path(root), fs=fs)
                store.verify()
                for page in store.live_pages:
                    try:
                        store.read(page)
                    except PageError:
                        pass  # freed by a commit since live_pages was read
                count_read()
            except (FileNotFoundError, RecoveryNeededError, LockedError):
                # Between a killed writer and the next one, the journal holds
                # transactions the store file lacks: readers must refuse (typed),
                # and do.  A writer mid-recovery holds the lock.
                if store is not None:
                    store.close()
                store = None
            except EngineError as exc:
                return f"a reader beside the writer got {type(exc).__name__}: {exc}"
            time.sleep(0.005)
        if store is not None:
            store.close()
        return None


def _page_diff(found: PagesModel, want: PagesModel) -> str:
    for page in sorted(set(found.pages) | set(want.pages)):
        a, b = found.pages.get(page), want.pages.get(page)
        if a != b:
            return f"; first differing page {page}"
    return ""


ADAPTER = PagesAdapter()
