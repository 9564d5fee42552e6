"""Persistent multi-reader queue on the libkestrel journal format.

>>> q = Queue.open("/tmp/qdir", "jobs")          # doctest: +SKIP
>>> q.put(b"hello")                              # doctest: +SKIP
1
>>> with q.reader().read(timeout=1) as item:     # doctest: +SKIP
...     print(item.data)

See ``docs/guide/queue.md`` and ``docs/formats/queue.md``.
"""

from __future__ import annotations

from engine.queue.config import QueueConfig
from engine.queue.diagnose import verify_queue
from engine.queue.queue import Queue
from engine.queue.reader import Item, Reader
from engine.queue.remote import RemoteReader
from engine.queue.repair import repair

__all__ = ["Item", "Queue", "QueueConfig", "Reader", "RemoteReader", "repair", "verify_queue"]
