"""Instruction counts of the stream journal's write+ack path, for callgrind.

One operation is a whole stream: ``open_stream``, one 100-byte ``write``,
``close`` (its EOS committed and fdatasynced: the acknowledgement), on a 64 MiB
journal in /dev/shm with no sync delay.  The per-operation count is the
difference of two runs divided by the difference of their ``n`` (start-up and
the journal's creation cancel out)::

    for n in 200 1200; do valgrind --tool=callgrind --callgrind-out-file=/tmp/cg.$n \\
        python -m benchmarks.streams_instructions $n; done
    # (Ir(1200) - Ir(200)) / 1000

Issue 28 (the journal on the store core, split by state): 126,738 and 126,775
instructions a stream against 127,739-128,355 before (main 1976b4d, five runs).
"""

from __future__ import annotations

import os
import sys
import tempfile

from engine.streams import StreamJournal


def main() -> None:
    n = int(sys.argv[1])
    with tempfile.TemporaryDirectory(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as tmp:
        journal = StreamJournal.open(os.path.join(tmp, "j"), size=64 << 20, page_size=4096, sync_delay=0)
        payload = b"x" * 100
        for _ in range(n):
            stream = journal.open_stream(b"s")
            stream.write(payload)
            stream.close()
        journal.close()


if __name__ == "__main__":
    main()
