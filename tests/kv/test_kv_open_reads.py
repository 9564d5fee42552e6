"""Opening a store and serving gets reads only what they need from the store
file: its header and meta page at open, and at most the pages of one descent
per get; the checksums file (4 bytes a page) is read whole.  Issue 29's memory
row; ``benchmarks/kv_big.py`` shows it for 10 M keys.  Bytes are counted at the
file-system seam (every read of a store goes through ``FileHandle``), so the
figures do not depend on the machine."""

from __future__ import annotations

import os
import random
from collections import Counter
from typing import Any

import pytest

from engine.fs.osfs import OsFileHandle
from engine.kv import KV

PAGE = 512


def _key(i: int) -> bytes:
    return i.to_bytes(4, "big") + b"k" * 12


@pytest.fixture
def store(tmp_path: os.PathLike[str]) -> tuple[str, int]:
    path = os.path.join(str(tmp_path), "big.kv")
    count = 20_000
    with KV.open(path, page_size=PAGE) as kv:
        for base in range(0, count, 5_000):
            with kv.transaction() as tx:
                for i in range(base, base + 5_000):
                    tx[_key(i)] = b"v" * 40
        kv.checkpoint()
    return path, count


def test_open_and_gets_read_a_few_pages_not_the_file(store: tuple[str, int], monkeypatch: pytest.MonkeyPatch) -> None:
    path, count = store
    read: Counter[str] = Counter()
    raw_read = OsFileHandle._raw_read

    def counted(self: OsFileHandle, offset: int, size: int) -> Any:
        got = raw_read(self, offset, size)
        read[self.path] += len(got)
        return got

    monkeypatch.setattr(OsFileHandle, "_raw_read", counted)
    monkeypatch.setattr(OsFileHandle, "read_at", counted)  # an alias of _raw_read there
    size = os.path.getsize(path)
    assert size > 2_000 * PAGE  # thousands of pages
    kv = KV.open(path, cache_nodes=0)
    try:
        at_open = read[path]
        assert at_open <= 4 * PAGE, f"open read {at_open} bytes of the {size}-byte store file"
        trees: Any = kv.stats()["trees"]
        height = trees[""]["height"]
        assert height >= 3
        rng = random.Random(7)
        gets = 50
        for _ in range(gets):
            i = rng.randrange(count)
            assert kv[_key(i)] == b"v" * 40
        by_gets = read[path] - at_open
        assert by_gets <= gets * (height + 1) * PAGE, f"{gets} gets read {by_gets} bytes"
        assert read[path] < size // 10
        # the checksums file is read whole (4 bytes a page, 1/128 of the store at 512-byte pages)
        assert read[path + "-sums"] <= size // PAGE * 4 + PAGE
    finally:
        kv.close()
