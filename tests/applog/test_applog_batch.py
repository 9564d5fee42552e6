"""``append_many``'s bulk packing must write exactly the bytes that ``append`` one
record at a time writes: log, ``.crc`` and index files, across segment rolls."""

from __future__ import annotations

import os

import pytest
from applog_helpers import segment_file_bytes
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.applog import AppendLog

SEGMENT = 16 + 5 * (16 + 40)  # five 40-byte records per segment


def _write_both(root: str, batches: list[list[bytes]], flags: int) -> tuple[dict[str, bytes], dict[str, bytes]]:
    one, many = os.path.join(root, "one"), os.path.join(root, "many")
    with AppendLog.open(one, segment_bytes=SEGMENT, sync="never") as a, AppendLog.open(
        many, segment_bytes=SEGMENT, sync="never"
    ) as b:
        for t, batch in enumerate(batches, start=1000):
            first = a.next_index
            for data in batch:
                a.append(data, flags=flags, time_ns=t)
            assert b.append_many(batch, flags=flags, time_ns=t) == range(first, a.next_index)
        b.verify()
    with AppendLog.open(many, segment_bytes=SEGMENT) as b:
        assert not b.recovery.repaired
        b.verify()
    return segment_file_bytes(one), segment_file_bytes(many)


@pytest.mark.parametrize(
    "batches",
    [
        [[b"u" * 40] * 12, [b"v" * 40] * 3],  # one size: rolls mid-batch, twice
        [[b"%d" % k * (k % 7) for k in range(30)]],  # mixed sizes
        [[b"x" * 10, b"y" * 500, b"z" * 10]],  # a record larger than a segment
        [[b"w" * 40] * 4, [b"s" * 40] * 2],  # the second batch fills the segment, then rolls
    ],
)
def test_append_many_matches_single_appends(tmp_path: os.PathLike[str], batches: list[list[bytes]]) -> None:
    one, many = _write_both(str(tmp_path), batches, flags=9)
    assert list(one) == list(many)
    for name in one:
        assert one[name] == many[name], name


@settings(max_examples=25, deadline=None)
@given(st.lists(st.lists(st.binary(max_size=120), min_size=1, max_size=20), min_size=1, max_size=4),
       st.booleans())
def test_append_many_matches_single_appends_property(
    tmp_path_factory: pytest.TempPathFactory, batches: list[list[bytes]], same_size: bool
) -> None:
    if same_size:
        batches = [[bytes([k % 256]) * len(b[0]) for k in range(len(b))] for b in batches]
    root = str(tmp_path_factory.mktemp("batch"))
    one, many = _write_both(root, batches, flags=0)
    assert one == many
