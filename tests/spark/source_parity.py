"""What the JVM connector's sources and the Python reference readers give in Spark, compared
query by query: the JVM source loaded as Spark reads it, the reference reader's batches made a
DataFrame, the same SQL over both, so every filter, pruning and aggregate pushed into the
connector must give the rows Spark gets by doing that work itself over the reference rows.

The Spark-free counterpart (the ``*Dump`` mains' text, row for row and error for error) is
:mod:`dump_parity`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from engine.spark.options import lower, read_schema


def plan(df: Any) -> str:
    """The DataFrame's executed plan as Spark prints it (what the connector was pushed)."""
    return str(df._jdf.queryExecution().executedPlan().toString())


def scan_rows(spark: Any, df: Any) -> int:
    """The row count the connector's scan reports to Spark's optimizer (the statistics of the
    plan's leaf), read with the cost-based optimizer on: without it Spark keeps the size only."""
    spark.conf.set("spark.sql.cbo.enabled", "true")
    try:
        stats = df._jdf.queryExecution().optimizedPlan().collectLeaves().head().stats()
        return int(str(stats.rowCount().get()))
    finally:
        spark.conf.unset("spark.sql.cbo.enabled")


@dataclass(frozen=True)
class SourceParity:
    """One format's pair: the JVM source's class, the reference reader and its schema, and the
    tag of the temporary views the queries run over (``jvm_<tag>`` and ``py_<tag>``)."""

    jvm: str
    reader: Any
    schema: StructType
    tag: str

    def python_df(self, spark: Any, path: str, options: dict[str, str]) -> Any:
        """A DataFrame of what the reference reader reads, with no Spark source in between."""
        opts = {"path": path, **options}
        schema = read_schema(self.schema, lower(opts))
        reader = self.reader(dict(opts), schema)
        batches = [b for p in reader.partitions() for b in reader.read(p)]
        if not batches:
            return spark.createDataFrame([], schema)
        return spark.createDataFrame(pa.Table.from_batches(batches), schema)

    def same(self, spark: Any, path: str, query: str, **options: str) -> list[Any]:
        """The query's rows (``{t}`` in it: the table) over the JVM source and over the reference
        reader's rows, which Spark filters and aggregates itself; they must be equal. Returns
        them (sorted)."""
        jvm = spark.read.format(self.jvm).options(**options).load(path)
        py = self.python_df(spark, path, options)
        jvm.createOrReplaceTempView(f"jvm_{self.tag}")
        py.createOrReplaceTempView(f"py_{self.tag}")
        a = sorted(map(tuple, spark.sql(query.format(t=f"jvm_{self.tag}")).collect()), key=repr)
        b = sorted(map(tuple, spark.sql(query.format(t=f"py_{self.tag}")).collect()), key=repr)
        assert a == b
        return a
