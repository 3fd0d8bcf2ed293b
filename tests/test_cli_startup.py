"""The answers that need no data come without the numerical stack (issue 39, "Instant
commands"): ``--help`` (the root's and the commands'), ``--version``, ``data list`` and the
refusals of options import none of NumPy, SciPy, Numba, PyArrow, Matplotlib, Optuna, Flower,
dp-accounting, scikit-learn or fedmc's data loaders and kernels.

One fresh interpreter answers every command in turn and lists, after each, the heavy modules it
holds: a module once imported stays, so the first command that imports one is the one named.
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

import fedmc

HEAVY = ("numpy", "scipy", "numba", "pyarrow", "matplotlib", "optuna", "flwr", "dp_accounting",
         "sklearn", "fedmc.data.loaders", "fedmc.data.registry", "fedmc.core.kernels",
         "fedmc.core.protocol")
"""Top-level packages and fedmc modules an instant answer must not import."""

COMMANDS: dict[str, tuple[list[str], int, str]] = {
    "root help": (["--help"], 0, "Federated matrix completion"),
    "bare fedmc": ([], 0, "Federated matrix completion"),
    "version": (["--version"], 0, f"fedmc {fedmc.__version__}"),
    "run help": (["run", "--help"], 0, "--algorithm"),
    "tune help": (["tune", "--help"], 0, "--trials"),
    "data list": (["data", "list"], 0, "ml-1m"),
    "recommend help": (["recommend", "--help"], 0, "--ratings"),
    "evaluate help": (["evaluate", "--help"], 0, "RUN"),
    "audit help": (["audit", "--help"], 0, "--view"),
    "federate local help": (["federate", "local", "--help"], 0, "--secagg"),
    "experiment help": (["experiment", "--help"], 0, "Usage"),
    "data info help": (["data", "info", "--help"], 0, "--ratings"),
    "data info, unknown set": (["data", "info", "nope"], 2, "unknown data set 'nope'"),
    "data info, absent set": (["data", "info", "ml-100k"], 2, "ml-100k is not in"),
    "negative rounds": (["run", "--rounds", "-1"], 2, "--rounds"),
    "unknown algorithm": (["run", "--algorithm", "nope"], 2, "unknown algorithm 'nope'"),
    "unknown option": (["run", "--nope"], 2, "No such option '--nope'"),
    "not a number": (["run", "--rank", "x"], 2, "--rank"),
    "bad --param": (["run", "-P", "rank"], 2, "--param expects KEY=VALUE"),
    "federate, unknown algorithm": (["federate", "local", "-a", "nope"], 2, "unknown algorithm"),
    "audit, bad --repeat": (["audit", "--repeat", "0"], 2, "--repeat must be >= 1"),
    "tune, no trials": (["tune", "--trials", "0"], 2, "--trials must be >= 1"),
    "tune, unknown pruner": (["tune", "--pruner", "best"], 2, "--pruner takes"),
    "tune, --space without =": (["tune", "--space", "rank"], 2, "--space expects"),
    "tune, no time": (["tune", "--timeout", "0"], 2, "--timeout must be > 0"),
    "tune, no rounds": (["tune", "--rounds", "0"], 2, "--rounds 0"),
}
"""Each case: the arguments, the exit status, a text its output (stdout and stderr) holds."""

PROBE = """
import contextlib, io, json, sys
from fedmc.cli import main

HEAVY = {heavy!r}
def heavy():
    return sorted({{m if m in HEAVY else m.split(".")[0] for m in sys.modules
                   if m in HEAVY or m.split(".")[0] in HEAVY}})

answers = {{}}
for case, argv in {commands!r}.items():
    sys.argv = ["fedmc", *argv]
    out, err = io.StringIO(), io.StringIO()
    code = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main()
        except SystemExit as exc:
            code = exc.code
    answers[case] = {{"code": code, "output": out.getvalue() + err.getvalue(), "heavy": heavy()}}
if {control!r}:  # the control: the probe sees a heavy import where there is one
    import fedmc.data.registry
    answers["control"] = {{"heavy": heavy()}}
print(json.dumps(answers))
"""


FAST = ("root help", "version", "negative rounds")
"""The cases CI's fast suite asks (one interpreter, under a second); the others are slow."""


def _case(case: str):
    return case if case in FAST else pytest.param(case, marks=pytest.mark.slow)


@pytest.fixture(scope="module")
def answers(tmp_path_factory) -> Callable[[str], dict]:
    """``answers(case)``: what a fresh interpreter answered to ``case`` of :data:`COMMANDS`
    (one interpreter for the :data:`FAST` cases and the control, one for the others)."""
    src = str(Path(fedmc.__file__).parents[1])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
               [src, *filter(None, [os.environ.get("PYTHONPATH")])]),
           "FEDMC_DATA": str(tmp_path_factory.mktemp("data")), "COLUMNS": "200"}

    @functools.cache
    def probe(fast: bool) -> dict[str, dict]:
        commands = {k: v[0] for k, v in COMMANDS.items() if (k in FAST) == fast}
        code = PROBE.format(heavy=HEAVY, commands=commands, control=fast)
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                              env=env, timeout=120, check=True)
        return json.loads(done.stdout.splitlines()[-1])

    return lambda case: probe(case in FAST or case == "control")[case]


@pytest.mark.parametrize("case", [_case(c) for c in COMMANDS])
def test_the_answer_comes_without_the_numerical_stack(answers, case):
    argv, status, text = COMMANDS[case]
    answer = answers(case)
    assert answer["code"] == status, answer["output"]
    assert text in answer["output"]
    assert answer["heavy"] == [], f"fedmc {' '.join(argv)} imported {answer['heavy']}"


@pytest.mark.parametrize("case", [_case(c) for c, (_, status, _) in COMMANDS.items()
                                  if status == 2])
def test_a_refusal_is_one_line_naming_the_flag(answers, case):
    lines = answers(case)["output"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("fedmc: error: "), lines


def test_the_probe_sees_a_heavy_import(answers):
    assert "numpy" in answers("control")["heavy"]
    assert "fedmc.data.loaders" in answers("control")["heavy"]
