"""Instruction counts of the page store's hot paths, for callgrind.

Run one operation ``n`` times after a warm-up; the per-operation count is the
difference of two runs divided by the difference of their ``n`` (start-up and
warm-up cancel out)::

    for n in 1000 2000; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \\
        python -m benchmarks.pages_instructions commit $n; done

``commit``: a one-page transaction (100 bytes written into page 1), checkpoints
off so every run does the same work; ``read``: ``PageStore.read`` of a cached
page; ``reader``: a reader's read (shared lock, header check, checksum).
"""

from __future__ import annotations

import os
import sys
import tempfile
from typing import Any

from engine.pages import PageStore

WARM = 200


def main() -> None:
    what, n = sys.argv[1], int(sys.argv[2])
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        path = os.path.join(tmp, "p.db")
        with PageStore.open(path, page_size=4096, checkpoint_bytes=1 << 40) as store:
            with store.transaction() as tx:
                page = tx.allocate()
                tx.write(page, 0, b"x" * 4096)
            store.checkpoint()
            data = b"y" * 100
            if what == "commit":
                for i in range(WARM + n):
                    with store.transaction() as tx:
                        tx.write(page, i % 3000, data)
            elif what == "read":
                for _ in range(WARM + n):
                    store.read(page)
            else:
                reader = open_reader(path)
                for _ in range(WARM + n):
                    reader.read(page)
                reader.close()


def open_reader(path: str) -> Any:
    opener = getattr(PageStore, "open_reader")  # noqa: B009 (the same script before and after the API change)
    return opener(path)


if __name__ == "__main__":
    main()
