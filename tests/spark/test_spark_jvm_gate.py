"""The JVM page-store readers (engine-pages, engine-kv) read beside a live writer: every
read is one committed state of the store file.

The JVM cannot take the store file's shared ``flock`` that Python readers hold; it reads
between two loads of the store's change count (the gate's seqlock, ``engine.spark.StoreGate``)
and reads again when the count moved.  A Python writer commits in a loop (each commit
applied to the store file at once, ``apply="commit"``) keeping an invariant; one JVM
(``KvDump``/``PagesDump``, several reads per run) reads meanwhile, and every read must keep
the invariant.  The reads race the writer's flushes at whatever rate the machine gives: a
run that happens to see no race passes too, so the test never fails on a correct reader;
with the count's check broken it fails (a torn read: keys twice or missing, pages of two
commits, or damage reported).  Skipped where the connector cannot be built (no JDK).
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
from dump_parity import run_dump

from engine.kv import KV
from engine.pages import PageStore
from engine.spark import jvmbuild

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))

KEYS = 300  # one batch (KvBatchReader.BATCH_ROWS): each read is one seqlock window
PAGES = 120  # one run (PagesBatchReader.BATCH_PAGES)
READS = 40

_KV_WRITER = """
import os, random, sys, time
from engine.kv import KV
path, stop = sys.argv[1], sys.argv[2]
rng = random.Random(7)
where = {i: b"a" for i in range(%(keys)d)}
with KV.open(path, apply="commit") as kv:
    for n in range(20000):
        if os.path.exists(stop):
            break
        # Move a run of keys between the two prefixes: leaves split and merge.
        lo = rng.randrange(%(keys)d)
        with kv.transaction() as tx:
            for i in range(lo, min(%(keys)d, lo + rng.randrange(1, 60))):
                old = where[i]
                new = b"z" if old == b"a" else b"a"
                del tx[old + b":%%04d" %% i]
                tx[new + b":%%04d" %% i] = b"v%%d-" %% i * (1 + i %% 5)
                where[i] = new
        time.sleep(0.001)
    print(n)
"""

_PAGES_WRITER = """
import os, sys, time
from engine.pages import PageStore
path, stop = sys.argv[1], sys.argv[2]
with PageStore.open(path, apply="commit") as ps:
    for n in range(1, 20000):
        if os.path.exists(stop):
            break
        # Every page stamped with the commit's number, in one transaction.
        with ps.transaction() as tx:
            for p in range(1, %(pages)d + 1):
                tx.write(p, 0, b"S%%08d" %% n * 8)
        time.sleep(0.001)
    print(n)
"""


def _race(tmp_path: object, writer: str, dump: str, args: list[str]) -> tuple[list[list[str]], int]:
    """Run ``writer`` (a Python script: store path, stop file) beside one JVM making
    :data:`READS` reads with ``args``; each read's lines, and the writer's commits."""
    base = str(tmp_path)
    stop = os.path.join(base, "stop")
    script = os.path.join(base, "writer.py")
    with open(script, "w") as f:
        f.write(textwrap.dedent(writer))
    env = dict(os.environ, PYTHONPATH=os.getcwd() + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, script, args[0].split("=", 1)[1], stop], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        joined: list[str] = []
        for k in range(READS):
            joined += (["--"] if k else []) + args
        reads = run_dump(dump, joined, timeout=600)
    finally:
        open(stop, "w").close()
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err[-3000:]
    assert len(reads) == READS
    return reads, int(out.split()[-1])


def test_kv_reads_are_whole_commits_beside_a_writer(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "kv")
    with KV.open(path, page_size=512, create=True) as kv, kv.transaction() as tx:
        for i in range(KEYS):
            tx[b"a:%04d" % i] = b"v%d-" % i * (1 + i % 5)
    reads, commits = _race(tmp_path, _KV_WRITER % {"keys": KEYS}, "engine.spark.KvDump",
                           [f"path={path}", "partitions=1", "columns=key,value"])
    assert commits > 0
    for rows in reads:
        assert not [r for r in rows if r.startswith("ERROR")], rows[:3]
        ids = []
        for row in rows:
            key, value = (bytes.fromhex(c) for c in row.split("\t"))
            i = int(key[2:])
            assert key[:2] in (b"a:", b"z:") and value == b"v%d-" % i * (1 + i % 5), row
            ids.append(i)
        # Each key under exactly one prefix: none twice, none missing.
        assert sorted(ids) == list(range(KEYS)), (len(ids), len(set(ids)))


def test_pages_reads_are_whole_commits_beside_a_writer(tmp_path: object) -> None:
    path = os.path.join(str(tmp_path), "pages")
    with PageStore.open(path, page_size=512, create=True) as ps, ps.transaction() as tx:
        for _ in range(PAGES):
            tx.write(tx.allocate(), 0, b"S%08d" % 0 * 8)
    reads, commits = _race(tmp_path, _PAGES_WRITER % {"pages": PAGES}, "engine.spark.PagesDump",
                           [f"path={path}", "columns=page,data"])
    assert commits > 0
    for rows in reads:
        assert len(rows) == PAGES, rows[:3]
        stamps = {bytes.fromhex(row.split("\t")[1])[:9] for row in rows}
        assert len(stamps) == 1, sorted(stamps)  # every page of one commit
