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
