"""The only place a SparkSession is built: builder in, builder out, from conf, never at import time."""
from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import threading
from typing import TYPE_CHECKING, Callable, ContextManager

from pipelines import class_archive
from pipelines.config import STORAGE_ENV_VAR, ConfigError, Settings

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


# Spark's console log at `log.spark_level` (log4j2), set before the driver JVM starts: the progress lines and the
# summary are offsetlake's; Spark's WARN/INFO lines show only when asked for.
_LOG4J2 = """status = error
rootLogger.level = {level}
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{{yy/MM/dd HH:mm:ss}} %p %c{{1}}: %m%n%ex
# the logger of PySpark's gateway, given its level, keeps Spark from announcing a default level of its own
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = {level}
"""
_LEVELS = ("OFF", "FATAL", "ERROR", "WARN", "INFO", "DEBUG", "TRACE")


def spark_log_level(settings: Settings) -> str:
    """`log.spark_level`, checked: one of log4j's levels."""
    level = str(settings.section("log").get("spark_level") or "ERROR").upper()
    if level not in _LEVELS:
        raise ConfigError(f"log.spark_level must be one of {', '.join(_LEVELS)}, got {level!r}")
    return level


def _log4j2_file(level: str) -> str:
    body = _LOG4J2.format(level=level.lower())
    digest = hashlib.sha1(body.encode()).hexdigest()[:12]
    path = os.path.join(tempfile.gettempdir(), f"offsetlake-log4j2-{digest}.properties")
    if not os.path.exists(path):
        tmp = f"{path}.{os.getpid()}"
        with open(tmp, "w") as f:
            f.write(body)
        os.replace(tmp, path)
    return path


S3_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_REGION", "AWS_DEFAULT_REGION",
          "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3")


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
        if str(master).startswith("local"):
            # the workers run on this machine, with this interpreter: their daemon imports the installed pyspark
            # (`pyspark_worker`), which a cluster's executors, or spark-submit's --py-files, may not provide
            conf.setdefault("spark.python.daemon.module", "pipelines.pyspark_worker")
    if not settings.launched_by_spark_submit:  # under spark-submit the driver JVM is already running
        opts = conf.get("spark.driver.extraJavaOptions", "")
        if "log4j2.configurationFile" not in opts and "log4j.configurationFile" not in opts:
            opts = f"{opts} -Dlog4j2.configurationFile=file:{_log4j2_file(spark_log_level(settings))}"
        if "SharedArchiveFile" not in opts and "ArchiveClassesAtExit" not in opts:
            opts = f"{opts} {class_archive.java_options()}"
        conf["spark.driver.extraJavaOptions"] = opts.strip()
    # The tasks read and write s3:// themselves (pipelines/io/storage.py): executors get the driver's S3 settings.
    # Spark redacts keys matching secret/token/access key in its UI and logs.
    for k in S3_ENV:
        if os.environ.get(k) and f"spark.executorEnv.{k}" not in conf:
            conf[f"spark.executorEnv.{k}"] = os.environ[k]
    # and retry their store requests as the driver does (`io.retry`)
    conf.setdefault(f"spark.executorEnv.{STORAGE_ENV_VAR}", json.dumps(settings.section("storage"), sort_keys=True))
    for k, v in conf.items():
        builder = builder.config(k, v)
    if app_name:
        builder = builder.appName(app_name)
    return builder


def get_spark(settings: Settings, app_name: str | None = None):
    """Get or create the session for a run; quiet logs so progress lines stay readable."""
    spark = spark_builder(settings, app_name).getOrCreate()
    spark.sparkContext.setLogLevel(spark_log_level(settings))
    return spark


_OWN = frozenset({"_settings", "_app_name", "_starting", "_session", "_start_failed", "_lock"})


class SessionOnDemand:
    """A run's SparkSession, started the first time a stage uses it: a rebuild whose shards execute in this process
    (`rebuild.executor.Route.IN_PROCESS`) decodes, replays, validates and writes without one, and so never starts a
    JVM. Stands for the session wherever one is passed: any attribute read starts it (`get_spark`)."""

    def __init__(self, settings: Settings, app_name: str | None = None,
                 starting: Callable[[], ContextManager] | None = None):
        # `starting`: a context to start the session in (the CLI's: the JVM's own output into the run's log)
        self._settings, self._app_name, self._starting = settings, app_name, starting
        self._session: SparkSession | None = None
        self._start_failed = False
        self._lock = threading.Lock()  # the stages' threads (the reader's count, the read-ahead) may ask at once

    @property
    def started(self) -> bool:
        return self._session is not None

    @property
    def start_failed(self) -> bool:
        """Whether starting the session raised (a run's failure is then in stage `start`, whichever asked)."""
        return self._start_failed

    def session(self) -> SparkSession:
        with self._lock:
            if self._session is None:
                try:
                    with self._starting() if self._starting is not None else contextlib.nullcontext():
                        self._session = get_spark(self._settings, self._app_name)
                except BaseException:
                    self._start_failed = True
                    raise
            return self._session

    def __getattr__(self, name: str):
        # this object's own, not yet set (a copy, a pickle), or a protocol's probe: never a reason to start Spark
        if name.startswith("__") or name in _OWN:
            raise AttributeError(name)
        return getattr(self.session(), name)


def jvm_exit_status(wait_seconds: float = 5.0) -> int | None:
    """The driver JVM's exit status once it has exited, for a JVM this process started (a local or client run;
    under spark-submit the JVM started this process, and its status is not ours to see); None while it runs. A
    JVM that is exiting (a Py4J call just lost it) is waited for a few seconds."""
    # imported here, not at module level: pyspark ~0.7 s of import (python -X importtime)
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    proc = getattr(gateway, "proc", None)
    if proc is None:
        return None
    try:
        status = proc.poll()
        if status is None:
            gateway.jvm.java.lang.System.currentTimeMillis()  # a live JVM answers at once
            return None
    except Exception:  # noqa: BLE001 - the gateway is gone: the JVM is exiting or has exited
        try:
            status = proc.wait(wait_seconds)
        except Exception:  # noqa: BLE001
            return None
    return status
