"""What ``import engine`` offers: the stores and every error class, nothing else."""

from __future__ import annotations

import inspect

import engine
import engine.errors
from engine.streams import StreamRejected


def test_every_error_is_importable_from_engine_and_documented() -> None:
    errors = {n for n, c in vars(engine.errors).items() if inspect.isclass(c) and issubclass(c, BaseException)}
    errors.discard("Exception")
    assert errors <= set(engine.__all__)
    for name in errors:
        assert getattr(engine, name) is getattr(engine.errors, name)
        assert issubclass(getattr(engine, name), engine.EngineError)
    index = (engine.__file__.rsplit("/engine/", 1)[0] + "/docs/index.md")
    with open(index) as docs:
        table = docs.read()
    missing = [name for name in errors if f"`{name}" not in table]
    assert not missing, f"docs/index.md's errors table lacks {missing}"
    assert StreamRejected is engine.StreamRejected


def test_dir_shows_the_public_names_only() -> None:
    names = dir(engine)
    assert {"Queue", "PageStore", "KV", "AppendLog", "EventJournal", "StreamJournal"} <= set(names)
    assert not {"Any", "TYPE_CHECKING", "importlib"} & set(names)
