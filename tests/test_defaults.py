"""Every default is written once (issue 37): an option that sets a field of a settings model
takes that field's default, and no help text writes a default's number itself."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from fedmc.federation.settings import Backend, Schedule
from fedmc.privacy.accounting import UserDP
from fedmc.run.data_settings import DataSettings
from fedmc.run.options import RunOptions
from fedmc.run.spec import RunSpec

SRC = Path(__file__).parents[1] / "src" / "fedmc"
OWNERS = {"DataSettings": DataSettings, "Schedule": Schedule, "UserDP": UserDP,
          "Backend": Backend, "RunSpec": RunSpec}
# the field of a settings model an option sets, where its name is not the option's
RENAMED = {"backend": ("Backend", "kind"), "ray_address": ("Backend", "address")}
# options whose default is theirs alone: a switch for a setting that is an object
OWN = {"early_stopping"}


def _owner_fields(option: str) -> set[tuple[str, str]]:
    """The settings models' fields ``option`` sets (``seed``: the split's and the schedule's)."""
    if option in RENAMED:
        return {RENAMED[option]}
    name = option.removeprefix("dp_")
    models = ("UserDP",) if option.startswith("dp_") else (
        "DataSettings", "Schedule", "Backend", "RunSpec")
    return {(m, name) for m in models if name in OWNERS[m].model_fields}


def _run_option_defaults() -> dict[str, ast.expr]:
    """The default expressions of RunOptions' fields, as written."""
    tree = ast.parse((SRC / "run" / "options.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "RunOptions")
    return {n.target.id: n.value for n in cls.body if isinstance(n, ast.AnnAssign)
            and isinstance(n.target, ast.Name) and n.value is not None}


@pytest.mark.parametrize("option", sorted(RunOptions.model_fields))
def test_an_option_takes_the_default_of_the_setting_it_sets(option):
    """A default other than None (None: resolve chooses) is read from the field the option
    sets (``default_of(Model, "field")``), never written again."""
    written = _run_option_defaults().get(option)
    default = RunOptions.model_fields[option].default
    owners = _owner_fields(option)
    factory = RunOptions.model_fields[option].default_factory is not None  # a fresh dict
    if default is None or factory or not owners or option in OWN or written is None:
        return
    assert isinstance(written, ast.Call) and ast.unparse(written.func) == "default_of", \
        ast.unparse(written)
    model, field = written.args
    assert isinstance(model, ast.Name) and isinstance(field, ast.Constant)
    assert (model.id, field.value) in owners, ast.unparse(written)
    assert default == OWNERS[model.id].model_fields[field.value].default


def test_every_option_with_a_counterpart_is_checked():
    """The table above misses no option with a literal default that a model also holds."""
    literal = [name for name, value in _run_option_defaults().items()
               if isinstance(value, ast.Constant) and value.value is not None]
    assert sorted(literal) == sorted(OWN), literal


def _help_literals() -> list[tuple[str, int, str]]:
    """Every string literal of the command line's modules (the parts of f-strings too)."""
    found = []
    for path in sorted((SRC / "cli").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found.append((path.name, node.lineno, node.value))
    return found


def test_no_help_text_writes_a_default_number_itself():
    """A default shown in a help text is interpolated from where it is written (an
    f-string), so the help cannot drift from the value a run takes."""
    written = [(name, line, text) for name, line, text in _help_literals()
               if re.search(r"\bdefault:? \d", text, re.IGNORECASE)]
    assert written == []


def test_the_help_shows_the_defaults_the_run_takes():
    """The numbers the help of ``fedmc federate local`` and ``fedmc audit`` shows are the
    values a run takes when the option is not given (the models' own)."""
    import inspect

    import typer

    from fedmc.audit.run import AuditSettings
    from fedmc.cli import app
    from fedmc.deploy.simulation import run_simulated
    from fedmc.federation.bounds import NormReference
    from fedmc.flower.settings import FederatedRun

    command = typer.main.get_command(app)
    local = {p.name: p.help for p in command.commands["federate"].commands["local"].params}
    run = FederatedRun.model_fields
    assert f"(default {run['timeout'].default:g})" in local["timeout"]
    assert f"(default {run['max_lost_rounds'].default})" in local["max_lost_rounds"]
    assert f"above {NormReference.growth:g} times" in local["max_upload_norm"]
    cpus = inspect.signature(run_simulated).parameters["node_cpus"].default
    assert f"(default {cpus:g}:" in local["node_cpus"]
    audit = {p.name: p.default for p in command.commands["audit"].params}
    settings = AuditSettings()
    assert (audit["rounds"], int(audit["active"]), audit["dp_epsilon"], audit["dp_clip"]) == (
        settings.rounds, settings.active, settings.dp.epsilon, settings.dp.clip)
