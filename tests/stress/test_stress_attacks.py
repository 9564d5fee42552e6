"""The attacks of issue "Zero silent wrong answers": damage kinds and read paths, the
command line run as processes, drain-retire-reopen after kills, disk full, and the
generated report.  Each is calibrated: it passes an honest store and catches a
broken one."""

from __future__ import annotations

import errno
import os
import random
from typing import Any

import pytest

from engine.errors import DiskFullError
from engine.fs import OsFileSystem
from stress import attack_damage, attack_full, clirun, report
from stress.attack_damage import Variant, judge, make_variant, materialize, read_outcome
from stress.drain import drain_cycle
from stress.readpaths import CLI_COMMANDS, NO_SPARK, READ_PATHS, coverage
from stress.results import Tally
from stress.stores import ADAPTER_MODULES, get_adapter

# -- damage kinds -----------------------------------------------------------------------------


def test_garbage_and_foreign_damage() -> None:
    data = bytes(range(256)) * 4
    rng = random.Random(1)
    garbled, where = attack_damage.damage(data, rng, "garbage")
    assert len(garbled) == len(data) and garbled != data and "random bytes" in where
    foreign, _ = attack_damage.damage(data, rng, "foreign")
    assert foreign in attack_damage.FOREIGN


def test_materialize_deletes_and_loops(tmp_path: Any) -> None:
    files = {"/db/a": b"aaaa", "/db/b": b"bbbb"}
    dirs = {"/", "/db"}
    root = materialize(files, dirs, str(tmp_path / "x"), make_variant(files, "/db/a", "delete", random.Random(0)))
    assert sorted(os.listdir(root)) == ["b"]
    root = materialize(files, dirs, str(tmp_path / "y"), make_variant(files, "/db/a", "symlink loop", random.Random(0)))
    with pytest.raises(OSError) as info:
        os.stat(os.path.join(root, "a"))
    assert info.value.errno == errno.ELOOP


def test_every_store_has_read_paths_cli_commands_and_coverage() -> None:
    for store in ADAPTER_MODULES:
        # More than the adapter's snapshot (the streams have one own path and the
        # Spark source's, which needs the spark extra).
        assert len(READ_PATHS[store]) >= (1 if NO_SPARK and store == "streams" else 2), store
        heads = {c[0] for c in CLI_COMMANDS[store]}
        assert {"verify", "inspect"} <= heads and len(heads) >= 3, store
        assert coverage(store).covered, store


def test_judge_separates_covered_from_undetectable() -> None:
    queue = get_adapter("queue")
    flip_journal = Variant("/db/jobs.1795326891523", "flip", b"", "")
    assert judge(queue, flip_journal, "silent", cut=False, cli=False) == "silent wrong data"
    assert judge(queue, flip_journal, "silent", cut=True, cli=False) == "silent wrong data"
    flip_start = Variant("/db/log-start-index", "flip", b"", "")  # a text file without checksum
    assert judge(get_adapter("applog"), flip_start, "silent", cut=False, cli=False) == "undetectable by the format"
    cut_journal = Variant("/db/jobs.1795326891523", "truncate", b"", "")
    assert judge(queue, cut_journal, "silent", cut=True, cli=False) == "undetectable by the format"
    assert judge(queue, flip_journal, "os error", cut=False, cli=False) == "traceback"
    assert judge(queue, Variant("/db/jobs.read.", "delete", None, ""), "os error", False, False) == "os error"


def test_each_read_path_reads_a_clean_store_the_same_twice(tmp_path: Any) -> None:
    from stress.attack_sim import current_image, run_on_sim

    adapter = get_adapter("applog")
    sim, _ = run_on_sim(adapter, adapter.workload(random.Random(4), 8))
    files, dirs = current_image(sim)
    for n, (name, read) in enumerate(READ_PATHS["applog"].items()):
        first = read(OsFileSystem(), materialize(files, dirs, str(tmp_path / f"a{n}"), None))
        outcome, detail, _cut = read_outcome(adapter, read, materialize(files, dirs, str(tmp_path / f"b{n}"), None),
                                             first)
        assert outcome == "identical", (name, detail)


def test_a_silently_wrong_toy_is_caught_on_every_kind() -> None:
    tally = Tally("toy-nocrc")
    attack_damage.attack(get_adapter("toy-nocrc"), tally, 5, stores=1, per_store=14, n_ops=8)
    assert set(tally.damage_by_kind) == set(attack_damage.KINDS)  # the first variants cover every kind
    assert tally.count("silent wrong data") >= 1 and tally.violations >= 1


