"""What a flush writes to the store file: exactly the journalled byte ranges and
whole pages (``storefile.write_pages``), the header with and without FLUSHING,
and the checksums of the pages written (``apply="commit"``: one flush per commit)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.pages import PageStore, store_codec
from engine.pages.storefile import write_pages

PS = 512


class Recorder:
    """A store file in memory that records the writes made to it."""

    def __init__(self, size: int) -> None:
        self.data = bytearray(size)
        self.written = bytearray(size)  # 1 where some write touched the byte
        self.calls: list[tuple[str, int, int]] = []
        self.batches: list[int] = []  # the length of each write_many_at call

    def _put(self, offset: int, data: bytes) -> None:
        self.data[offset : offset + len(data)] = data
        self.written[offset : offset + len(data)] = b"\x01" * len(data)

    def write_at(self, offset: int, data: bytes) -> None:
        self.calls.append(("write_at", offset, len(data)))
        self._put(offset, bytes(data))

    def write_many_at(self, writes: list[tuple[int, bytes]]) -> None:
        """Plain writes in order, in one call (recorded as the plain writes they are)."""
        self.batches.append(len(writes))
        for offset, data in writes:
            self.write_at(offset, data)

    def write_parts_at(self, offset: int, parts: list[bytes | bytearray | memoryview]) -> None:
        joined = b"".join(bytes(p) for p in parts)
        self.calls.append(("write_parts_at", offset, len(joined)))
        self._put(offset, joined)


def _images(pages: int) -> dict[int, bytes]:
    return {p: bytes([p]) * PS for p in range(1, pages + 1)}


def test_one_range_is_one_plain_write() -> None:
    rec = Recorder(4 * PS)
    write_pages(rec, PS, _images(3), set(), [(2 * PS + 10, 2 * PS + 30)])  # type: ignore[arg-type]
    assert rec.calls == [("write_at", 2 * PS + 10, 20)]
    assert rec.data[2 * PS + 10 : 2 * PS + 30] == bytes([2]) * 20
    assert sum(rec.written) == 20


def test_a_commits_ranges_and_the_marked_header_go_in_one_batch_header_first() -> None:
    rec = Recorder(4 * PS)
    spans = [(2 * PS + 10, 2 * PS + 30), (2 * PS + 100, 2 * PS + 110), (3 * PS + 4, 3 * PS + 6)]
    write_pages(rec, PS, _images(3), set(), spans, (0, b"H" * 8))  # type: ignore[arg-type]
    assert rec.calls == [
        ("write_at", 0, 8), ("write_at", 2 * PS + 10, 20), ("write_at", 2 * PS + 100, 10), ("write_at", 3 * PS + 4, 2)
    ]
    assert rec.batches == [4]


def test_scattered_whole_pages_go_in_one_batch_after_the_marked_header() -> None:
    rec = Recorder(8 * PS)
    write_pages(rec, PS, _images(7), {1, 3, 4, 6}, [], (0, b"H" * 8))  # type: ignore[arg-type]
    assert rec.calls[0] == ("write_at", 0, 8)  # the FLUSHING mark before any page
    assert sorted(rec.calls[1:]) == [("write_at", PS, PS), ("write_at", 6 * PS, PS), ("write_parts_at", 3 * PS, 2 * PS)]
    assert rec.batches == [3]  # the header and the two lone pages; the run of two is one vectored write
    assert rec.data[3 * PS : 5 * PS] == bytes([3]) * PS + bytes([4]) * PS


def test_ranges_touching_across_pages_merge_into_one_write() -> None:
    rec = Recorder(4 * PS)
    spans = [(2 * PS - 8, 2 * PS), (2 * PS, 2 * PS + 8), (3 * PS + 4, 3 * PS + 6)]
    write_pages(rec, PS, _images(3), set(), spans)  # type: ignore[arg-type]
    assert rec.calls == [("write_parts_at", 2 * PS - 8, 16), ("write_at", 3 * PS + 4, 2)]
    assert rec.data[2 * PS - 8 : 2 * PS + 8] == bytes([1]) * 8 + bytes([2]) * 8
    assert sum(rec.written) == 18


@settings(max_examples=60, deadline=None)
@given(
    whole=st.sets(st.integers(1, 6)),
    spans=st.lists(st.tuples(st.integers(1, 6), st.integers(0, PS - 1), st.integers(1, PS)), max_size=8),
)
def test_exactly_the_journalled_bytes_are_written(whole: set[int], spans: list[tuple[int, int, int]]) -> None:
    ranges = {(p * PS + a, p * PS + min(PS, a + n)) for p, a, n in spans}
    rec = Recorder(7 * PS)
    images = _images(6)
    write_pages(rec, PS, images, whole, ranges)  # type: ignore[arg-type]
    expect = bytearray(7 * PS)
    for p in whole:
        expect[p * PS : (p + 1) * PS] = b"\x01" * PS
    for start, end in ranges:
        expect[start:end] = b"\x01" * (end - start)
    assert rec.written == expect  # never a byte the journal holds no after-image for
    for p in range(1, 7):
        for i in range(p * PS, (p + 1) * PS):
            if rec.written[i]:
                assert rec.data[i] == p


def test_each_commit_flush_leaves_a_clean_header_and_checksums(tmp_path: os.PathLike[str]) -> None:
    path = os.path.join(str(tmp_path), "store.db")
    with PageStore.open(path, page_size=PS, apply="commit") as store:
        for round_ in range(3):
            with store.transaction() as tx:  # the header changes: a new page
                page = tx.allocate()
                tx.write(page, 0, b"new %d" % round_)
            with store.transaction() as tx:  # the header stays: a small change of one page
                tx.write(page, 100, b"again")
            with store.transaction() as tx:  # two pages
                tx.write(1, 200, b"one")
                tx.write(page, 300, b"two")
            with open(path, "rb") as f:
                raw = f.read()
            header = store_codec.decode_header(raw[: store_codec.HEADER_SIZE])
            assert header.page_count == store.page_count == round_ + 1
            assert not header.flags & store_codec.FLUSHING
            assert raw[page * PS : page * PS + 5] == b"new %d" % round_
            assert raw[page * PS + 300 : page * PS + 303] == b"two"
            assert "the pages in the store file match their checksums" in store.verify()[-1]
    with PageStore.open(path) as store:
        assert "the pages in the store file match their checksums" in store.verify()[-1]
        assert store.read(3, 100, 5) == b"again"
