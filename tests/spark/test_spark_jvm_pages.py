"""The JVM engine-pages connector (engine.spark.PagesSource) in Spark: the rows the Python
reference reader (engine.spark.pagesource.PagesReader) gives, whatever the filters pushed, with
the page-range and free filters answered by the connector itself."""

from __future__ import annotations

import re
import shutil
from typing import Any

import pytest
from source_parity import SourceParity, plan, scan_rows

from engine.fs import OpenMode, resolve
from engine.pages import PageStore
from engine.spark import jvmbuild
from engine.spark.pagesource import PagesReader
from engine.spark.schemas import PAGES_SCHEMA

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
JVM = "engine.spark.PagesSource"
_SPARK = SourceParity(JVM, PagesReader, PAGES_SCHEMA, "pages")
same = _SPARK.same


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> str:
    path = str(tmp_path_factory.mktemp("jvmpages")) + "/store.db"
    with PageStore.open(path, page_size=512, create=True) as ps:
        with ps.transaction() as tx:
            for i in range(300):
                tx.write(tx.allocate(), 0, b"page-%d" % i * (1 + i % 5))
        for p in (7, 100, 101, 250, 300):
            with ps.transaction() as tx:
                tx.free(p)
    return path


@pytest.mark.parametrize("where", [
    "true", "page >= 100 and page < 110", "page = 7", "page > 295", "page <= 3", "2 > page", "page between 90 and 300",
    "free = true", "free = false and page < 20", "not free", "page = 7 or page = 9", "offset > 150000",
    "page > 400", "page < 0",
])
def test_filters(spark: Any, store: str, where: str) -> None:
    same(spark, store, f"select * from {{t}} where {where}")
    same(spark, store, f"select page, free from {{t}} where {where}", pagesPerPartition="64")


def test_aggregates(spark: Any, store: str) -> None:
    rows = same(spark, store,
                "select count(*), sum(cast(free as int)), min(page), max(page), sum(length(data)) from {t}")
    assert rows[0][:4] == (300, 5, 1, 300)
    same(spark, store, "select store, free, count(*) from {t} group by store, free")


def test_pushed_filters_are_trusted(spark: Any, store: str) -> None:
    df = spark.read.format(JVM).load(store).where("page >= 100 and page < 120 and free = false")
    text = plan(df)
    assert "pushed filters: [" in text and "page" in text
    assert not re.search(r"\bFilter\b", text), text  # Spark does not filter again
    assert df.count() == 18
    partial = spark.read.format(JVM).load(store).where("page = 3 or free")
    assert re.search(r"\bFilter\b", plan(partial))  # not answered by the connector: Spark filters
    assert partial.count() == 6


def test_pruning_statistics_and_partitions(spark: Any, store: str) -> None:
    df = spark.read.format(JVM).load(store).select("page")
    assert "engine-pages [page]" in plan(df)
    assert scan_rows(spark, df) == 300
    assert spark.read.format(JVM).option("pagesPerPartition", "64").load(store).rdd.getNumPartitions() == 5
    ranged = spark.read.format(JVM).option("pagesPerPartition", "64").load(store).where("page between 70 and 140")
    assert ranged.rdd.getNumPartitions() == 2 and ranged.count() == 71


def test_damage_follows_the_mode(spark: Any, store: str, tmp_path: Any) -> None:
    path = str(tmp_path / "damaged.db")
    for suffix in ("", "-sums"):
        shutil.copy(store + suffix, path + suffix)
    with resolve(None).open(path, OpenMode.WRITE) as h:
        h.write_at(200 * 512 + 5, b"\xff")  # page 200 fails its checksum
    for mode in ("DROPMALFORMED", "PERMISSIVE"):
        same(spark, path, "select * from {t}", mode=mode, pagesPerPartition="64")
        same(spark, path, "select page, free from {t} where page > 150 or free", mode=mode)
    rows = spark.read.format(JVM).option("mode", "PERMISSIVE").load(path).where("_corrupt_record is not null").collect()
    assert len(rows) == 1 and "page 200 matching its checksum" in rows[0]["_corrupt_record"]
    with pytest.raises(Exception, match="matching its checksum"):
        spark.read.format(JVM).load(path).collect()
    # A range that leaves the damaged page out never reads it.
    assert spark.read.format(JVM).load(path).where("page < 150").count() == 149
