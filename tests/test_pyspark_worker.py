"""A PySpark worker's per-task cache invalidation (`pipelines.pyspark_worker`): an unchanged archive's directory is
not read again, and a changed archive's is, so imports from it still see what it holds now."""
from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(sys.version_info >= (3, 12), reason="Python 3.12 reads zip directories lazily itself")


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


def test_the_library_quickens_only_a_pyspark_worker():
    script = ("import zipimport, pipelines; "
              "print(getattr(zipimport.zipimporter.invalidate_caches, '_reads_changed_only', False))")
    assert subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    worker = "import pyspark.worker; " + script
    assert subprocess.run([sys.executable, "-c", worker], capture_output=True, text=True,
                          check=True).stdout.strip() == "True"