# -- the command line as processes ---------------------------------------------------------------


def test_forked_cli_reports_a_traceback_and_a_typed_error(tmp_path: Any) -> None:
    missing = str(tmp_path / "nothing-here")
    typed = clirun.run_forked(["verify", missing])
    assert typed.returncode != 0 and "Traceback" not in typed.err
    assert clirun.cli_outcome(typed, None)[0] == "typed error"
    broken = clirun.CliResult(1, "", "Traceback (most recent call last):\n  ...\nIndexError: boom\n")
    assert clirun.cli_outcome(broken, None) == ("traceback", "IndexError: boom")
    assert clirun.cli_outcome(clirun.CliResult(None, "", ""), None)[0] == "hang"
    same = clirun.CliResult(0, "out", "")
    assert clirun.cli_outcome(same, same)[0] == "identical"
    assert clirun.cli_outcome(clirun.CliResult(0, "other", ""), same)[0] == "silent change"
    assert clirun.cli_outcome(clirun.CliResult(0, "other", ""), same, summary=True)[0] == "summary changed"
    assert clirun.cli_outcome(clirun.CliResult(0, "other", "warning: cut"), same)[0] == "reported"


def test_forked_cli_matches_the_real_entry_point(tmp_path: Any) -> None:
    argv = ["verify", str(tmp_path / "nothing-here")]
    forked, real = clirun.run_forked(argv), clirun.run_exec(argv)
    assert forked.returncode == real.returncode != 0
    assert forked.err.split(":")[0] == real.err.split(":")[0]


# -- drain, retire, reopen ----------------------------------------------------------------------


@pytest.mark.parametrize("store", sorted(ADAPTER_MODULES))
def test_drain_cycle_on_a_clean_store(store: str, tmp_path: Any) -> None:
    adapter = get_adapter(store)
    fs = OsFileSystem()
    root = str(tmp_path / "db")
    adapter.prepare(fs, root)
    session = adapter.session(fs, root)
    for op in adapter.workload(random.Random(2), 20):
        session.run(op)
    session.close()
    drain_cycle(adapter, fs, root)
    drain_cycle(adapter, fs, root)  # a drained store drains again


# -- disk full ------------------------------------------------------------------------------------


def test_disk_full_passes_an_honest_store() -> None:
    tally = Tally("toy-honest")
    attack_full._injected_run(get_adapter("toy-honest"), tally, random.Random(3))
    assert tally.violations == 0, [f.render() for f in tally.failures]
    assert tally.disk_full == {"injected: DiskFullError, recovered": 1}


def test_disk_full_catches_a_raw_oserror(monkeypatch: pytest.MonkeyPatch) -> None:
    """A store that lets the OS's ENOSPC escape untyped is a violation."""
    from stress import toystore

    original = toystore.ToySession.run

    def leaky(self: Any, op: Any) -> Any:
        try:
            return original(self, op)
        except DiskFullError as exc:
            raise OSError(errno.ENOSPC, "No space left on device") from exc

    monkeypatch.setattr(toystore.ToySession, "run", leaky)
    tally = Tally("toy-honest")
    attack_full._injected_run(get_adapter("toy-honest"), tally, random.Random(3))
    assert tally.violations == 1 and "not DiskFullError" in tally.failures[0].detail


# -- the report ------------------------------------------------------------------------------------


def test_report_rewrites_only_its_section(tmp_path: Any) -> None:
    tally = Tally("queue")
    tally.damage_outcome("flip", "typed error")
    tally.read_outcome("Queue.open", "typed error")
    tally.undetectable_in("truncate in jobs.N")
    run = {"seed": 1, "attacks": ["damage"], "stores": [tally.as_dict()]}
    doc = tmp_path / "reliability.md"
    doc.write_text("# Title\n\nhand-written\n", encoding="utf-8")
    report.write_section(str(doc), run)
    first = doc.read_text(encoding="utf-8")
    assert first.startswith("# Title\n\nhand-written\n") and report.BEGIN in first
    assert "| queue | flip | 1 |" in first and "truncate in jobs.N 1" in first
    tally.damage_outcome("flip", "typed error")
    report.write_section(str(doc), {"seed": 2, "attacks": ["damage"], "stores": [tally.as_dict()]})
    second = doc.read_text(encoding="utf-8")
    assert second.count(report.BEGIN) == 1 and "Seed 2" in second and "| queue | flip | 2 |" in second
