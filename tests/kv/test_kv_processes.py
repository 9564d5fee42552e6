"""A reader in this process beside a writer in another: every snapshot is one
whole commit (a transfer between two accounts never shows half done)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from engine.errors import LockedError
from engine.kv import KV

WRITER = textwrap.dedent(
    """
    import sys
    from engine.kv import KV
    kv = KV.open(sys.argv[1], page_size=512)
    print("ready", flush=True)
    for i in range(int(sys.argv[2])):
        with kv.transaction() as tx:
            a, b = int(tx[b"a"]), int(tx[b"b"])
            tx[b"a"], tx[b"b"] = b"%d" % (a - 1), b"%d" % (b + 1)
            tx[b"n:%05d" % i] = b"x" * (i % 300)
    kv.close()
    """
)


def test_reader_beside_a_writer_process(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "shared.kv")
    with KV.open(path, page_size=512) as kv:
        kv.update({b"a": b"1000", b"b": b"0"})
    env = dict(os.environ, PYTHONPATH=os.getcwd())
    count = 300
    proc = subprocess.Popen([sys.executable, "-c", WRITER, path, str(count)], stdout=subprocess.PIPE, env=env)
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == b"ready"
    try:
        try:
            KV.open(path)
            raise AssertionError("a second writer opened the store")
        except LockedError:
            pass
        seen = set()
        with KV.open_reader(path) as reader:
            while proc.poll() is None:
                with reader.snapshot() as snap:
                    a, b = int(snap[b"a"]), int(snap[b"b"])
                    n = len(list(snap.prefix(b"n:")))
                    assert len(snap) == n + 2
                assert a + b == 1000 and b == n, (a, b, n)
                seen.add(b)
    finally:
        proc.wait()
    assert proc.returncode == 0
    with KV.open_reader(path) as reader:
        assert int(reader[b"b"]) == count
        reader.verify()
    assert len(seen) > 1  # the reader really ran beside the writer
