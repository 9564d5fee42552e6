"""What ``EventJournal.write`` takes and what replay gives back, beyond bytes.

* :func:`batch_error`: the ``TypeError`` for a batch of the wrong shape, in the
  user's terms (``events`` must be an iterable of ``(sequence_number, payload)``
  pairs).  ``write`` calls it only once its fast path has already failed, so a
  well-formed batch pays nothing for it (writes are speed-measured).
* :func:`payload_error`: the ``TypeError`` for a payload that is not bytes (a
  ``str``: encode it or open the journal with ``serializer=``), or for a
  serializer whose ``dumps`` does not return bytes.
* :func:`event_class`: the class replay builds its events with when the journal
  has a serializer: an :class:`~engine.events.runs.Event` whose ``value`` is the
  serializer's ``loads(data)`` (as the queue's ``Item.value``).

No I/O, no journal import (the journal imports this).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.conventions import Serializer, decoding_class, require_bytes
from engine.events.runs import Event

#: How a batch is spelled, for the messages.
_SHAPE = "events must be an iterable of (sequence_number, payload) pairs, e.g. [(1, b'...'), (2, b'...')]"


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def batch_error(events: object, batch: list[Any] | None) -> TypeError:
    """Why ``events`` (listed as ``batch``; None when it is not iterable) is not a
    batch of ``(sequence_number, payload)`` pairs."""
    kind = type(events).__name__
    if isinstance(events, (str, bytes, bytearray, memoryview)):
        return TypeError(f"{_SHAPE}, not {kind} {_shown(events)}: "
                         "put the payload in a pair with its sequence number, in a list")
    if batch is None:
        return TypeError(f"{_SHAPE}, not {kind} {_shown(events)}")
    if isinstance(events, Mapping):
        return TypeError(f"{_SHAPE}, not a {kind} (for a mapping of sequence number to payload, pass "
                         "sorted(events.items()))")
    if (isinstance(events, tuple) and len(events) == 2 and isinstance(events[0], int)
            and not isinstance(events[1], (tuple, list))):
        return TypeError(f"{_SHAPE}, not one pair: write(persistence_id, [{_shown(events)}])")
    for i, item in enumerate(batch):
        if not isinstance(item, (tuple, list)) or len(item) != 2:
            return TypeError(f"{_SHAPE}; events[{i}] is {type(item).__name__} {_shown(item)}")
    return TypeError(f"{_SHAPE}, not {kind} {_shown(events)}")


def sequence_number_error(batch: list[Any]) -> TypeError | None:
    """A TypeError for the first sequence number that is not an int, if any."""
    for i, (seq, _payload) in enumerate(batch):
        if not isinstance(seq, int) or isinstance(seq, bool):
            return TypeError(f"events[{i}]: a sequence number must be an int, not {type(seq).__name__} "
                             f"{_shown(seq)}")
    return None


def payload_error(payloads: list[Any], serializer: Serializer | None) -> TypeError:
    """Why one of ``payloads`` (what the batch gave, after the serializer's
    ``dumps`` when there is one) is not bytes-like."""
    for i, payload in enumerate(payloads):
        if isinstance(payload, (bytes, bytearray, memoryview)):
            continue
        if serializer is not None:
            return TypeError(f"events[{i}]: the serializer {serializer.name!r} returned {type(payload).__name__}, "
                             "not bytes: its dumps must return bytes (e.g. json.dumps(obj).encode())")
        try:
            require_bytes(payload, "payload")
        except TypeError as exc:
            return TypeError(f"events[{i}]: {exc}")
    return TypeError("event payloads must be bytes")  # not reached: one of them is not bytes


def event_class(serializer: Serializer | None) -> type[Event]:
    """:class:`Event`, or (with a serializer) a subclass whose ``value`` is
    ``serializer.loads(payload)`` (:func:`engine.conventions.decoding_class`)."""
    return decoding_class(Event, serializer, "payload")
