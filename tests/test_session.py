"""The driver JVM a session starts runs with the settings' Java options and the quiet log4j profile together
(`pipelines/session.py` adds the profile to what `spark.driver.extraJavaOptions` already holds)."""
from __future__ import annotations

import pytest


@pytest.mark.spark
def test_the_driver_jvm_has_the_settings_java_options_and_the_log4j_profile(spark, settings):
    wanted = settings.spark_conf["spark.driver.extraJavaOptions"].split()
    assert "-XX:TieredStopAtLevel=1" in wanted  # conf/base: the driver JVM compiles with C1 only
    bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    args = list(bean.getInputArguments())
    assert all(a in args for a in wanted), args
    assert any(a.startswith("-Dlog4j2.configurationFile=") for a in args), args


@pytest.mark.spark
def test_the_driver_jvm_maps_the_class_archive_make_setup_wrote(spark):
    """`make setup` writes the archive (`jobs.class_archive`); the session's JVM is given it and maps it."""
    from pathlib import Path

    from pipelines import class_archive

    if not class_archive.java_options():
        pytest.skip(f"no class archive at {class_archive.ARCHIVE}: `make setup` writes it")
    bean = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getRuntimeMXBean()
    assert f"-XX:SharedArchiveFile={class_archive.ARCHIVE}" in list(bean.getInputArguments())
    jvm = spark.sparkContext._gateway.proc.pid
    assert str(class_archive.ARCHIVE) in Path(f"/proc/{jvm}/maps").read_text()


def test_a_class_archive_is_used_only_whole(tmp_path, monkeypatch):
    """A JVM maps a truncated archive and dies (SIGBUS): the archive is used only at the size recorded when it was
    published, and not at all without that record."""
    from pipelines import class_archive

    monkeypatch.setattr(class_archive, "ARCHIVE", tmp_path / "share" / "classes.jsa")
    monkeypatch.setattr(class_archive, "STAMP", tmp_path / "share" / "classes.json")
    assert class_archive.java_options() == ""  # none
    partial = class_archive.partial_path()
    partial.parent.mkdir(parents=True)
    partial.write_bytes(b"\x00" * 4096)
    assert class_archive.java_options() == ""  # written, not yet published
    killed = partial.with_name(f".{class_archive.ARCHIVE.name}.{2**22 + 1}")  # past Linux's highest pid
    killed.write_bytes(b"\x00" * 10)
    path = class_archive.publish(partial)
    assert not partial.exists() and not killed.exists()
    assert class_archive.java_options() == f"-Xlog:cds*=off -XX:SharedArchiveFile={path}"
    path.write_bytes(b"\x00" * 1000)  # cut short
    assert class_archive.java_options() == ""
    path.write_bytes(b"\x00" * 4096)
    class_archive.STAMP.write_text("{")  # a stamp that is not whole either
    assert class_archive.java_options() == ""


def test_a_session_given_an_archive_option_is_not_given_a_second(monkeypatch, settings):
    """The archive is written by a JVM started with `-XX:ArchiveClassesAtExit` (`jobs.class_archive`): it must not
    also map the one it replaces."""
    import dataclasses

    from pipelines import class_archive, session
    from pipelines.config import _merge

    monkeypatch.setattr(class_archive, "java_options", lambda: "-XX:SharedArchiveFile=/x.jsa")
    writing = dataclasses.replace(settings, raw=_merge(settings.raw, {"spark": {
        "spark.driver.extraJavaOptions": "-XX:ArchiveClassesAtExit=/y.jsa"}}))
    for s, has in ((settings, True), (writing, False)):
        opts = session.spark_builder(s)._options["spark.driver.extraJavaOptions"]
        assert ("-XX:SharedArchiveFile=/x.jsa" in opts) is has, opts


def _thp_enabled(batches):
    import pyarrow as pa

    for _ in batches:
        status = open("/proc/self/status").read()
        value = status.split("THP_enabled:")[1].split()[0] if "THP_enabled:" in status else None
        yield pa.record_batch([pa.array([value], pa.string())], names=["thp"])


@pytest.mark.spark
def test_the_python_workers_arrow_memory_takes_no_transparent_huge_pages(spark):
    got = spark.range(0, 1, 1, numPartitions=1).mapInArrow(_thp_enabled, "thp string").toArrow()
    value = got.column("thp").to_pylist()[0]
    if value is None:
        pytest.skip("this kernel's /proc/<pid>/status has no THP_enabled")
    assert value == "0"
