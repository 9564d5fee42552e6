"""The ``engine pages`` commands and ``engine inspect``/``verify`` on page stores."""

from __future__ import annotations

import argparse
import json
import os

import pytest

from engine.cli import main
from engine.kv.cli import register as register_kv
from engine.pages import PageStore, codec, journal_path
from engine.pages.cli import register


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
    core = store._core  # a crash writes nothing: the core releases the files, no checkpoint
    core.begin_close()
    core.finish_close()
    return path


def test_stats_dump_and_journal(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pages", "stats", store_path]) == 0
    out = flat(capsys.readouterr().out)
    assert "page store" in out and "free pages" in out
    assert "committed, not yet checkpointed into the store file │ 2" in out
    assert "page size │ 512 B" in out and "store file size │ 1.5 KiB (1536 bytes)" in out
    assert main(["pages", "dump", store_path]) == 0
    out = flat(capsys.readouterr().out)
    assert "live" in out and "free" in out and "68 65 6c 6c 6f" in out and "2 pages of 512 B" in out
    assert main(["pages", "dump", store_path, "1"]) == 0
    out = capsys.readouterr().out
    assert "page 1 (live) at byte offset 512, 512 B" in out and "...hello world" in out
    assert out.splitlines()[-1] == "*"  # the zero lines after the text collapse
    assert main(["pages", "dump", store_path, "1", "--all"]) == 0
    assert "*" not in capsys.readouterr().out.split()
    assert main(["pages", "journal", store_path]) == 0
    out = flat(capsys.readouterr().out)
    assert "2 transaction(s), 2 committed and not yet checkpointed into the store file" in out
    assert "alloc page@512" in out and "remove page@1024" in out
    assert "committed, not yet checkpointed into the store file, created 20" in out and " UTC, 143 B" in out
    assert "CRC ok" in out and "chain salt" in out and "[bold]" not in out
    assert "header first=20 last=20" in out and "1 transaction(s) past the header's last" in out
    assert "not flagged" not in out


def test_json_reports(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pages", "stats", store_path, "--json"]) == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats == {
        "path": store_path,
        "kind": "page_store",
        "format_version": 1,
        "page_size": 512,
        "pages": 2,
        "live_pages": 1,
        "free_pages": 1,
        "free_head_page": 2,
        "store_bytes": 1536,
        "header_flags": 2,
        "closed_cleanly": False,
        "journal_path": journal_path(store_path),
        "journal_bytes": stats["journal_bytes"],
        "journal_transactions": 2,
        "pending_transactions": 2,
        "journal_repairs": [],
    }
    assert main(["pages", "stats", store_path + "-sums", "--json"]) == 0
    sums = json.loads(capsys.readouterr().out)
    assert sums["kind"] == "page_checksums" and sums["store_path"] == store_path and sums["entries"] >= 2
    assert main(["pages", "dump", store_path, "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(r["page"], r["offset"], r["state"]) for r in rows] == [(1, 512, "live"), (2, 1024, "free")]
    assert rows[0]["first_bytes_hex"] == "000000" + b"hello world".hex() + "0000"
    assert main(["pages", "dump", store_path, "1", "--json"]) == 0
    page = json.loads(capsys.readouterr().out)
    assert page["page"] == 1 and page["page_size"] == 512 and bytes.fromhex(page["data_hex"])[3:14] == b"hello world"
    assert main(["pages", "journal", store_path, "--json"]) == 0
    journal = json.loads(capsys.readouterr().out)
    assert journal["pending_transactions"] == 2 and journal["linked_transactions"] == 1
    first, second = journal["transactions"]
    assert first["state"] == "committed" and first["crc_checked"] and first["created_s"] > 1_700_000_000
    assert [op["op"] for op in first["ops"]] == ["alloc", "modify", "alloc", "complete"]
    assert first["ops"][1] == {"op": "modify", "at": 74, "page_offset": 512, "offset": 3, "bytes": 11}
    assert {"op": "remove", "at": 221, "page_offset": 1024, "next_free": 0} in second["ops"]


def test_a_page_the_store_does_not_hold_is_not_found(store_path: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["pages", "dump", store_path, "9"]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.strip() == f"engine pages dump: {store_path} has no page 9: the store file holds pages 1 to 2"


def test_every_argument_has_help_and_an_upper_case_placeholder() -> None:
    parser = argparse.ArgumentParser(prog="engine")
    sub = parser.add_subparsers()
    register(sub)
    register_kv(sub)
    checked = 0
    for group in sub.choices.values():
        for command in group._subparsers._group_actions[0].choices.values():  # type: ignore[union-attr]
            for action in command._actions:
                if isinstance(action, argparse._HelpAction):
                    continue
                assert action.help, f"{command.prog} {action.dest}: no help"
                if action.nargs != 0:
                    metavar = action.metavar or action.dest.upper()
                    assert metavar == metavar.upper(), f"{command.prog} {action.dest}: metavar {metavar}"
                checked += 1
            names = {a.dest for a in command._actions}
            assert "json" in names, f"{command.prog}: no --json"
    assert checked > 40


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


def test_dump_never_prints_pages_it_cannot_check(
    tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """The stress run's "damage" attack: with ``-sums`` there but its header damaged,
    ``engine pages dump`` printed the pages unchecked (a damaged one too), where
    PageStore.open_reader's verify and the Spark source fail naming the sums file.
    Now dump checks as the readers do (sums.load_present, sums.check_read)."""
    path = os.path.join(str(tmp_path), "d.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"A" * 512)
    with open(path + "-sums", "r+b") as f:
        f.write(b"XXXX")
    with open(path, "r+b") as f:
        f.seek(512)
        f.write(b"B")
    for argv in (["pages", "dump", path], ["pages", "dump", path, "1"], ["pages", "dump", path, "--json"]):
        assert main(argv) == 2
        captured = capsys.readouterr()
        assert "42 41 41" not in captured.out and "424141" not in captured.out
        assert flat(captured.err).startswith(f"engine pages dump: error: {path}-sums at offset 0: expected an ENGSUMS")


def _place(path: str, how: str) -> None:
    """Put ``how`` where the file ``path`` was."""
    os.remove(path)
    if how == "a directory":
        os.mkdir(path)
    elif how == "a symbolic link loop":
        os.symlink(os.path.basename(path), path)
    elif how == "a dangling symbolic link":
        os.symlink("nowhere", path)


@pytest.mark.parametrize("command", ["dump", "journal", "stats"])
@pytest.mark.parametrize("how", ["nothing", "a directory", "a symbolic link loop", "a dangling symbolic link"])
@pytest.mark.parametrize("which", ["store file", "journal", "both"])
def test_a_missing_or_unreadable_file_is_one_line_naming_it(
    tmp_path: os.PathLike[str], capsys: pytest.CaptureFixture[str], command: str, how: str, which: str
) -> None:
    """The stress run's "damage" and "paths" attacks: ``engine pages dump|journal|stats``
    on a store whose file or journal is gone, a directory or a symbolic link that
    leads nowhere.  Each command either reads what is there (the journal without
    its store, the store without its journal) or fails with one line naming the
    path in the user's words (exit 1: the OS's error or "no such page store";
    exit 2: the typed error naming a dangling link), never a traceback, never a
    "journal without its store" summary for a store name that cannot be followed,
    and creates no file."""
    path = os.path.join(str(tmp_path), "s.db")
    with PageStore.open(path, page_size=512) as store:
        with store.transaction() as tx:
            tx.write(tx.allocate(), 0, b"hello")
    for name in ("s.db-gate", "s.db-lock"):
        os.remove(os.path.join(str(tmp_path), name))
    jpath = journal_path(path)
    if which in ("store file", "both"):
        _place(path, how)
    if which in ("journal", "both"):
        _place(jpath, how)
    before = sorted(os.listdir(str(tmp_path)))
    status = main(["pages", command, path])
    captured = capsys.readouterr()
    assert sorted(os.listdir(str(tmp_path))) == before  # read-only: nothing created
    assert "Traceback" not in captured.err
    target = jpath if command == "journal" else path
    broken = {"store file": {path}, "journal": {jpath}, "both": {path, jpath}}[which]
    if command == "stats" and broken == {jpath} and how != "nothing":
        target = jpath  # stats reads the journal too: a name there that leads nowhere is named
    elif target not in broken or (command == "stats" and how == "nothing" and which != "both"):
        # It reads what is there: the journal without its store file, the store without its journal.
        assert status == 0, captured.err
        return
    err = flat(captured.err)
    assert len(captured.err.strip().splitlines()) == 1, captured.err
    assert err.startswith(f"engine pages {command}: error: {target}"), err
    words = {
        "nothing": f"{target}: no such page store",
        "a directory": "directory",
        "a symbolic link loop": "symbolic link",
        "a dangling symbolic link": "symbolic link",
    }[how]
    assert words in err, err
    assert status == (2 if how == "a dangling symbolic link" or (command == "stats" and target == jpath) else 1)
