"""What the library changes in PySpark's workers (`pipelines.pyspark_worker`): an unchanged archive's directory is
not read again on a task's cache invalidation, and a changed archive's is, so imports from it still see what it
holds now; the daemon of a local session imports pyspark from the installed package, not from Spark's zip of it."""
from __future__ import annotations

import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

before_312 = pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 reads zip directories lazily itself")


def _in_two_tasks(spark, task, schema: str) -> list:
    """The one column `task` (a mapInArrow function) gives in each of two tasks of a local session's workers."""
    return spark.range(0, 2, 1, numPartitions=2).mapInArrow(task, schema).toArrow().column(0).to_pylist()


@before_312
def test_an_archive_is_read_again_only_when_it_changed(tmp_path):
    # a process of its own: the patch is process-wide, as in a worker
    script = textwrap.dedent(f"""
        import importlib, os, sys, zipfile, zipimport
        archive = {str(tmp_path / 'lib.zip')!r}
        with zipfile.ZipFile(archive, 'w') as z:
            z.writestr('first_mod.py', 'X = 1')
        sys.path.insert(0, archive)
        import first_mod
        reads = []
        real = zipimport._read_directory
        zipimport._read_directory = lambda path: reads.append(path) or real(path)
        importlib.invalidate_caches()
        before = len(reads)
        from pipelines.pyspark_worker import quicken_task_setup
        quicken_task_setup(); quicken_task_setup()
        importlib.invalidate_caches()  # the first since the patch reads it, and records its stamp
        importlib.invalidate_caches(); importlib.invalidate_caches()
        unchanged = len(reads) - before
        with zipfile.ZipFile(archive, 'a') as z:
            z.writestr('second_mod.py', 'Y = 2')
        importlib.invalidate_caches()
        import second_mod
        print(before, unchanged, second_mod.Y)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    before, unchanged, y = map(int, out)
    assert before == 1  # Python 3.11 reads the whole directory on every invalidation
    assert unchanged == 1  # patched: once for its stamp, then not while the archive is unchanged
    assert y == 2  # a changed archive is read again: its new module imports


@before_312
def test_the_library_quickens_only_a_pyspark_worker():
    script = ("import zipimport, pipelines; "
              "print(getattr(zipimport.zipimporter.invalidate_caches, '_reads_changed_only', False))")
    assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    worker = "import pyspark.worker; " + script
    assert subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"


def test_the_daemon_drops_only_the_installed_packages_own_zip(tmp_path):
    import pyspark

    own = str(Path(pyspark.__file__).parent / "python" / "lib" / "pyspark.zip")
    foreign = tmp_path / "spark-home" / "python" / "lib" / "pyspark.zip"
    foreign.parent.mkdir(parents=True)
    with zipfile.ZipFile(foreign, "w") as z:
        z.writestr("pyspark/__init__.py", "")

    def daemon_path(*zips: str) -> list[str]:
        script = textwrap.dedent(f"""
            import sys
            sys.path[:0] = {list(zips)!r}
            from pipelines.pyspark_worker import installed_pyspark_first
            installed_pyspark_first()
            import pyspark
            print(*[z in sys.path for z in {list(zips)!r}], pyspark.__file__)
        """)
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                              check=True).stdout.split()

    own_kept, imported = daemon_path(own)
    assert own_kept == "False" and ".zip" not in imported  # the package's own zip: dropped, the package imported
    own_kept, foreign_kept, imported = daemon_path(own, str(foreign))
    assert own_kept == "False" and foreign_kept == "True"  # another Spark's zip is not the package's: kept
    assert imported.startswith(str(foreign))


@pytest.mark.spark
def test_a_local_sessions_tasks_import_the_installed_pyspark(spark):
    def where(batches):
        import pyarrow as pa
        import pyspark

        for _ in batches:
            yield pa.record_batch([pa.array([pyspark.__file__])], names=["file"])

    assert spark.conf.get("spark.python.daemon.module") == "pipelines.pyspark_worker"
    files = _in_two_tasks(spark, where, "file string")
    assert files and not any(".zip" in f for f in files)


def test_the_daemon_preloads_what_a_task_imports_on_first_use():
    """Every module of `PRELOAD` imports (one that did not would be left, unnoticed, to every worker), and after them
    what each decoding window does first, Arrow arrays from Python values and Arrow's grouping, imports nothing of
    the heavy libraries again (pyarrow reaches for pandas there, seconds of a new worker's first task)."""
    script = textwrap.dedent("""
        import sys
        from pipelines.pyspark_worker import PRELOAD, preload
        done = preload()
        before = set(sys.modules)
        import pyarrow as pa
        table = pa.table({"k": pa.array([1, 1, None]), "v": pa.array(["a", "b", None], pa.string())})
        table.group_by(["k"], use_threads=False).aggregate([])
        heavy = ("pandas", "numpy", "pyarrow", "pipelines")
        late = sorted(m for m in set(sys.modules) - before if m.split(".")[0] in heavy)
        print(done == PRELOAD, ",".join(late) or "-")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True", "-"]


@pytest.mark.spark
def test_a_local_sessions_workers_are_forked_with_the_preloaded_modules(spark):
    def preloaded(batches):
        import sys

        import pyarrow as pa

        for _ in batches:
            held = getattr(sys.modules["__main__"], "PRELOADED", None)  # the daemon's record, shared by its forks
            yield pa.record_batch([pa.array([",".join(held) if held is not None else None], pa.string())],
                                  names=["held"])

    from pipelines.pyspark_worker import PRELOAD

    held = _in_two_tasks(spark, preloaded, "held string")
    assert held == [",".join(PRELOAD)] * 2


@before_312
@pytest.mark.spark
def test_a_local_sessions_workers_read_an_unchanged_archive_once(spark):
    """The daemon quickens its forks' task setup: they import no `pipelines` of their own to do it (it is preloaded)."""
    def quickened(batches):
        import zipimport

        import pyarrow as pa

        for _ in batches:
            yield pa.record_batch([pa.array([getattr(zipimport.zipimporter.invalidate_caches, "_reads_changed_only",
                                                     False)])], names=["quick"])

    assert _in_two_tasks(spark, quickened, "quick boolean") == [True, True]


@pytest.mark.spark
def test_a_local_sessions_workers_hold_the_preloaded_objects_frozen(spark):
    """The daemon's objects are out of the collections PySpark runs after every task of a reused worker."""
    def frozen(batches):
        import gc

        import pyarrow as pa

        for _ in batches:
            yield pa.record_batch([pa.array([gc.get_freeze_count()], pa.int64())], names=["frozen"])

    counts = _in_two_tasks(spark, frozen, "frozen long")
    assert len(counts) == 2 and min(counts) > 10_000  # numpy, pyarrow, pandas and the engine: tens of thousands


def test_the_collection_after_a_task_freezes_what_survived_it():
    """What a task left alive is frozen by the collection PySpark runs after it; garbage it left is still collected."""
    script = textwrap.dedent("""
        import gc, weakref
        from pipelines.pyspark_worker import CollectThenFreeze
        seen_by_pyspark = CollectThenFreeze()

        class Node:
            pass

        kept = [Node() for _ in range(100)]  # what a task imported or cached
        loop = Node(); loop.me = loop  # garbage in a cycle
        gone = weakref.ref(loop)
        del loop
        gc.unfreeze()
        found = seen_by_pyspark.collect()
        print(gone() is None, found > 0, gc.get_freeze_count() >= 100, seen_by_pyspark.isenabled() == gc.isenabled())
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["True"] * 4


@pytest.mark.spark
def test_a_local_sessions_daemon_collects_then_freezes_after_each_task(spark):
    def collector(batches):
        import sys

        import pyarrow as pa

        for _ in batches:
            seen = type(sys.modules["pyspark.daemon"].gc).__name__
            yield pa.record_batch([pa.array([seen])], names=["gc"])

    assert _in_two_tasks(spark, collector, "gc string") == ["CollectThenFreeze"] * 2
