"""The JVM connector's build (engine.spark.jvmbuild): offline, cached by source hash,
and one line saying what to install when it cannot be built."""

from __future__ import annotations

import os
import zipfile

import pytest

from engine.spark import jvmbuild

needs_jdk = pytest.mark.skipif(jvmbuild.missing() is not None, reason=str(jvmbuild.missing()))


def test_without_javac_one_line_says_what_to_install(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    problem = jvmbuild.missing()
    assert problem is not None and "\n" not in problem and "JDK 17" in problem
    with pytest.raises(jvmbuild.ConnectorUnavailable, match="JDK 17"):
        jvmbuild.build(jar=f"{tmp_path}/x.jar")
    assert not os.path.exists(f"{tmp_path}/x.jar")


@needs_jdk
def test_build_is_cached_by_source_hash(tmp_path: object) -> None:
    jar = f"{tmp_path}/engine-spark.jar"
    assert jvmbuild.build(jar=jar) == jar
    assert jvmbuild.built_hash(jar) == jvmbuild.source_hash()
    stamp = os.stat(jar).st_mtime_ns
    jvmbuild.build(jar=jar)  # unchanged sources: nothing compiled, the jar untouched
    assert os.stat(jar).st_mtime_ns == stamp
    with zipfile.ZipFile(jar) as z:
        names = set(z.namelist())
    assert "engine/spark/LogSource.class" in names and jvmbuild.HASH_ENTRY in names
    # A short name is registered only with its Python source retired (jvmbuild.REGISTERED).
    assert (jvmbuild.SERVICES in names) == bool(jvmbuild.REGISTERED)


@needs_jdk
def test_a_changed_source_rebuilds(tmp_path: object, monkeypatch: pytest.MonkeyPatch) -> None:
    jar = f"{tmp_path}/engine-spark.jar"
    jvmbuild.build(jar=jar)
    monkeypatch.setattr(jvmbuild, "JAVA_RELEASE", "17")  # same release: same hash
    assert jvmbuild.built_hash(jar) == jvmbuild.source_hash()
    with zipfile.ZipFile(jar) as z:
        # engine-log and engine-events are the JVM's
        assert z.read(jvmbuild.SERVICES).decode().splitlines() == list(jvmbuild.REGISTERED)
        assert {"engine.spark.LogSource", "engine.spark.EventsSource"} <= set(jvmbuild.REGISTERED)
    monkeypatch.setattr(jvmbuild, "REGISTERED", ())
    assert jvmbuild.built_hash(jar) != jvmbuild.source_hash()
    jvmbuild.build(jar=jar)
    with zipfile.ZipFile(jar) as z:
        assert jvmbuild.SERVICES not in z.namelist()


@needs_jdk
def test_the_session_carries_the_jar(spark: object) -> None:
    jars = spark.conf.get("spark.jars")  # type: ignore[attr-defined]
    assert jvmbuild.JAR in jars.split(",")


def test_first_spark_use_without_a_jdk_fails_in_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: object) -> None:
    """engine-log is served by the connector only: without a jar and a JDK to build it,
    building a session fails at once saying what to install (no silent Python fallback)."""
    from engine.spark import session

    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.setattr(jvmbuild, "built_hash", lambda jar=jvmbuild.JAR: None)  # no jar built
    assert "engine-log" in jvmbuild.REGISTERED_NAMES
    with pytest.raises(jvmbuild.ConnectorUnavailable, match="JDK 17") as info:
        session.connector_jar()
    assert "\n" not in str(info.value)
