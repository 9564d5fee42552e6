"""`engine inspect` and `engine verify` on files no store knows."""

from __future__ import annotations

import subprocess
import sys

from engine.cli import main


def test_inspect_unknown_file(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "foreign.bin"
    p.write_bytes(b"\x7fELF\x02\x01\x01\x00 not engine's")
    assert main(["inspect", str(p)]) == 1
    err = capsys.readouterr().err
    assert "foreign.bin" in err and "unrecognised" in err and "7f 45 4c 46" in err


def test_inspect_empty_and_missing(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    p = tmp_path / "empty"
    p.write_bytes(b"")
    assert main(["inspect", str(p)]) == 1
    assert "empty" in capsys.readouterr().err
    assert main(["verify", str(tmp_path / "missing")]) == 1
    assert "no such file" in capsys.readouterr().err


def test_python_dash_m_engine_help() -> None:
    out = subprocess.run([sys.executable, "-m", "engine", "--help"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0
    assert "inspect" in out.stdout and "verify" in out.stdout


# -- a store that does not import is an error, never a silent skip ------------------------------------


def test_a_store_cli_module_that_does_not_import_is_an_error(monkeypatch, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from engine.cli import CliModuleImportError, build_parser

    monkeypatch.setitem(sys.modules, "engine.queue.cli", None)  # importing it now raises ImportError
    with pytest.raises(CliModuleImportError, match=r"engine\.queue\.cli failed to import"):
        build_parser()
    assert main(["inspect", str(tmp_path)]) == 2
    assert "engine.queue.cli failed to import" in capsys.readouterr().err


def test_a_format_handler_that_does_not_import_is_an_error(monkeypatch, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from engine.detection import detect, handlers

    p = tmp_path / "foreign.bin"
    p.write_bytes(b"\x7fELF not any engine format")
    monkeypatch.setitem(sys.modules, "engine.pages.handler", None)
    with pytest.raises(ImportError, match=r"engine\.pages\.handler failed to import"):
        handlers()
    with pytest.raises(ImportError, match=r"engine\.pages\.handler"):
        detect(str(p))
    # Not "unrecognised" (which would hide the broken store): an error naming it.
    assert main(["inspect", str(p)]) == 2
    err = capsys.readouterr().err
    assert "engine.pages.handler failed to import" in err and "unrecognised" not in err


def test_without_the_spark_extra_the_spark_commands_say_so(monkeypatch, tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    monkeypatch.setitem(sys.modules, "pyspark", None)  # as if the extra were not installed
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "demo, pipeline, spark: needs the optional 'spark' extra" in out and "missing: pyspark" in out
    assert main(["pipeline", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "engine pipeline: needs the optional 'spark' extra" in err and "pip install 'engine[spark]'" in err
    assert not (tmp_path / "out").exists()


def test_the_help_notes_a_missing_extra_only_when_it_is_missing(capsys) -> None:  # type: ignore[no-untyped-def]
    import pytest

    from engine.cli import NEEDS_EXTRA, _missing

    missing = any(_missing(modules) for _, modules in NEEDS_EXTRA.values())
    with pytest.raises(SystemExit):
        main(["--help"])
    assert ("needs the optional" in capsys.readouterr().out) == missing


# -- --json on inspect and verify: raw figures for every format ----------------------------------------


def test_inspect_and_verify_json_for_every_store(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    import json
    import re

    from engine import KV, AppendLog, EventJournal, PageStore, Queue, StreamJournal

    root = tmp_path
    with Queue.open(root / "q", "jobs") as q:
        q.put(b"x")
    with KV.open(root / "k.kv") as kv:
        kv[b"a"] = b"b"
    with AppendLog.open(root / "lg") as log:
        log.append(b"x")
    with PageStore.open(root / "p.db") as store, store.transaction() as tx:
        tx.write(tx.allocate(), 0, b"x")
    with EventJournal.open(root / "ev") as journal:
        journal.write("a", [(1, b"x")])
    StreamJournal.open(root / "s.jnl", size=1 << 20).close()
    paths = [str(root / p) for p in ("q", "k.kv", "lg", "p.db", "ev", "s.jnl")]
    assert main(["inspect", "--json", *paths]) == 0
    docs = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["format"] for d in docs] == ["queue", "kv", "applog", "pages", "events", "streams"]

    def keys(obj: object) -> list[str]:
        if isinstance(obj, dict):
            return [k for k, v in obj.items() for k in ([k] if k == "kv_trees" else [k, *keys(v)])]
        if isinstance(obj, list):
            return [k for v in obj for k in keys(v)]
        return []

    for doc in docs:
        for key in keys(doc["summary"]):
            assert re.fullmatch(r"[a-z][a-z0-9_]*", key), (doc["format"], key)
    applog = docs[2]["summary"]
    assert applog["records"] == 1 and isinstance(applog["first_time_ns"], int)
    assert docs[3]["summary"]["page_size"] == 4096
    assert main(["verify", "--json", *paths]) == 0
    verdicts = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [v["ok"] for v in verdicts] == [True] * 6
