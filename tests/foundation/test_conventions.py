"""The shared API conventions (engine.conventions): durations, instants, payload
serializers, the bytes check and the unclosed-object finalizer."""

from __future__ import annotations

import datetime as dt
import gc
import json
import pickle
import warnings

import pytest

from engine.conventions import (
    Serializer,
    datetime_from_ms,
    datetime_from_ns,
    duration_ns,
    duration_seconds,
    instant_ms,
    instant_ns,
    instant_seconds,
    require_bytes,
    serializer,
    timeout_seconds,
    warn_unclosed,
)
from engine.errors import ConfigError

UTC = dt.timezone.utc  # noqa: UP017 - spelled as users of older Pythons do


def test_durations_accept_seconds_and_timedeltas() -> None:
    assert duration_seconds(1.5, "ttl") == 1.5
    assert duration_seconds(2, "ttl") == 2.0
    assert duration_seconds(dt.timedelta(minutes=2), "ttl") == 120.0
    assert duration_seconds(None, "ttl", allow_none=True) is None
    assert duration_seconds(0, "delay", allow_zero=True) == 0.0
    assert duration_ns(dt.timedelta(seconds=1, microseconds=3), "ttl") == 1_000_003_000
    assert duration_ns(0.25, "ttl") == 250_000_000
    assert timeout_seconds(None) is None and timeout_seconds(0) == 0.0
    assert timeout_seconds(dt.timedelta(milliseconds=5)) == 0.005


@pytest.mark.parametrize(
    ("value", "error", "words"),
    [
        ("1h", TypeError, "ttl must be a number of seconds or a datetime.timedelta, not str '1h'"),
        (None, TypeError, "ttl must be a number of seconds"),
        (True, TypeError, "not bool"),
        (0, ConfigError, "ttl must be > 0 seconds, got 0"),
        (-1, ConfigError, "ttl must be > 0 seconds, got -1"),
        (dt.timedelta(seconds=-1), ConfigError, "ttl must be > 0 seconds"),
        (float("nan"), ConfigError, "ttl must be finite"),
    ],
)
def test_durations_refuse_in_the_users_terms(value: object, error: type[Exception], words: str) -> None:
    with pytest.raises(error, match=words.replace("(", r"\(").replace(")", r"\)")):
        duration_seconds(value, "ttl")


def test_instants_accept_datetimes_and_epoch_seconds() -> None:
    when = dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)
    assert instant_seconds(when, "at") == when.timestamp()
    assert instant_ns(when, "at") == 1_714_564_800_123_456_000
    assert instant_ms(when, "at") == 1_714_564_800_123
    assert instant_seconds(1_714_564_800.5, "at") == 1_714_564_800.5
    assert instant_ms(1_714_564_800.5, "at") == 1_714_564_800_500
    naive = dt.datetime(2024, 5, 1, 12, 0, 0)  # local time, as datetime.timestamp() reads it
    assert instant_ns(naive, "at") == round(naive.timestamp() * 1e9)
    assert datetime_from_ms(1_714_564_800_123) == dt.datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)
    assert datetime_from_ns(1_714_564_800_123_456_789) == dt.datetime(2024, 5, 1, 12, 0, 0, 123456, tzinfo=UTC)


def test_instants_refuse_timedeltas_and_strings() -> None:
    with pytest.raises(TypeError, match=r"expire_at is an instant .* not a timedelta"):
        instant_seconds(dt.timedelta(hours=1), "expire_at")
    with pytest.raises(TypeError, match="expire_at must be a datetime or a number of seconds since the epoch, not str"):
        instant_ns("tomorrow", "expire_at")


def test_require_bytes_says_what_to_do() -> None:
    for ok in (b"x", bytearray(b"x"), memoryview(b"x")):
        require_bytes(ok)
    with pytest.raises(TypeError, match=r"data must be bytes, not str: encode it \(data.encode\(\)\)"):
        require_bytes("text")
    with pytest.raises(TypeError, match="payload must be bytes, not int: open the store with serializer="):
        require_bytes(5, "payload")


def test_serializers() -> None:
    assert serializer(None) is None
    js = serializer("json")
    assert js is not None and js.loads(js.dumps({"a": [1, "é"]})) == {"a": [1, "é"]}
    assert js.dumps({"a": 1}) == b'{"a":1}'
    pk = serializer("pickle")
    assert pk is not None and pk.loads(pk.dumps({1, 2})) == {1, 2}
    pair = serializer((lambda o: json.dumps(o).encode(), json.loads))
    assert pair is not None and pair.loads(pair.dumps([1])) == [1]
    custom = Serializer(pickle.dumps, pickle.loads, "mine")
    assert serializer(custom) is custom
    with pytest.raises(ConfigError, match="serializer must be one of 'pickle', 'json'"):
        serializer("yaml")
    with pytest.raises(TypeError, match="serializer must be"):
        serializer(json)


class Resource:
    """A stand-in for a store: its resources live apart from it, so it can be collected."""

    def __init__(self, log: list[str]) -> None:
        self.finalizer = warn_unclosed(self, lambda: log.append("closed"), "resource 'r'")

    def close(self) -> None:
        self.finalizer.detach()


def test_unclosed_objects_are_closed_with_a_resource_warning() -> None:
    log: list[str] = []
    res = Resource(log)
    with pytest.warns(ResourceWarning, match="unclosed resource 'r'"):
        del res
        gc.collect()
    assert log == ["closed"]


def test_closed_objects_warn_nothing() -> None:
    log: list[str] = []
    res = Resource(log)
    res.close()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        del res
        gc.collect()
    assert log == []


def test_a_failing_close_becomes_a_warning() -> None:
    def boom() -> None:
        raise OSError("gone")

    class Owner:
        pass

    owner = Owner()
    warn_unclosed(owner, boom, "thing")
    with pytest.warns(ResourceWarning, match="closing thing on exit failed"):
        del owner
        gc.collect()


def test_a_forked_child_does_not_close_its_parents_objects() -> None:
    import os

    log: list[str] = []
    res = Resource(log)
    pid = os.fork()
    if pid == 0:  # the child: run the finalizer as interpreter exit would
        res.finalizer()
        os._exit(0 if log == [] else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    res.close()


def test_decoding_class_for_named_tuples_and_dataclasses() -> None:
    import dataclasses
    import pickle
    from typing import NamedTuple

    from engine.conventions import decoding_class, serializer

    class Row(NamedTuple):
        key: int
        data: bytes

    @dataclasses.dataclass(slots=True)
    class Box:
        key: int
        data: bytes

    assert decoding_class(Row, None, "data") is Row
    for base in (Row, Box):
        cls = decoding_class(base, serializer("json"), "data")
        row = cls(1, b'{"a": 2}')
        assert row.value == {"a": 2} and row.data == b'{"a": 2}'
        assert cls.__name__ == base.__name__ and isinstance(row, base)
        if base is Row:  # locally defined classes do not pickle; their reduction is what matters
            assert row.__reduce__() == (Row, (1, b'{"a": 2}'))
        else:
            assert row.__reduce__() == (Box, (1, b'{"a": 2}'))
    from engine.queue.reader import Item, item_class

    decoded = item_class(serializer("json"))(5, b"[1]", 1000)
    plain = pickle.loads(pickle.dumps(decoded))
    assert type(plain) is Item and plain.data == b"[1]" and decoded.value == [1]
