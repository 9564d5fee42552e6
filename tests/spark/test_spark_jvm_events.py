"""The JVM engine-events connector (engine.spark.EventsSource) in Spark: the rows the Python
reference reader (engine.spark.eventsource.EventsReader) gives, whatever the filters pushed, with
the id and sequence-number filters answered by the connector itself."""

from __future__ import annotations

import re
from typing import Any

import pytest
from source_parity import SourceParity, plan, scan_rows

from engine.events import EventJournal
from engine.fs import OpenMode, resolve
from engine.spark import jvmbuild
from engine.spark.eventsource import EventsReader
from engine.spark.schemas import EVENTS_SCHEMA

pytestmark = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))
JVM = "engine.spark.EventsSource"
_SPARK = SourceParity(JVM, EventsReader, EVENTS_SCHEMA, "ev")
same = _SPARK.same


@pytest.fixture(scope="module")
def journal(tmp_path_factory: pytest.TempPathFactory) -> str:
    d = str(tmp_path_factory.mktemp("jvmev")) + "/orders"
    with EventJournal.open(d, sync="never") as j:
        for start in range(1, 41, 4):
            for k in range(12):
                j.write(f"id-{k}", [(s, b"%d:%d" % (k, s) + b"x" * (s % 7)) for s in range(start, start + 4)])
        j.delete_to("id-2", 10)
        j.delete_to("id-5", 40)
    return d


@pytest.mark.parametrize("where", [
    "true",
    "persistence_id = 'id-3'",
    "persistence_id in ('id-1', 'id-2', 'nope')",
    "sequence_nr >= 5 and sequence_nr <= 7",
    "sequence_nr > 38", "sequence_nr < 2", "sequence_nr = 40", "sequence_nr > 40", "12 >= sequence_nr",
    "persistence_id = 'id-2' and sequence_nr between 9 and 13",
    "persistence_id = 'id-1' or sequence_nr = 3",
    "sequence_nr between 3 and 4 or sequence_nr = 30",
    "payload = X'333A33'",
])
def test_filters(spark: Any, journal: str, where: str) -> None:
    same(spark, journal, f"select * from {{t}} where {where}")
    same(spark, journal, f"select persistence_id, sequence_nr from {{t}} where {where}")


@pytest.mark.parametrize("options", [
    {}, {"idsPerPartition": "5"}, {"persistenceIds": "id-0,id-7"}, {"fromSequenceNr": "30", "toSequenceNr": "33"},
])
def test_options_and_aggregates(spark: Any, journal: str, options: dict[str, str]) -> None:
    same(spark, journal, "select count(*), min(sequence_nr), max(sequence_nr) from {t}", **options)
    same(spark, journal, "select persistence_id, count(*) from {t} group by persistence_id", **options)
    same(spark, journal, "select journal, sum(length(payload)) from {t} group by journal", **options)


def test_pushed_filters_are_trusted(spark: Any, journal: str) -> None:
    df = spark.read.format(JVM).load(journal).where("persistence_id = 'id-4' and sequence_nr >= 20")
    text = plan(df)
    assert "pushed filters: [" in text and "persistence_id" in text
    assert not re.search(r"\bFilter\b", text), text  # Spark does not filter again
    assert df.count() == 21
    partial = spark.read.format(JVM).load(journal).where("sequence_nr = 3 or persistence_id = 'id-1'")
    assert re.search(r"\bFilter\b", plan(partial))  # not answered by the connector: Spark filters


def test_pruning_and_statistics(spark: Any, journal: str) -> None:
    df = spark.read.format(JVM).load(journal).select("sequence_nr")
    assert "engine-events [sequence_nr]" in plan(df)
    assert scan_rows(spark, df) == 12 * 40 - 10 - 40
    assert df.count() == 12 * 40 - 10 - 40


def test_permissive_keeps_filters_in_spark(spark: Any, journal: str, tmp_path: Any) -> None:
    import shutil

    d = str(tmp_path / "damaged")
    shutil.copytree(journal, d)
    with resolve(None).open(d + "/data", OpenMode.WRITE) as h:
        h.write_at(8 + 24 + 1, b"\xff")  # id-0's first batch fails its checksum
    for mode in ("DROPMALFORMED", "PERMISSIVE"):
        same(spark, d, "select * from {t}", mode=mode)
        same(spark, d, "select * from {t} where persistence_id = 'id-0' or sequence_nr > 38", mode=mode)
    rows = spark.read.format(JVM).option("mode", "PERMISSIVE").load(d).where("_corrupt_record is not null").collect()
    assert len(rows) == 1 and "matching their checksum" in rows[0]["_corrupt_record"]
    with pytest.raises(Exception, match="matching their checksum"):
        spark.read.format(JVM).load(d).collect()


def test_partitions_follow_the_events(spark: Any, journal: str) -> None:
    """Runs of ids holding 1 / minPartitions of the events (at most eventsPerPartition), or
    idsPerPartition ids each (12 ids, 11 live, 430 events)."""
    def parts(**options: str) -> int:
        return int(spark.read.format("engine-events").options(**options).load(journal).rdd.getNumPartitions())

    assert parts() == 2
    assert parts(minPartitions="4") == 4
    assert parts(eventsPerPartition="100") == 4  # runs of 110, 120, 120 events, then 80
    assert parts(idsPerPartition="5") == 3
    assert parts(persistenceIds="id-1") == 1
