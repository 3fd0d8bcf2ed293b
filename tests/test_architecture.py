"""The layers of the package hold (docs/architecture.md): algorithms import only the core, the
privacy mechanisms and each other (nothing that builds their data or drives them), the
ClientApp loads nothing of a run's command-line machinery, no package-level import cycle, the
protocol imports nothing of its deployment tooling, only ``fedmc.flower.compat`` imports
Flower's non-public modules, nothing imports the test helpers, no test module imports another,
and clipping and every noise draw of the privacy mechanisms happen in the aggregator alone."""

from __future__ import annotations

import ast
import json
import re
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


NOT_BELOW_ALGORITHMS = ("fedmc.data", "fedmc.sim", "fedmc.flower", "fedmc.run",
                        "fedmc.estimators", "fedmc.cli", "fedmc.federation", "fedmc.audit",
                        "fedmc.testing", "fedmc.model", "fedmc.experiments")
"""What an algorithm loads none of: what builds its data or drives it."""


@pytest.mark.parametrize("module", ALGORITHM_MODULES)
def test_an_algorithm_loads_nothing_that_builds_its_data_or_drives_it(module):
    loaded = loaded_after_import(module)
    assert module in loaded
    forbidden = [m for m in loaded if m.startswith(NOT_BELOW_ALGORITHMS)]
    assert forbidden == [], forbidden


def test_algorithms_import_only_core_privacy_errors_and_algorithms():
    assert len(ALGORITHM_MODULES) >= 7
    allowed = ("fedmc.core", "fedmc.privacy", "fedmc.errors", "fedmc.algorithms", "fedmc._lazy")
    outside = {name: sorted(m for m in _imports(name, tree)
                            if m != "fedmc" and not m.startswith(allowed))
               for name, tree in _modules().items() if name.startswith("fedmc.algorithms")}
    assert {name: found for name, found in outside.items() if found} == {}


def test_the_client_app_loads_no_run_machinery():
    """The client side of a federation reads what a run is (``fedmc.run.spec``) without the
    command line's option model (``fedmc.run.options``) or the rule that resolves it."""
    pytest.importorskip("flwr")
    loaded = loaded_after_import("fedmc.flower.client_app")
    assert "fedmc.flower.client_app" in loaded and "fedmc.run.spec" in loaded
    machinery = ("fedmc.run.runner", "fedmc.run.data", "fedmc.run.precompile",
                 "fedmc.run.options", "fedmc.run.settings", "fedmc.experiments",
                 "fedmc.estimators", "fedmc.cli", "fedmc.sim", "fedmc.model", "fedmc.deploy")
    forbidden = [m for m in loaded if m in machinery or m.startswith(
        tuple(name + "." for name in machinery))]
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


def test_the_protocol_imports_nothing_of_its_deployment_tooling():
    users = {name: sorted(m for m in _imports(name, tree) if _unit(m) == "fedmc.deploy")
             for name, tree in _modules().items() if _unit(name) == "fedmc.flower"}
    assert {name: found for name, found in users.items() if found} == {}


FLOWER_PUBLIC = {"flwr", "flwr.app", "flwr.serverapp", "flwr.clientapp", "flwr.common",
                 "flwr.server", "flwr.client", "flwr.server.workflow", "flwr.client.mod",
                 "flwr.simulation"}
"""Flower's public API: the modules whose documented names (their ``__all__``) fedmc may import
anywhere; everything else of ``flwr`` only through ``fedmc.flower.compat``."""
FLOWER_DOOR = "fedmc.flower.compat"


