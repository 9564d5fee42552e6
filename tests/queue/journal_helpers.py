"""Writer-file bodies for the queue's decoder tests (imported by bare name, as
pytest puts this directory on the path): test_queue_columns.py and
test_queue_native.py build the same files."""

from __future__ import annotations

from engine.queue import codec

#: Records a writer file may hold that are not PUTs (skipped by the readers): a
#: READ_HEAD, an unknown command without data and one with a data block.
OTHERS = [codec.encode_read_head(3), bytes([0x31]) + bytes(4), bytes([0xA1]) + (3).to_bytes(4, "little") + b"abc"]


def journal_body(batches: list[list[bytes]], expiry: bool, others: bool = False, errors: int = 0) -> bytes:
    """A writer file's records (after the magic): the empty CHECK, then each batch
    of PUTs (ids from 1, error counts from ``errors``, every other one expiring when
    ``expiry``, one of :data:`OTHERS` first when ``others``) and its CHECK."""
    body, xid = codec.EMPTY_CHECK, 1
    for datas in batches:
        records = b"".join(
            codec.encode_put(
                xid + i, 1_700_000_000_000 + i, d, expire_time=(1_800_000_000_000 + i if expiry and i % 2 else None),
                error_count=(errors + i) % 7,
            )
            for i, d in enumerate(datas)
        )
        if others:
            records = OTHERS[xid % 3] + records
        body += records + codec.encode_check(records)
        xid += len(datas)
    return body
