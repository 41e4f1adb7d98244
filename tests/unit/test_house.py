"""The house's rules, each a failure naming its file and line. Its floors: every import in
src/rdmaprov runs down (or stays on its own floor), so a module can be understood, tested and
changed with only what lies below it; the fix for an arrow back up is to move the name it needs
down (paths for places, parsers for what is read from text, inventory for what the inventory
means). And no function longer than a screen and a half: split it along its own parts."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO

PACKAGE = REPO / "src" / "rdmaprov"

# Lowest first. A module of the package root (errors.py, paths.py…) is its own floor by its name.
FLOORS: list[set[str]] = [
    {"__init__", "errors", "quoting", "schemas", "packages", "paths"},  # leaves (__init__: the version)
    {"parsers"},  # text in, values out
    {"nvidia"},  # driver/CUDA compatibility, from parsed versions
    {"inventory"},  # what the inventory means: one typed model
    {"builds"},  # build recipes and the artifact store
    {"facts"},  # what a host reports
    {"engine"},  # pyinfra runs, sessions, results
    {"slurm"},  # drain etiquette, slurm.conf
    {"operations"},  # commands from desired state
    {"health"},  # checks, gates, diagnosis
    {"nodecheck"},  # the checks run on a node (a zipapp of the floors below)
    {"deploys"},  # operations composed per node
    {"lab"},  # the local lab
    {"exporter", "importers"},
    {"report"},  # tables, JUnit, textfile
    {"workflows"},  # apply, check, verify, diagnose
    {"cli", "__main__"},
]
FLOOR = {name: level for level, names in enumerate(FLOORS) for name in names}


def _floor_name(module: str) -> str:
    """rdmaprov.health.gates.node → health; rdmaprov.paths → paths."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def _module(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def upward_imports() -> list[str]:
    """Every import of a higher floor, as `file:line: floor -> floor (module)`."""
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        here = _floor_name(_module(path))
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = (
                [node.module]
                if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for target in targets:
                if target != "rdmaprov" and not target.startswith("rdmaprov."):
                    continue
                there = _floor_name(target)
                if FLOOR[there] > FLOOR[here]:
                    line = f"{path.relative_to(REPO)}:{node.lineno}: {here} -> {there} ({target})"
                    found.append(line)
    return found


def test_every_package_has_a_floor():
    names = {_floor_name(_module(p)) for p in PACKAGE.rglob("*.py")}
    assert names <= set(FLOOR), f"give these a floor in FLOORS: {sorted(names - set(FLOOR))}"


def test_every_import_runs_down():
    assert upward_imports() == []


def test_an_arrow_up_is_found(tmp_path, monkeypatch):
    """The walk itself: a parser importing from health is named with its file and line."""
    import tests.unit.test_house as layers

    package = tmp_path / "src" / "rdmaprov"
    (package / "parsers").mkdir(parents=True)
    (package / "parsers" / "x.py").write_text("from rdmaprov.health.gates import bandwidth\n")
    monkeypatch.setattr(layers, "PACKAGE", package)
    monkeypatch.setattr(layers, "REPO", tmp_path)
    assert layers.upward_imports() == ["src/rdmaprov/parsers/x.py:1: parsers -> health (rdmaprov.health.gates)"]


LONGEST = 80  # lines of a function from its def to its last line, docstring included


def test_no_function_is_over_80_lines():
    long = [
        f"{path.relative_to(REPO)}:{node.lineno}: {node.name} has {node.end_lineno - node.lineno + 1} lines"
        for path in sorted(PACKAGE.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and (node.end_lineno or node.lineno) - node.lineno + 1 > LONGEST
    ]
    assert long == []