def _flower_imports(tree: ast.Module) -> list[tuple[str, str | None]]:
    """Every ``(module, name)`` of ``flwr`` a module imports anywhere (``name`` None for
    ``import module``), functions and ``if TYPE_CHECKING`` blocks included."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(a.name, None) for a in node.names if a.name.split(".")[0] == "flwr"]
        elif (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module
              and node.module.split(".")[0] == "flwr"):
            found += [(node.module, a.name) for a in node.names]
    return found


def test_only_the_compat_module_imports_flowers_internals():
    pytest.importorskip("flwr")
    import importlib

    outside: dict[str, list[str]] = {}
    for name, tree in _modules().items():
        if name == FLOWER_DOOR:
            continue
        for module, imported in _flower_imports(tree):
            public = module in FLOWER_PUBLIC and (
                imported is None or imported in importlib.import_module(module).__all__)
            if not public:
                outside.setdefault(name, []).append(f"{module}:{imported}")
    assert outside == {}, outside
    door = _flower_imports(_modules()[FLOWER_DOOR])
    assert {m for m, _ in door} - FLOWER_PUBLIC, "the door imports Flower's internals"


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


DP_MECHANISMS = {"clip_uploads", "add_noise", "perturb_sum", "privatize", "summed_noise",
                 "perturb", "shares", "member_stream", "rounded_sum"}
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


def _own_modules(rel: str) -> bool:
    """Whether the module at ``rel`` (a path under ``src/fedmc``) is an algorithm's own: its
    package, or its audit target."""
    return rel.startswith("algorithms/") or (rel.startswith("audit/targets/")
                                             and not rel.endswith("__init__.py"))


def _docstrings(tree: ast.Module) -> set[int]:
    """The ``id`` of every docstring node (a string standing alone as a statement)."""
    return {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)}


def _specific_fields() -> set[str]:
    """The ``Config`` fields of some algorithm that are not the common ones (of
    :class:`fedmc.core.factors.FactorConfig` and its base)."""
    from fedmc.algorithms.registry import specs
    from fedmc.core.factors import AlgorithmConfig, FactorConfig

    every = set().union(*(s.Config.model_fields for s in specs().values()))
    return every - set(FactorConfig.model_fields) - set(AlgorithmConfig.model_fields)


def _branches_on(node: ast.AST, fields: set[str]) -> str | None:
    """The algorithm-specific field ``node`` reads by name (``getattr(x, "F")``,
    ``hasattr(x, "F")``, ``"F" in X.model_fields``) or tests (``cfg.F`` in a condition or
    comparison), else None."""
    if (isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("getattr", "hasattr")
            and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in fields):
        return node.args[1].value
    if (isinstance(node, ast.Compare) and isinstance(node.left, ast.Constant)
            and node.left.value in fields
            and any(getattr(c, "attr", None) == "model_fields" for c in node.comparators)):
        return node.left.value
    tests = ([node.test] if isinstance(node, ast.If | ast.IfExp | ast.While | ast.Assert)
             else [node] if isinstance(node, ast.Compare | ast.BoolOp) else [])
    for test in tests:
        for sub in ast.walk(test):
            if isinstance(sub, ast.Attribute) and sub.attr in fields and getattr(
                    sub.value, "id", getattr(sub.value, "attr", None)) in ("cfg", "config"):
                return sub.attr
    return None


def test_no_module_outside_an_algorithms_package_names_it_or_branches_on_its_settings():
    from fedmc.algorithms.registry import algorithm_names

    names = re.compile(r"(?<![\w-])(" + "|".join(
        sorted(map(re.escape, algorithm_names()), key=len, reverse=True)) + r")(?![\w-])")
    fields = _specific_fields()
    found = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if _own_modules(rel):
            continue
        tree = ast.parse(path.read_text(), str(path))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if (isinstance(node, ast.Constant) and isinstance(node.value, str)
                    and id(node) not in docstrings and names.search(node.value)):
                found.append(f"{rel}:{node.lineno}: names {names.search(node.value)[0]!r}")
            field = _branches_on(node, fields)
            if field is not None:
                found.append(f"{rel}:{node.lineno}: branches on {field!r}")
    assert found == [], "\n".join(found)


def test_one_class_is_named_runspec():
    """What a run is has one name (``fedmc.run.spec.RunSpec``): an experiment's planned
    run is a ``PlannedRun``."""
    import re

    named = [path.relative_to(SRC).as_posix() for path in SRC.rglob("*.py")
             if re.search(r"^class RunSpec\b", path.read_text(), re.MULTILINE)]
    assert named == ["run/spec.py"]


def _call_graph() -> dict[str, set[str]]:
    """A static call graph of the package: each module-level function (``module.name``) and
    method (``module.Class.name``) to the functions it calls by a name its module defines or
    imports (anywhere in the module, functions included), ``mod.name`` through an imported
    module too. Calls on objects (``self.x()``, ``obj.x()``) are not followed: a road that
    needs them is not a static one."""
    modules = _modules()
    graph: dict[str, set[str]] = {}
    for module, tree in modules.items():
        names: dict[str, str] = {}  # a name in the module -> what it stands for
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    names[alias.asname or alias.name] = f"{node.module}.{alias.name}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    names[alias.asname or alias.name.split(".")[0]] = \
                        alias.name if alias.asname else alias.name.split(".")[0]
        defined = [(f"{module}.{n.name}", n) for n in tree.body
                   if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
        defined += [(f"{module}.{c.name}.{n.name}", n) for c in tree.body
                    if isinstance(c, ast.ClassDef) for n in c.body
                    if isinstance(n, ast.FunctionDef)]
        names.update({full.rsplit(".", 1)[1]: full for full, _ in defined
                      if full.count(".") == module.count(".") + 1})
        for full, function in defined:
            calls = graph.setdefault(full, set())
            for node in ast.walk(function):
                if not isinstance(node, ast.Call):
                    continue
                target = node.func
                if isinstance(target, ast.Name) and target.id in names:
                    calls.add(names[target.id])
                elif isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name) \
                        and target.value.id in names:
                    calls.add(f"{names[target.value.id]}.{target.attr}")
    return graph


def _reached(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every function a static walk from ``start`` reaches (a package's re-export followed to
    the module that defines the function)."""
    defined = set(graph)
    by_name: dict[str, list[str]] = {}
    for full in defined:
        by_name.setdefault(full.rsplit(".", 1)[1], []).append(full)
    seen, todo = set(), [start]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name not in defined:  # ``fedmc.sim.simulate`` defined in fedmc/sim/__init__.py is
            package = name.rsplit(".", 1)[0]  # found as is; a re-export by its own module
            name = next((f for f in by_name.get(name.rsplit(".", 1)[1], [])
                         if f.startswith(package + ".")), name)
        todo.extend(graph.get(name, ()))
        seen.add(name)
    return seen


