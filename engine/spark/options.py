"""Options of the engine Spark sources: validation, paths, and the damaged-input mode.

Spark hands a Python data source its options as strings, case-insensitively.
Every source declares the options it understands; :func:`check_options` rejects
any other (``recordPerPartition`` for ``recordsPerPartition``) with the list of
valid ones, when the DataFrame is defined (``load()``), not when it runs.

Paths follow Spark's file sources: ``.load(PATH)``, ``.load([P1, P2])`` (Spark
passes the list as the JSON option ``paths``), and glob patterns (``*``, ``?``,
``[...]``) in any path component.  Paths are made absolute on the driver, so
executors on other machines (a cluster with a shared file system) resolve them
the same way.

``mode`` is Spark's convention for damaged input (as in its JSON and CSV
sources): ``FAILFAST`` (the default: the query fails with the file and offset),
``DROPMALFORMED`` (damaged records are left out, with a warning) or
``PERMISSIVE`` (they are kept with a ``_corrupt_record`` column saying what is
wrong; every other column becomes nullable).

A schema given with ``spark.read.schema(...)`` is how a read asks for fewer
columns (:func:`user_schema`): the sources decode only what it names.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Iterable, Mapping
from typing import Any

from pyspark.sql.types import StringType, StructField, StructType

from engine.errors import ConfigError
from engine.fs import FileSystem, resolve
from engine.spark.batches import CORRUPT_COLUMN

FAILFAST = "FAILFAST"
DROPMALFORMED = "DROPMALFORMED"
PERMISSIVE = "PERMISSIVE"
MODES = (FAILFAST, DROPMALFORMED, PERMISSIVE)
#: Options Spark itself passes on (the path or paths of ``load``/``save``, a
#: streaming query's checkpoint location).
PATH_OPTIONS = ("path", "paths", "checkpointLocation")
_GLOB_CHARS = set("*?[")


def lower(options: Mapping[str, Any]) -> dict[str, str]:
    """The options with lower-case keys (Spark's options are case-insensitive)."""
    return {str(k).lower(): str(v) for k, v in options.items()}


def check_options(source: str, options: Mapping[str, str], valid: Iterable[str]) -> None:
    """ConfigError naming an unknown option and listing the valid ones."""
    names = sorted(set(valid) | set(PATH_OPTIONS), key=str.lower)
    known = {n.lower() for n in names}
    unknown = sorted(k for k in options if k.lower() not in known)
    if unknown:
        raise ConfigError(f"{source}: unknown option(s) {', '.join(unknown)}; valid options: {', '.join(names)}")


def int_option(options: Mapping[str, str], key: str, default: int | None, *, minimum: int = 1) -> int | None:
    """An integer option (``default`` when absent); ConfigError when malformed or too small."""
    raw = options.get(key.lower())
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError as exc:
        raise ConfigError(f"option {key}={raw!r} is not an integer") from exc
    if value < minimum:
        raise ConfigError(f"option {key} must be at least {minimum}, not {value}")
    return value


def bool_option(options: Mapping[str, str], key: str, default: bool) -> bool:
    raw = options.get(key.lower())
    if raw is None:
        return default
    if raw.strip().lower() in ("true", "1", "yes"):
        return True
    if raw.strip().lower() in ("false", "0", "no"):
        return False
    raise ConfigError(f"option {key}={raw!r} is not true or false")


def mode_option(options: Mapping[str, str]) -> str:
    """The damaged-input mode (FAILFAST unless set)."""
    raw = options.get("mode", FAILFAST).strip().upper()
    if raw not in MODES:
        raise ConfigError(f"option mode={raw!r}: use one of {', '.join(MODES)}")
    return raw


def read_schema(schema: StructType, options: Mapping[str, str]) -> StructType:
    """The schema a read declares: ``schema``, or in PERMISSIVE mode every column
    nullable plus a ``_corrupt_record`` string column."""
    if mode_option(options) != PERMISSIVE:
        return schema
    fields = [StructField(f.name, f.dataType, True) for f in schema.fields if f.name != CORRUPT_COLUMN]
    return StructType([*fields, StructField(CORRUPT_COLUMN, StringType(), True)])


def user_schema(source: str, full: StructType, given: StructType, options: Mapping[str, str]) -> StructType:
    """``given`` (the schema a reader is handed), checked against ``full`` (the
    schema the source declares for these options, :func:`read_schema`).

    PySpark (4.3) gives a Python source no column pruning (no ``pruneColumns``
    on ``DataSourceReader``: Spark asks for every column of the schema); a schema
    given with ``spark.read.schema(...)`` is what reaches the reader instead, so
    that is how a read asks for fewer columns.  It may hold any of the source's
    columns, in any order, each with the source's type and nullability (a
    column may be declared nullable where the source's is not, never the
    reverse); in PERMISSIVE mode it must hold ``_corrupt_record`` (string), or
    damaged rows could not be told apart.  Anything else is a ConfigError
    listing the valid columns and types.  Spark hands the reader its schema when
    a query is planned, so that is when this fails.
    """
    if given == full:
        return given
    ours = {f.name: f for f in full.fields}
    valid = ", ".join(f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' NOT NULL'}" for f in full.fields)
    problems: list[str] = []
    seen: set[str] = set()
    for f in given.fields:
        mine = ours.get(f.name)
        if mine is None:
            problems.append(f"no column {f.name!r}")
        elif f.name in seen:
            problems.append(f"{f.name!r} twice")
        elif f.dataType != mine.dataType:
            problems.append(f"{f.name!r} is {f.dataType.simpleString()}, not {mine.dataType.simpleString()}")
        elif mine.nullable and not f.nullable:
            problems.append(f"{f.name!r} can be null, so it cannot be NOT NULL")
        seen.add(f.name)
    if not seen - {CORRUPT_COLUMN}:
        problems.append("no column of the source")
    if CORRUPT_COLUMN in ours and CORRUPT_COLUMN not in seen:
        problems.append(f"mode PERMISSIVE needs the {CORRUPT_COLUMN} column")
    if problems:
        raise ConfigError(f"{source}: the schema given with .schema(...) must be some of the source's columns "
                          f"with their types ({valid}); {'; '.join(problems)}")
    return given


def _expand(fs: FileSystem, pattern: str) -> list[str]:
    """The existing paths a glob pattern names (components without glob characters
    are taken as they are)."""
    parts = pattern.split("/")
    found = ["/" if pattern.startswith("/") else ""]
    for part in parts:
        if not part:
            continue
        nxt: list[str] = []
        for base in found:
            here = base.rstrip("/") + "/" if base else ""
            if _GLOB_CHARS & set(part):
                directory = base or "."
                if not fs.isdir(directory):
                    continue
                nxt.extend(here + n for n in sorted(fs.listdir(directory))
                           if fnmatch.fnmatchcase(n, part) and not n.startswith((".", "_")))
            else:
                nxt.append(here + part)
        found = nxt
    return [p for p in found if fs.exists(p)]


def input_paths(source: str, options: Mapping[str, str], fs: FileSystem | None = None,
                *, must_exist: bool = True) -> list[str]:
    """The absolute paths of a read: ``path`` or the JSON list ``paths``, globs expanded.

    A glob that matches nothing, or (with ``must_exist``) a path that does not
    exist, is a ConfigError, as in Spark's file sources.
    """
    fs = resolve(fs)
    raw: list[str] = []
    if options.get("paths"):
        try:
            listed = json.loads(options["paths"])
        except ValueError as exc:
            raise ConfigError(f"{source}: option paths={options['paths']!r} is not a JSON list") from exc
        if not isinstance(listed, list) or not all(isinstance(p, str) for p in listed):
            raise ConfigError(f"{source}: option paths must be a JSON list of strings")
        raw.extend(listed)
    if options.get("path"):
        raw.insert(0, options["path"])
    if not raw:
        raise ConfigError(f"{source} needs a path: .load(PATH), .load([PATH, ...]) or .option('path', PATH)")
    out: list[str] = []
    for p in raw:
        absolute = os.path.abspath(os.path.expanduser(p))
        if _GLOB_CHARS & set(p):
            matches = _expand(fs, absolute)
            if not matches:
                raise ConfigError(f"{source}: no path matches {p!r}")
            out.extend(matches)
        elif must_exist and not fs.exists(absolute):
            raise ConfigError(f"{source}: {absolute}: no such file or directory")
        else:
            out.append(absolute)
    return list(dict.fromkeys(out))


def one_path(source: str, options: Mapping[str, str]) -> str:
    """The single absolute path of a write (or a read that takes one path only)."""
    paths = input_paths(source, options, must_exist=False)
    if len(paths) != 1:
        raise ConfigError(f"{source}: needs exactly one path, got {len(paths)}")
    return paths[0]


def json_positions(source: str, key: str, raw: str) -> dict[str, int]:
    """A Kafka-style JSON option ``{"name": integer, ...}``."""
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise ConfigError(f"{source}: option {key}={raw!r} is neither a keyword nor JSON") from exc
    if not isinstance(doc, dict) or not all(isinstance(v, int) and not isinstance(v, bool) for v in doc.values()):
        raise ConfigError(f"{source}: option {key} must be a JSON object of integers, like "
                          '{"clicks": 1200}')
    return {str(k): int(v) for k, v in doc.items()}
