"""The only place a SparkSession is built: builder in, builder out, from conf, never at import time."""
from __future__ import annotations

import os
import sys

from pipelines.config import Settings


def spark_builder(settings: Settings, app_name: str | None = None):
    """A SparkSession builder carrying every `spark:` setting of `settings`."""
    from pyspark.sql import SparkSession  # imported here: importing pipelines never starts a JVM

    # Spark's Python workers must run the interpreter that has this project installed.
    python = settings.python_executable or sys.executable
    os.environ.setdefault("PYSPARK_PYTHON", python)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", python)
    builder = SparkSession.builder
    conf = settings.spark_conf
    master = settings.spark_master_from_env or conf.pop("spark.master", None)
    conf.pop("spark.master", None)
    # Under spark-submit the master (and resources) come from the submit command: never override them.
    if master and not settings.launched_by_spark_submit:
        builder = builder.master(master)
    for k, v in conf.items():
        builder = builder.config(k, v)
    if app_name:
        builder = builder.appName(app_name)
    return builder


def get_spark(settings: Settings, app_name: str | None = None):
    """Get or create the session for a run; quiet logs so progress lines stay readable."""
    spark = spark_builder(settings, app_name).getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark
