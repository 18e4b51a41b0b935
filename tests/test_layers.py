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