def test_fedmc_run_and_the_serverapp_meet_in_the_round_loop():
    """Issue 37: the road from ``fedmc run``'s command to the round loop is static (the spec
    straight to ``fedmc.run.train.train``, no estimator found by name), and the Flower
    ServerApp's run reaches the same function."""
    graph = _call_graph()
    loop = "fedmc.federation.loop.run_rounds"
    from_run = _reached(graph, "fedmc.cli.run.run")
    from_server = _reached(graph, "fedmc.flower.server_app.main")
    assert {"fedmc.run.runner.execute", "fedmc.run.train.train", "fedmc.sim.simulate",
            loop} <= from_run
    assert loop in from_server
    # the searches, the experiments and the estimators train through the same function
    for start in ("fedmc.tune.search.run_study", "fedmc.experiments.launch.run_one",
                  "fedmc.estimators.FederatedEstimator.fit_with_progress"):
        assert "fedmc.run.train.train" in _reached(graph, start), start


def test_nothing_below_the_estimators_imports_them():
    """The estimators are a facade over fedmc.run.train: no module of the run, the tuning,
    the experiments or the federation imports them."""
    users = {name for name, tree in _modules().items()
             if any(m == "fedmc.estimators" or m.startswith("fedmc.estimators.")
                    for m in _imports(name, tree))}
    assert users <= {"fedmc"}, users
