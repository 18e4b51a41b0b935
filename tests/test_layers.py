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


# ================================================================================================================
# the house's shape: no import cycle, no long function, no field typed `object`
# ================================================================================================================
LIBRARY = ("pipelines", "jobs", "schemas")
MAX_FUNCTION_LINES = 80


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _library_files() -> dict[str, Path]:
    return {_module_name(p): p for pkg in LIBRARY for p in sorted((ROOT / pkg).rglob("*.py"))}


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and (
        (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING")
        or (isinstance(node.test, ast.Attribute) and node.test.attr == "TYPE_CHECKING"))


def _runtime_nodes(node: ast.AST):
    """Every node under `node` at any depth, functions' bodies included, but for `if TYPE_CHECKING:` blocks: those
    imports never run."""
    for child in ast.iter_child_nodes(node):
        if _is_type_checking(child):
            for other in child.orelse:
                yield other
                yield from _runtime_nodes(other)
            continue
        yield child
        yield from _runtime_nodes(child)


def _imports_of(name: str, source: str, is_package: bool, modules) -> set[str]:
    """The project modules `name` imports when it runs, at module level or in a function: `from a.b import c`
    counts a.b.c when that is a module, else a.b; relative imports resolved."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {m for m in found if m in modules and m != name}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph[nxt]))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def _import_graph(files: dict[str, Path]) -> dict[str, set[str]]:
    return {name: _imports_of(name, path.read_text(encoding="utf-8"), path.name == "__init__.py", files)
            for name, path in files.items()}


def test_the_cycle_check_sees_imports_inside_functions_and_skips_type_checking():
    modules = {"p", "p.a", "p.b", "p.c", "p.d"}
    graph = {
        "p": set(),
        "p.a": _imports_of("p.a", "from p.b import thing\n", False, modules),
        "p.b": _imports_of("p.b", "def f():\n    from . import c\n", False, modules),
        "p.c": _imports_of("p.c", "def g():\n    if True:\n        import p.a\n", False, modules),
        "p.d": _imports_of("p.d", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from p.a import A\n",
                           False, modules),
    }
    assert graph["p.b"] == {"p.c"} and graph["p.d"] == set()
    assert _cycles(graph) == [["p.a", "p.b", "p.c"]]


def test_no_import_cycle_among_the_library_modules():
    """Kafka's layers run one way (STYLE.md): a module that imports one that imports it back, at any depth and
    inside a function too, has no place in that order."""
    files = _library_files()
    assert len(files) > 100
    cycles = _cycles(_import_graph(files))
    assert not cycles, cycles


def _long_functions(path: Path, root: Path = ROOT) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [f"{path.relative_to(root)}:{node.lineno}: {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]


def _object_annotations(path: Path, root: Path = ROOT) -> list[str]:
    """Every annotation that is the bare name `object`: a field, a variable, a parameter or a return."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.AnnAssign):
            pairs = [(ast.unparse(node.target), node.annotation)]
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = node.args
            every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, (args.vararg, args.kwarg))]
            pairs = [(f"{node.name}({a.arg})", a.annotation) for a in every] + [(f"{node.name} ->", node.returns)]
        else:
            continue
        for what, annotation in pairs:
            if (isinstance(annotation, ast.Name) and annotation.id == "object") or \
                    (isinstance(annotation, ast.Constant) and annotation.value == "object"):
                found.append(f"{path.relative_to(root)}:{node.lineno}: {what}")
    return found


def test_the_shape_checks_see_a_long_function_and_an_object_field(tmp_path):
    source = tmp_path / "m.py"
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    source.write_text(f"def short():\n{body}\n\n\ndef long():\n{body}\n    return 0\n\n\n"
                      "class C:\n    spark: object\n    fine: int\n\n\ndef f(a: object, b: 'object') -> object:\n"
                      "    pass\n")
    assert [line.split(": ", 1)[1] for line in _long_functions(source, tmp_path)] == [
        f"long ({MAX_FUNCTION_LINES + 1} lines)"]
    assert sorted(line.split(": ", 1)[1] for line in _object_annotations(source, tmp_path)) == [
        "f ->", "f(a)", "f(b)", "spark"]


def test_no_long_function_and_no_object_annotation_in_the_library():
    """A function says one thing in at most 80 lines (def line to last line); a field, parameter or return has its
    real type (a `TYPE_CHECKING` import for pyspark's, pyarrow's or deltalake's), never `object`."""
    files = sorted(_library_files().values())
    long = [line for path in files for line in _long_functions(path)]
    typed_object = [line for path in files for line in _object_annotations(path)]
    assert not long and not typed_object, long + typed_object
