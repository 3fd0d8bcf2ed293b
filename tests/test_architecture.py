"""The layers of the package hold (docs/architecture.md): algorithms import nothing that drives
them, the ClientApp loads nothing of a run's command-line machinery, no package-level import
cycle, nothing imports the test helpers, no test module imports another, and clipping and
every noise draw of the privacy mechanisms happen in the aggregator alone."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

import fedmc

SRC = Path(fedmc.__file__).parent
ALGORITHM_MODULES = ["fedmc.algorithms.registry", "fedmc.algorithms.fold_in",
                     *(f"fedmc.algorithms.{p.name}" for p in (SRC / "algorithms").iterdir()
                       if (p / "__init__.py").exists())]


def loaded_after_import(*modules: str) -> set[str]:
    """The fedmc modules a fresh interpreter holds after importing ``modules``."""
    code = (f"import importlib, json, sys\nfor m in {list(modules)!r}: importlib.import_module(m)"
            "\nprint(json.dumps(sorted(m for m in sys.modules if m.startswith('fedmc'))))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    return set(json.loads(out))


def test_algorithms_load_nothing_that_drives_them():
    assert len(ALGORITHM_MODULES) >= 7
    loaded = loaded_after_import(*ALGORITHM_MODULES)
    forbidden = [m for m in loaded if m.startswith((
        "fedmc.sim", "fedmc.flower", "fedmc.run", "fedmc.estimators", "fedmc.cli",
        "fedmc.federation", "fedmc.audit", "fedmc.testing", "fedmc.model"))]
    assert forbidden == [], forbidden


def test_the_client_app_loads_no_run_machinery():
    pytest.importorskip("flwr")
    loaded = loaded_after_import("fedmc.flower.client_app")
    assert "fedmc.flower.client_app" in loaded
    forbidden = [m for m in loaded if m.startswith((
        "fedmc.run.runner", "fedmc.run.data", "fedmc.run.precompile", "fedmc.experiments",
        "fedmc.estimators", "fedmc.cli", "fedmc.sim", "fedmc.model"))]
    assert forbidden == [], forbidden


def _modules() -> dict[str, ast.Module]:
    """Every module of the package by dotted name, parsed."""
    out = {}
    for path in SRC.rglob("*.py"):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = ast.parse(path.read_text(), str(path))
    return out


def _imports(module: str, tree: ast.Module) -> set[str]:
    """The fedmc modules ``module`` imports anywhere (functions included), but under ``if
    TYPE_CHECKING``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.startswith("fedmc"))
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.startswith("fedmc"):
                found.add(node.module)
                found.update(f"{node.module}.{a.name}" for a in node.names)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def _unit(module: str) -> str:
    """The package-level unit of a module: ``fedmc.X`` for ``fedmc.X.Y...``."""
    return ".".join(module.split(".")[:2])


def test_no_package_level_import_cycle():
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for name, tree in modules.items():
        if name == "fedmc":
            continue
        targets = {_unit(m) for m in _imports(name, tree) if _unit(m) in
                   {_unit(n) for n in modules}} - {"fedmc"}
        graph.setdefault(_unit(name), set()).update(targets - {_unit(name)})
    state: dict[str, int] = {}
    path: list[str] = []

    def visit(node: str) -> None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            assert state.get(nxt) != 1, "import cycle: " + " -> ".join(
                path[path.index(nxt):] + [nxt])
            if nxt not in state:
                visit(nxt)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            visit(node)
    assert graph["fedmc.core"] <= {"fedmc.errors"}, graph["fedmc.core"]


def test_no_production_module_imports_the_test_helpers():
    users = [name for name, tree in _modules().items()
             if name != "fedmc.testing" and any(m.startswith("fedmc.testing")
                                                for m in _imports(name, tree))]
    assert users == []


TESTS = Path(__file__).parent


def test_no_test_module_imports_another():
    """Shared helpers are fixtures of conftest.py (or test tooling in fedmc.testing): a test
    module imports no other module of tests/ (conftest.py included) and no private helper
    module (``_name``)."""
    local = {p.stem for p in TESTS.glob("*.py")}
    offenders = []
    for path in sorted(TESTS.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""] if node.level == 0 else ["." * node.level]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in {"tests", *local} or name.startswith(".") or (
                        top.startswith("_") and top != "__future__"):
                    offenders.append(f"{path.name}:{node.lineno} imports {name}")
    assert offenders == []


DP_MECHANISMS = {"clip_uploads", "add_noise", "noise_share", "perturb_sum", "privatize",
                 "summed_noise", "perturb"}
"""The functions of :mod:`fedmc.privacy` that clip an upload for user-level DP or draw noise."""


def test_clipping_and_every_noise_draw_happen_in_the_aggregator_alone():
    callers: dict[str, set[str]] = {}
    for name, tree in _modules().items():
        if name.startswith("fedmc.privacy"):
            continue  # the mechanisms themselves
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                called = getattr(node.func, "attr", getattr(node.func, "id", None))
                if called in DP_MECHANISMS:
                    callers.setdefault(called, set()).add(name)
    assert callers, "the aggregator calls the mechanisms"
    assert set().union(*callers.values()) == {"fedmc.federation.aggregator"}, callers
