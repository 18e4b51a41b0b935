"""`python -m jobs.class_archive`: writes the driver JVM's class-data archive (`pipelines.class_archive`). A small
generated log is rebuilt on Spark (segments decoded and loaded by the shards' tasks, as a nightly run does) in a
JVM that records the classes it loads and writes them when it exits. `make setup` runs it."""
from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from pipelines import class_archive
from simulator import generate_sample


def main() -> int:
    # imported here, not at module level: yaml ~0.04 s of import (python -X importtime)
    from pipelines.config import load_settings
    from pipelines.rebuild import RebuildRequest, run_rebuild
    from pipelines.session import get_spark

    started = time.monotonic()
    partial = class_archive.partial_path()
    partial.parent.mkdir(parents=True, exist_ok=True)
    base = load_settings(env="local")
    opts = f'{base.spark_conf.get("spark.driver.extraJavaOptions", "")} {class_archive.writing_options(partial)}'
    settings = load_settings(env="local", overrides={
        "spark": {"spark.driver.extraJavaOptions": opts.strip()},
        # on Spark whatever the size: the classes of the shards' tasks and of the Python workers' Arrow path
        "decode": {"in_process_max_bytes": 0}, "rebuild": {"local_replay_max_rows": 0},
        "validation": {"policy": "warn"}})
    work = Path(tempfile.mkdtemp(prefix="offsetlake-class-archive-"))
    try:
        generate_sample(work / "dump", records=5000, groups=50, partitions=4, seed=1)
        spark = get_spark(settings, app_name="offsetlake-class-archive")
        jvm = spark.sparkContext._gateway.proc
        try:
            run_rebuild(spark, settings, RebuildRequest(inputs=(str(work / "dump"),), warehouse=str(work / "wh"),
                                                        snapshot_id="archive"))
        finally:
            # the JVM writes the archive as it exits, which it does when its stdin closes: waited for here, so a
            # failed run leaves no archive written after the partial file is removed
            spark.stop()
            jvm.stdin.close()
            jvm.wait(timeout=300)
        if not partial.is_file() or partial.stat().st_size == 0:
            print(f"class archive: the JVM wrote none (exit {jvm.returncode}); sessions start without one",
                  file=sys.stderr)
            return 1
        path = class_archive.publish(partial)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        partial.unlink(missing_ok=True)
    print(f"class archive: {path} ({path.stat().st_size / 2**20:.0f} MB, {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
