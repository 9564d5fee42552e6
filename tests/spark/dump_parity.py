"""What the JVM connector's ``*Dump`` mains and the Python reference readers give, in one
text form, so a parity test compares them row for row and error for error.

A dump prints one line per row (the columns' values, tab-separated; bytes as hex, timestamps
as microseconds since the epoch, null as ``None``) or ``ERROR <Type>: <message>``, and ``--``
between cases; the Python side prints the same from the reference reader's partitions and
batches.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from engine.errors import EngineError
from engine.fs import OpenMode, resolve
from engine.spark import jvmbuild
from engine.spark.options import lower, read_schema

#: (options, columns or None for every column)
Case = tuple[dict[str, str], list[str] | None]


def _text(value: object) -> str:
    if value is None:
        return "None"
    if isinstance(value, bytes):
        return value.hex()
    return str(value)


def poke(path: str, offset: int, raw: bytes) -> None:
    """Damage a case's file: ``raw`` written over it at ``offset`` (through the file-system seam)."""
    with resolve(None).open(path, OpenMode.WRITE) as h:
        h.write_at(offset, raw)


def truncate(path: str, size: int) -> None:
    """Cut a case's file to ``size`` bytes (a torn tail)."""
    with resolve(None).open(path, OpenMode.WRITE) as h:
        h.truncate(size)


def run_java(main: str, args: list[str], timeout: float = 300) -> str:
    """What ``main`` (a class of the connector jar) prints given ``args``: one short-lived JVM
    (the C1 compiler only: they exit in seconds); its exit status must be 0."""
    cp = os.pathsep.join([jvmbuild.connector_jar(), *jvmbuild.spark_jars()])
    java = jvmbuild._tool("java") or "java"
    done = subprocess.run([java, "-XX:TieredStopAtLevel=1", "-Xshare:auto", "-cp", cp, main, *args],
                          capture_output=True, text=True, check=False, timeout=timeout)
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


def run_dump(main: str, args: list[str], timeout: float = 300) -> list[list[str]]:
    """A dump main's output for several cases (their arguments separated by ``--``, in one
    JVM): each case's lines, split at the ``--`` lines the dump prints between them."""
    out: list[list[str]] = [[]]
    for line in run_java(main, args, timeout).splitlines():
        if line == "--":
            out.append([])
        else:
            out[-1].append(line)
    return out


@dataclass(frozen=True)
class DumpParity:
    """One format's pair: the dump's main class, the reference reader and its schema, and the
    words the dump wants before each case's options (QueueDump's ``read``)."""

    main: str
    reader: Any
    schema: StructType
    before: tuple[str, ...] = ()

    def python_rows(self, opts: dict[str, str], columns: list[str] | None = None) -> list[str]:
        """What the Python reader gives, in the dump's format."""
        out: list[str] = []
        try:
            full = read_schema(self.schema, lower(opts))
            schema = full if columns is None else StructType(
                [f for f in full.fields if f.name in columns or f.name == "_corrupt_record"])
            reader = self.reader(dict(opts), schema)
            for part in reader.partitions():
                for batch in reader.read(part):
                    # Timestamps as the dump spells them (Spark's long: microseconds).
                    cols = [(c.cast(pa.int64()) if pa.types.is_timestamp(c.type) else c).to_pylist()
                            for c in batch.columns]
                    out += ["\t".join(_text(col[i]) for col in cols) for i in range(batch.num_rows)]
        except EngineError as exc:
            out.append(f"ERROR {type(exc).__name__}: {exc}")
        except FileNotFoundError as exc:
            out.append(f"ERROR FileNotFoundError: {exc}")
        return out

    def jvm_rows(self, cases: list[Case]) -> list[list[str]]:
        """What the JVM reader gives for each case (one run of the dump for all)."""
        args: list[str] = []
        for k, (opts, columns) in enumerate(cases):
            if k:
                args.append("--")
            args += [*self.before, *(f"{key}={value}" for key, value in opts.items())]
            if columns:
                args.append(f"columns={','.join(columns)}")
        out = run_dump(self.main, args)
        assert len(out) == len(cases)
        return out

    def agree_all(self, cases: list[Case]) -> list[list[str]]:
        """Both sides on every case; they must agree. Returns the rows."""
        jvm = self.jvm_rows(cases)
        py = [self.python_rows(opts, columns) for opts, columns in cases]
        for (opts, columns), j, p in zip(cases, jvm, py, strict=True):
            assert j == p, (opts, columns)
        return py

    def agree(self, opts: dict[str, str], columns: list[str] | None = None) -> list[str]:
        return self.agree_all([(opts, columns)])[0]
