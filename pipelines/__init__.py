"""offsetlake library: bytes -> records -> DataFrames -> state -> tables -> answers. Importing it never starts a JVM."""
import sys as _sys

if "pyspark.worker" in _sys.modules:  # imported by a task in a PySpark worker: see `pyspark_worker`
    from pipelines.pyspark_worker import quicken_task_setup

    quicken_task_setup()
