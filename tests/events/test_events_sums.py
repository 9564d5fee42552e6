"""Checksums of the file journal (``data.crc`` / ``meta.crc``): no silent wrong answers.

Every read path -- replay (writer and read-only reader), ``verify()``, the
``engine events`` CLI and ``engine verify`` -- either reads back exactly what was
written or raises a typed error, whatever single byte of the journal is damaged.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import CorruptFileError, EngineError
from engine.events import EventJournal

IDS = ("p1", "p2", "p3")


def _fill(d: str) -> dict[str, list[tuple[int, bytes]]]:
    model: dict[str, list[tuple[int, bytes]]] = {p: [] for p in IDS}
    with EventJournal.open(d) as j:
        for round_ in range(4):
            for n, pid in enumerate(IDS):
                seq = len(model[pid]) + 1
                batch = [(seq + k, bytes([65 + n, 48 + round_, 97 + k]) * (1 + k)) for k in range(1 + round_ % 2)]
                j.write(pid, batch)
                model[pid].extend(batch)
        j.delete_to("p2", 2)
    model["p2"] = [e for e in model["p2"] if e[0] > 2]
    return model


def _read(d: str) -> dict[str, object]:
    with EventJournal.open_reader(d) as j:
        out: dict[str, object] = {}
        for pid in j.persistence_ids():
            out[pid] = (j.highest_sequence_nr(pid), [tuple(e) for e in j.replay(pid)])
        j.verify()
        return out


def test_batch_entries_are_the_documented_crc(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    with EventJournal.open(d) as j:
        j.write("p1", [(1, b"hi"), (2, b"yo")])
        j.write("p2", [(1, b"x")])
        j.write("p1", [(3, b"!")])
        j.delete_to("p1", 1)
    data = (tmp_path / "j" / "data").read_bytes()
    import zlib

    from engine.events import sums as sums_codec

    assert (tmp_path / "j" / "data.crc").read_bytes() == (
        b"EJDC\0\0\0\1\0\0\0\3"  # magic, version 1, 3 entries synced
        + sums_codec.encode_batch_sum(60, 34, zlib.crc32(data[8:46] + data[50:60]))
        + sums_codec.encode_batch_sum(85, 60, zlib.crc32(data[60:72] + data[76:85]))
        + sums_codec.encode_batch_sum(110, 85, zlib.crc32(data[85:97] + data[101:110]))
    )
    assert (tmp_path / "j" / "meta.crc").read_bytes().hex() == (
        "454a4d4300000001" "0000000000000002a25c3dc1" "000000000000000139 13d222".replace(" ", ""))


def test_flipped_payload_byte_is_an_error_on_every_read_path(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    model = _fill(d)
    data = tmp_path / "j" / "data"
    raw = bytearray(data.read_bytes())
    at = raw.index(b"B1a")  # a payload byte of p2's second round
    raw[at] ^= 0x01
    data.write_bytes(bytes(raw))
    with EventJournal.open_reader(d) as j:
        assert [tuple(e) for e in j.replay("p1")] == model["p1"]  # other ids' batches are fine
        with pytest.raises(CorruptFileError, match="checksum"):
            list(j.replay("p2"))
        with pytest.raises(CorruptFileError, match="checksum"):
            j.verify()
    with EventJournal.open(d) as j, pytest.raises(CorruptFileError, match="checksum") as info:
        list(j.replay("p2", 3))
    assert info.value.path.endswith("data")
    assert main(["events", "replay", d, "p2"]) != 0
    assert main(["verify", d]) != 0


def test_every_single_byte_damage_reads_right_or_raises(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    _fill(d)
    clean = _read(d)
    files = {name: (tmp_path / "j" / name).read_bytes() for name in ("data", "meta", "data.crc", "meta.crc")}
    wrong: list[str] = []
    for name, raw in files.items():
        path = tmp_path / "j" / name
        for at in range(len(raw)):
            for mask in (0x01, 0x80):
                damaged = bytearray(raw)
                damaged[at] ^= mask
                path.write_bytes(bytes(damaged))
                try:
                    got = _read(d)
                except EngineError:
                    continue
                if got != clean:
                    wrong.append(f"{name} byte {at} ^ {mask:#x}")
        path.write_bytes(raw)
    assert wrong == []


def test_damaged_meta_first_reads_right_and_is_repaired(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    model = _fill(d)
    meta = tmp_path / "j" / "meta"
    raw = bytearray(meta.read_bytes())
    with EventJournal.open_reader(d) as j:
        info = j.id_info("p1")
        assert info is not None
        last = info.last_offset
    # p1's meta block is the first one: point its ``first`` at its last block, as if
    # everything before had been deleted.
    raw[8 + 2 : 8 + 10] = last.to_bytes(8, "big")
    meta.write_bytes(bytes(raw))
    assert _read(d)["p1"] == (len(model["p1"]), model["p1"])
    with EventJournal.open(d) as j:
        assert [(a.kind, a.path) for a in j.recovery.actions] == [("reset", str(meta))]
        assert [tuple(e) for e in j.replay("p1")] == model["p1"]
    with EventJournal.open(d) as j:
        assert not j.recovery.repaired


def test_damaged_id_is_an_error(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    _fill(d)
    meta = tmp_path / "j" / "meta"
    meta.write_bytes(meta.read_bytes().replace(b"p2", b"q2"))
    with pytest.raises(CorruptFileError, match="checksum") as info:
        EventJournal.open_reader(d)
    assert info.value.path == str(meta)


def test_old_journal_gets_checksums_from_its_first_writer(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = str(tmp_path / "j")
    model = _fill(d)
    for name in ("data.crc", "meta.crc"):
        os.unlink(tmp_path / "j" / name)
    with caplog.at_level(logging.WARNING, logger="engine.events"):
        assert {p: r[1] for p, r in _read(d).items()} == model  # type: ignore[index]
    assert any("no " in r.getMessage() and "data.crc" in r.getMessage() for r in caplog.records)
    with EventJournal.open(d) as j:
        kinds = sorted((a.kind, a.path.rsplit("/", 1)[-1]) for a in j.recovery.actions)
        assert kinds == [("rebuilt", "data.crc"), ("rebuilt", "meta.crc")]
        assert j.verify()[-1:] == [str(j.recovery.actions[-1])]
    assert {p: r[1] for p, r in _read(d).items()} == model  # type: ignore[index]
    # Now damage is caught.
    data = tmp_path / "j" / "data"
    raw = bytearray(data.read_bytes())
    raw[raw.index(b"C0a")] ^= 0x20
    data.write_bytes(bytes(raw))
    with pytest.raises(CorruptFileError, match="checksum"):
        _read(d)


def test_torn_appends_of_data_crc_are_cut(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    model = _fill(d)
    crc = tmp_path / "j" / "data.crc"
    good = crc.read_bytes()
    crc.write_bytes(good + bytes(12) + bytes(5))  # a crash's unwritten appends
    assert {p: r[1] for p, r in _read(d).items()} == model  # type: ignore[index]
    with EventJournal.open(d) as j:
        assert [(a.kind, a.count) for a in j.recovery.actions] == [("cut", 17)]
    assert crc.read_bytes() == good


def test_torn_unsynced_entries_are_rebuilt_and_synced_ones_are_not(tmp_path: Path) -> None:
    """Entries past the header's synced count may be torn by a power cut: a
    writer's recovery keeps those that match their batches and rebuilds from
    the first that does not; a synced entry that does not match is damage."""
    import struct

    d = str(tmp_path / "j")
    model = _fill(d)
    crc = tmp_path / "j" / "data.crc"
    good = bytearray(crc.read_bytes())
    count = (len(good) - 12) // 12
    assert struct.unpack_from(">i", good, 8)[0] == count  # a clean close synced them all
    torn = bytearray(good)
    struct.pack_into(">i", torn, 8, count - 3)  # the last 3 not known durable...
    torn[-4:] = bytes(4)  # ...and the last one's checksum lost
    crc.write_bytes(bytes(torn))
    with EventJournal.open(d) as j:
        # The last batch (two blocks) rebuilt one entry per block.
        assert [(a.kind, a.count) for a in j.recovery.actions] == [("cut", 12), ("rebuilt", 2)]
        assert {p: [tuple(e) for e in j.replay(p)] for p in IDS} == model
        j.verify()
    rebuilt = crc.read_bytes()
    assert rebuilt[12:-24] == good[12:-12] and struct.unpack_from(">i", rebuilt, 8)[0] == count + 1
    # The same damage inside the synced entries is an error, not a rebuild.
    good[-4:] = bytes(4)
    crc.write_bytes(bytes(good))
    with EventJournal.open(d) as j, pytest.raises(CorruptFileError, match="checksum"):
        j.verify()


def test_more_checksummed_ids_than_meta_blocks_is_damage(tmp_path: Path) -> None:
    d = str(tmp_path / "j")
    _fill(d)
    meta = tmp_path / "j" / "meta"
    raw = meta.read_bytes()
    size = int.from_bytes(raw[8:10], "big")
    meta.write_bytes(raw[:4] + size.to_bytes(4, "big") + raw[8 : 8 + size])  # lost p2 and p3
    with pytest.raises(CorruptFileError, match="salvage"):
        EventJournal.open_reader(d)


def test_a_reader_of_a_live_writer_sees_every_entry(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    d = str(tmp_path / "j")
    with EventJournal.open(d) as writer, caplog.at_level(logging.WARNING, logger="engine.events"):
        reader = EventJournal.open_reader(d)
        for i in range(300):
            writer.write(f"id{i % 7}", [(i // 7 + 1, bytes([i % 256]) * 40)])
            if i % 50 == 0:
                reader.refresh()
                for pid in reader.persistence_ids():
                    assert len(list(reader.replay(pid))) == reader.highest_sequence_nr(pid)
        reader.refresh()
        assert reader.verify() == []
        reader.close()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_batch_crcs_c_twin_matches_the_reference() -> None:
    """``engine.events._native.batch_crcs`` returns the reference's bytes and
    raises its ValueError, on random batches and hostile arguments."""
    import random
    from array import array

    from engine.events import sums as sums_codec

    native = pytest.importorskip("engine.events._native")
    if not hasattr(native, "batch_crcs") or os.environ.get("ENGINE_PURE_PYTHON"):
        pytest.skip("engine.events._native not built or disabled")
    rng = random.Random(7)
    for _ in range(300):
        n = rng.randrange(0, 12)
        ends, lasts = array("q"), array("q")
        pos = 8
        for _k in range(n):
            size = rng.randrange(24, 400)
            lasts.append(pos + rng.randrange(0, size - 23))
            pos += size
            ends.append(pos)
        base = rng.randrange(0, 9)
        buf = os.urandom(pos - base + rng.randrange(0, 50))
        i = rng.randrange(0, n + 1)
        j = rng.randrange(i, n + 1)
        want = sums_codec.batch_crcs_py(buf, base, ends, lasts, i, j)
        assert native.batch_crcs(buf, base, ends, lasts, i, j) == want
        assert native.batch_crcs(memoryview(buf), base, ends, lasts, i, j) == want
        if j > i:
            assert array("I", want)[0] == sums_codec.batch_crc(
                buf, (ends[i - 1] if i else 8) - base, lasts[i] - base, ends[i] - base)
        # Hostile: a short buffer, a base past a start, a range past the arrays.
        for args in ((buf[: max(0, pos - base - 1)], base, ends, lasts, 0, n), (buf, 9, ends, lasts, 0, n),
                     (buf, base, ends, lasts, 0, n + 1), (buf, base, ends, lasts[:-1] if n else lasts, 0, n)):
            try:
                expected: object = sums_codec.batch_crcs_py(*args)
            except ValueError:
                expected = ValueError
            try:
                got: object = native.batch_crcs(*args)
            except ValueError:
                got = ValueError
            assert got == expected, args[1:]
