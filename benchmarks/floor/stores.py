"""The floor programs' arguments for each store: the byte layout of the same work,
computed from the store's own codecs and defaults, so that a floor writes exactly
what the store writes (sizes of records, frames, headers, checkpoint files) and
syncs as its policy says.  The tests (``tests/foundation/test_benchmarks_floor.py``)
hold every program to the engine's byte count for the same work.
"""

from __future__ import annotations

import os

#: The page store benchmark's page size.
PAGE = 4096
#: The buffered stores' sync period in the benchmarks (sync=0.05).
PERIOD = 0.05


def tx_journal_bytes(pages: int, page_size: int = PAGE) -> int:
    """Journal bytes of one transaction rewriting ``pages`` whole pages (header, a
    MODIFY op with the before and the after image per page, COMPLETE), from the codec."""
    from engine.pages import codec

    image = bytes(page_size)
    ops: list[bytes] = []
    for i in range(pages):
        ops += map(bytes, codec.modify_parts((i + 1) * page_size, 0, image, image))
    return codec.encode_linked_transaction_parts(codec.FILE_HEADER_SIZE, 0, 0, ops, 0)[3]


def pages_args(
    directory: str, pages: int, cycle: int, count: int, millis: int, *, final: bool, start_tx: int = 0
) -> list[object]:
    """Arguments of ``pages_tx`` for transactions of ``pages`` whole pages cycling over
    ``cycle`` pages (``count`` of them, or as many as fit in ``millis``), with the
    store's default checkpoint policy and its file layout; ``final``: end with
    PageStore.checkpoint() (its journal reset synced)."""
    from engine.pages import codec, store_codec
    from engine.pages.store import DEFAULT_CHECKPOINT_BYTES, DEFAULT_CHECKPOINT_MAX_BYTES

    base = os.path.join(directory, f"floor-{pages}")
    wipe = codec.FILE_HEADER_SIZE + codec.TX_HEADER_SIZE + codec.OP_HEADER.size
    sum_bytes = 4  # one CRC-32C per page in the sums file
    return [
        base + "-journal", base + ".db", base + "-sums", PAGE, pages, cycle, count, millis,
        tx_journal_bytes(pages), DEFAULT_CHECKPOINT_BYTES, DEFAULT_CHECKPOINT_MAX_BYTES, int(final),
        codec.TX_FLAGS_OFFSET, store_codec.HEADER_SIZE, store_codec.SUMS_HEADER_SIZE, sum_bytes, wipe, start_tx,
    ]


def queue_put_args(prefix: str, size: int, n: int) -> list[object]:
    """Arguments of ``queue_put``: ``n`` PUT records of ``size`` data bytes, the
    writer's 64 KiB writes each with its CHECK, the default 16 MiB files, sync period
    50 ms.  (The program can also rewrite a shared state record after each write
    and sync; the queue's multi-producer state record is left out for now: it was
    changing while these floors were written.)"""
    from engine.queue import codec
    from engine.queue.config import QueueConfig
    from engine.queue.segments import SEGMENT_HEADER

    check = len(codec.encode_check(b""))
    journal = QueueConfig().journal_size
    args: list[object] = [prefix, codec.put_size(size, False), n, 64 * 1024, check, len(SEGMENT_HEADER)]
    return [*args, int(PERIOD * 1000), journal]


def queue_get_args(prefix: str, *, cold: bool) -> list[object]:
    """Arguments of ``queue_get`` over the files ``queue_put`` wrote at ``prefix``:
    the reader's read size, its reader file's size, its checkpoint interval."""
    from engine.queue import codec
    from engine.queue.config import QueueConfig
    from engine.queue.segments import CHUNK

    directory = os.path.dirname(prefix)
    stem = os.path.basename(prefix) + "."
    files = sum(1 for name in os.listdir(directory) if name.startswith(stem) and name[len(stem) :].isdigit())
    reader = len(codec.encode_reader_file(1, []))
    interval = int(QueueConfig().checkpoint_interval * 1000)
    return [prefix, files, CHUNK, reader, interval, int(cold), prefix + ".read"]


def applog_args(base: str, size: int, batch: int, batches: int, period_ms: int = int(PERIOD * 1000)) -> list[object]:
    """Arguments of ``applog_append``: ``batches`` ``append_many`` calls of ``batch``
    records of ``size`` bytes into one segment at ``base``.{log,crc,idx}."""
    from engine.applog import codec

    files = [base + ".log", base + ".crc", base + ".idx"]
    sizes = [codec.CRC_SIZE, codec.ENTRY_SIZE, codec.HEADER_SIZE]
    return [*files, codec.RECORD_HEADER_SIZE + size, batch, batches, period_ms, *sizes]


def streams_args(
    path: str, clients: int, streams_each: int, stream_bytes: int, write_bytes: int, size: int
) -> list[object]:
    """Arguments of ``streams_write``: the records of ``clients`` x ``streams_each``
    streams of ``stream_bytes`` sent in ``write_bytes`` writes (the INFO record sized
    for the benchmark's identifiers ``bench-<client>-<n>``), the journal's default
    page size, commit delay and spill size, a ``size``-byte journal."""
    from engine.streams import codec
    from engine.streams.journal import DEFAULT_SYNC_DELAY, SPILL_SIZE

    page = 4096
    records = -(-stream_bytes // write_bytes)
    idents = [f"bench-{k}-{i}" for k in range(clients) for i in range(streams_each)]
    info = codec.RECORD_OVERHEAD + len(codec.encode_info(0, b"")) + round(sum(map(len, idents)) / len(idents))
    record = codec.RECORD_OVERHEAD + write_bytes
    args: list[object] = [path, clients, streams_each, records, record, info, page, size]
    return [*args, int(DEFAULT_SYNC_DELAY * 1e6), record, SPILL_SIZE]
