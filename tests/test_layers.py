"""The library stands without the simulator: `simulator/` is built on `pipelines` (its record writers), never the other
way round, so nothing under pipelines/ imports it, statically or by name."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _imported(tree: ast.AST):
    """(line, module) of every import in `tree`, `importlib.import_module("…")` and `__import__("…")` included."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.lineno, node.module
        elif isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in ("import_module", "__import__") and isinstance(node.args[0].value, str):
                yield node.lineno, node.args[0].value


def test_the_library_never_imports_the_simulator():
    files = sorted((ROOT / "pipelines").rglob("*.py"))
    assert len(files) > 50
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in files for line, module in _imported(ast.parse(path.read_text(encoding="utf-8")))
                 if module == "simulator" or module.startswith("simulator.")]
    assert not offenders, offenders


def test_the_check_sees_each_way_of_importing():
    tree = ast.parse("import simulator\nfrom simulator.log import CODECS\nimport importlib\n"
                     "importlib.import_module('simulator.cluster')\n__import__('simulator')\n")
    assert [m for _, m in _imported(tree)] == ["simulator", "simulator.log", "importlib", "simulator.cluster",
                                               "simulator"]


def test_the_contract_imports_no_pyspark():
    """`schemas/` is Arrow: Spark's types are derived at the Spark boundary (`pipelines.io.delta.spark_schema`)."""
    files = sorted((ROOT / "schemas").rglob("*.py"))
    offenders = [f"{path.relative_to(ROOT)}:{line}: {module}"
                 for path in files for line, module in _imported(ast.parse(path.read_text(encoding="utf-8")))
                 if module == "pyspark" or module.startswith("pyspark.")]
    assert not offenders, offenders


_NO_PYSPARK = """
import sys

class NoPyspark:
    def find_spec(self, name, path=None, target=None):
        if name == "pyspark" or name.startswith("pyspark."):
            raise ImportError(f"{name} is not installed here")

sys.meta_path.insert(0, NoPyspark())
from pipelines.coordinator.options import ReplayOptions
from pipelines.coordinator.shard import replay_rows
from pipelines.decoding.reader import iter_decoded_rows
import pipelines.validation.report  # the validation layer (its runner, suites, accounting) as well

rows = list(iter_decoded_rows([sys.argv[1]]))
tables = replay_rows(rows, ReplayOptions(semantics="modern", snapshot_id="s", num_partitions=4))
print(len(rows), len(tables["loaded_offsets"]), len(tables["offset_commits"]))
"""


def test_the_engine_decodes_and_replays_a_log_without_pyspark(tmp_path):
    """The decoder, the engine and the contract run in a process where pyspark cannot be imported, and the
    validation layer imports there."""
    import subprocess
    import sys

    from simulator import generate_sample

    generate_sample(tmp_path / "dump", records=400, groups=5, partitions=4, seed=3)
    r = subprocess.run([sys.executable, "-c", _NO_PYSPARK, str(tmp_path / "dump")], cwd=ROOT, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    records, offsets, history = r.stdout.split()
    assert int(records) >= 400 and int(offsets) > 0 and int(history) > 0, r.stdout
