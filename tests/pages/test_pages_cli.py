"""The ``engine pages`` commands and ``engine inspect``/``verify`` on page stores."""

from __future__ import annotations

import os

import pytest

from engine.cli import main
from engine.pages import PageStore, codec, journal_path


def flat(text: str) -> str:
    """Rich wraps long lines: compare with whitespace runs folded to one space."""
    return " ".join(text.split())


@pytest.fixture
def store_path(tmp_path: os.PathLike[str]) -> str:
    path = os.path.join(str(tmp_path), "cli.db")
    store = PageStore.open(path, page_size=512, apply="commit")  # pages reach the file at once
    with store.transaction() as tx:
        a = tx.allocate()
        tx.write(a, 3, b"hello world")
        tx.allocate()
    with store.transaction() as tx:
        tx.free(2)
    # Leave the journal un-checkpointed, as after a crash: abandon the handles.
    store._handle.close()
    assert store._journal is not None
    store._journal.handle.close()
    return path


def test_stats_dump_and_journal(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pages", "stats", store_path]) == 0
    out = flat(capsys.readouterr().out)
    assert "page store" in out and "free pages" in out and "committed, not yet in the store file" in out
    assert main(["pages", "dump", store_path]) == 0
    out = flat(capsys.readouterr().out)
    assert "live" in out and "free" in out and "68 65 6c 6c 6f" in out
    assert main(["pages", "dump", store_path, "1"]) == 0
    out = flat(capsys.readouterr().out)
    assert "page 1 (live)" in out and "...hello world" in out
    assert main(["pages", "journal", store_path]) == 0
    out = flat(capsys.readouterr().out)
    assert "2 transaction(s)" in out and "alloc page@512" in out and "remove page@1024" in out
    assert "CRC ok" in out and "chain salt" in out
    assert "header first=20 last=20" in out and "1 transaction(s) past the header's last" in out


def test_verify_and_inspect(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["verify", store_path, journal_path(store_path)]) == 0
    out = flat(capsys.readouterr().out)
    assert out.count("ok (pages)") == 2
    assert main(["inspect", store_path]) == 0
    assert "page store" in flat(capsys.readouterr().out)
    assert main(["inspect", store_path + "-sums"]) == 0
    assert "page checksums" in flat(capsys.readouterr().out)
    assert main(["verify", store_path + "-sums"]) == 0
    assert "ok (pages)" in flat(capsys.readouterr().out)


def test_damaged_files_give_typed_errors(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    with open(store_path, "rb") as f:
        head = f.read(30)
    truncated = store_path + ".cut"
    with open(truncated, "wb") as f:
        f.write(head)
    assert main(["inspect", truncated]) == 2
    assert "expected 40-byte header" in flat(capsys.readouterr().err)
    assert main(["verify", truncated]) == 2
    # a journal pointing outside the store fails verify with the journal's path
    bad = codec.encode_file_header(20, 20) + codec.encode_transaction(
        0, 1, codec.encode_modify(40 * 512, 0, b"a", b"b")
    )
    with open(journal_path(store_path), "wb") as f:
        f.write(bad)
    assert main(["verify", store_path]) == 2
    err = flat(capsys.readouterr().err)
    assert "FAILED" in err and "-journal at offset 45" in err


def test_dump_never_prints_a_damaged_page(tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]) -> None:
    path = os.path.join(str(tmp_path), "d.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"A" * 512)
    with open(path, "r+b") as f:
        f.seek(512)
        f.write(b"B")  # inside the first 16 bytes the listing shows
    for argv in (["pages", "dump", path], ["pages", "dump", path, "1"]):
        assert main(argv) != 0
        captured = capsys.readouterr()
        assert "42 41 41" not in captured.out and "offset 512" in flat(captured.err)
