"""The package stays in rooms a reader can take in: no import cycle (so any module imports
alone), no module over 400 lines, the config modules free of command-line code, and one
``main``. Read from the source with ``ast``: nothing is imported, so this costs milliseconds."""

from __future__ import annotations

import ast
from pathlib import Path

import vertex_trainer_tools

PACKAGE = Path(vertex_trainer_tools.__file__).parent
NAME = "vertex_trainer_tools"
MAX_LINES = 400
# Loading, schema and validation of vertex.yaml: no argparse, nothing printed.
CONFIG_MODULES = ("config", "schema", "yaml_lines", "job_config", "study", "vertex_limits")


def modules() -> dict[str, ast.Module]:
    found = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join((NAME, *parts)).removesuffix(".__init__")
        found[name] = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return found


def imports(name: str, tree: ast.Module, known: set[str]) -> set[str]:
    """The package's modules that ``name`` imports anywhere (at the top or in a function)."""
    package = name if name in known and _is_package(name) else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1]])
                base = f"{base}.{node.module}" if node.module else base
            # ``from package import module`` imports the module; ``from module import name``
            # the module.
            targets = [
                f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base
                for alias in node.names
            ]
        else:
            continue
        # A module's own packages are imported before it, by Python: not an edge of its own.
        ancestors = {name.rsplit(".", depth)[0] for depth in range(1, name.count(".") + 1)}
        found |= {t for t in targets if t in known and t != name and t not in ancestors}
    return found


def _is_package(name: str) -> bool:
    return (PACKAGE.joinpath(*name.split(".")[1:]) / "__init__.py").is_file()


def test_no_module_imports_itself_back():
    trees = modules()
    graph = {name: imports(name, tree, set(trees)) for name, tree in trees.items()}
    cycles = []

    def visit(name: str, path: list[str]) -> None:
        for target in sorted(graph[name]):
            if target in path:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target not in done:
                visit(target, [*path, target])
        done.add(name)

    done: set[str] = set()
    for name in sorted(graph):
        if name not in done:
            visit(name, [name])
    assert not cycles, "\n".join(sorted(set(cycles)))


def test_no_source_module_is_over_400_lines():
    long = {
        str(path.relative_to(PACKAGE)): lines
        for path in sorted(PACKAGE.rglob("*.py"))
        if (lines := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


def test_the_config_modules_have_no_command_line():
    trees = modules()
    for module in CONFIG_MODULES:
        tree = trees[f"{NAME}.{module}"]
        for node in ast.walk(tree):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [alias.name for alias in node.names] + [getattr(node, "module", "")]
                assert "argparse" not in names, f"{module} imports argparse"
            if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "print":
                raise AssertionError(f"{module}:{node.lineno} prints")


def test_one_main_prints_the_errors():
    """Only ``cli.main`` prints ``ERROR:`` lines of a ``ToolError``: no command has a
    ``main`` of its own."""
    mains = {
        name
        for name, tree in modules().items()
        for node in tree.body
        if isinstance(node, ast.FunctionDef) and node.name == "main"
    }
    assert mains == {
        f"{NAME}.cli",
        f"{NAME}.serving.xgboost_predictor",  # the predictor process's, not a command's
    }
