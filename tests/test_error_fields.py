"""Errors carry the setting they are about, and the command line names it by the flag the user
typed (issue 37): a message below the command line marks each setting it names
(:mod:`fedmc.errors`); the command line words them by one table (``fedmc.cli.options.flag``),
no text is guessed at."""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import pytest

import fedmc
from fedmc.cli.options import OPTIONS, in_flags
from fedmc.errors import ConfigError, DataError, FedMCError
from fedmc.privacy.accounting import UserDP

SRC = Path(fedmc.__file__).parent
ERRORS = {"ConfigError", "DataError", "FedMCError", "EveryoneLost", "ProcessRefused",
          "RunFinished", "FederationError"}
NAMES = sorted({*OPTIONS, *(f"dp.{field}" for field in UserDP.model_fields)} - {"param"},
               key=len, reverse=True)
# a setting named as a setting: with a value (``rounds=0``), or a name no prose word is
# (``validation_fraction``, ``dp.clip``); single words (``rounds``) are prose too
_NAMED = re.compile(r"(?<![\w.`-])(" + "|".join(map(re.escape, NAMES)) + r")(?:(=)|(?![\w(]))")


def _text(node: ast.expr) -> str:
    """A message's text as written: constants as they are, formatted values as ``{}``."""
    if isinstance(node, ast.Constant):
        return str(node.value)
    if isinstance(node, ast.JoinedStr):
        return "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values)
    if isinstance(node, ast.BinOp):
        return _text(node.left) + _text(node.right)
    return ""


def _unmarked(text: str) -> list[str]:
    """The settings ``text`` names outside backticks."""
    outside = "".join(part for i, part in enumerate(text.split("`")) if i % 2 == 0)
    return [m.group(0) for m in _NAMED.finditer(outside)
            if m.group(2) or "_" in m.group(1) or "." in m.group(1)]


def _messages():
    for path in sorted(SRC.rglob("*.py")):
        if "cli" in path.relative_to(SRC).parts:
            continue  # the command line writes its own flags
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ERRORS \
                    and node.args:
                yield f"{path.relative_to(SRC)}:{node.lineno}", _text(node.args[0])


def test_every_setting_an_error_below_the_command_line_names_is_marked():
    unmarked = [(where, names) for where, text in _messages() if (names := _unmarked(text))]
    assert unmarked == []


def test_the_detector_finds_what_it_should():
    assert _unmarked("rounds=0 trains nothing") == ["rounds="]
    assert _unmarked("dp_clip needs dp_epsilon or dp.noise") == ["dp_clip", "dp_epsilon",
                                                                 "dp.noise"]
    assert _unmarked("`rounds=0` trains nothing; `dp_clip` needs rounds") == []
    assert len(list(_messages())) > 300


def test_a_marked_message_reads_as_python_and_as_flags():
    exc = ConfigError("`rounds=0` trains nothing; `dp_clip` needs `dp.epsilon` or "
                      "`partition='user'`; see `fedmc data list`")
    assert str(exc) == ("rounds=0 trains nothing; dp_clip needs dp.epsilon or "
                        "partition='user'; see `fedmc data list`")
    assert exc.field == "rounds"
    assert in_flags(exc.marked) == ("--rounds 0 trains nothing; --dp-clip needs --dp-epsilon or "
                             "--partition user; see `fedmc data list`")
    switches = ConfigError("`implicit=true` contradicts `refit=false` and `early_stopping=true`")
    assert in_flags(switches.marked) == "--implicit contradicts --no-refit and --early-stopping"
    felb = ConfigError("`dp_clip=frobenius` needs `rank`")
    assert in_flags(felb.marked, algorithm=True) == "--param dp_clip=frobenius needs --rank"
    assert ConfigError("no setting here", field="active").field == "active"
    assert ConfigError("unpaired ` backtick").worded(lambda n, v: "X") == "unpaired ` backtick"


@pytest.mark.parametrize("error", [ConfigError("`rounds=0` trains nothing"),
                                   DataError("`duplicates=error` refuses it", "f.csv", 3)])
def test_a_marked_error_survives_pickling(error):
    """Ray actors and worker processes send errors back pickled."""
    back = pickle.loads(pickle.dumps(error))
    assert (str(back), back.field, back.marked) == (str(error), error.field, error.marked)
    assert isinstance(back, FedMCError)


# a setting the user typed, the line fedmc run refuses it with (naming it by its flag), and
# the field its error carries in the Python API (None: refused by a settings model, whose
# pydantic error names the field itself)
REFUSALS = [
    (["--rounds", "0"], "--rounds 0 trains nothing", "rounds"),
    (["--workers", "2"], "--workers 2 places the clients in Ray's workers: give --backend ray",
     "workers"),
    (["--patience", "3"], "--patience 3 needs --early-stopping", "patience"),
    (["--refit"], "--refit needs --early-stopping", "refit"),
    (["--dp-clip", "0.1"], "--dp-clip needs --dp-epsilon or --dp-noise", "dp_clip"),
    (["--dp-noise", "1"], "user-level DP needs --dp-clip", "dp_clip"),
    (["--dp-noise", "1", "--dp-clip", "1", "--dp-delta", "2"], "--dp-delta: ", "dp.delta"),
    (["--clients", "5", "--partition", "user"], "--clients 5 conflicts with --partition user",
     "clients"),
    (["--dp-noise", "1", "--dp-clip", "1", "--normalize", "zscore"],
     "--normalize zscore fits on the training ratings, which a DP run may not publish: use "
     "--normalize public", "normalize"),
    (["--dp-noise", "1", "--dp-clip", "1", "--validation-fraction", "0.1"],
     "--validation-fraction: a private run would release", "validation_fraction"),
    (["--implicit-threshold", "3"], "--implicit-threshold needs --implicit", None),
    (["--implicit", "--normalize", "zscore"], "--implicit reads interactions, whose strengths "
     "are not normalized: drop --normalize zscore", None),
    (["--validation-fraction", "0.9"], "--validation-fraction: 0.9 would keep back", None),
    (["-a", "item-bias", "--rank", "4", "--rounds", "1"], "--rank", None),
]


def _argv(words, ratings_csv):
    return [*words, "--ratings", str(ratings_csv)]


@pytest.mark.parametrize(("words", "line", "field"), REFUSALS)
def test_fedmc_run_names_a_refused_setting_by_its_flag(words, line, field, monkeypatch, capsys,
                                                       tmp_path, ratings_csv, invoke):
    code, _, err = invoke(monkeypatch, capsys, "run", *_argv(words, ratings_csv), "--out",
                          tmp_path / "out", "-q")
    assert code == 2 and len(err.strip().splitlines()) == 1 and line in err, err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("words", "line", "field"), [r for r in REFUSALS if r[2]])
def test_the_python_api_error_carries_the_refused_field(words, line, field, ratings_csv):
    import typer

    from fedmc.cli import app
    from fedmc.cli.options import run_options
    from fedmc.run.settings import resolve

    command = typer.main.get_command(app).commands["run"]
    options = run_options(command.make_context("run", _argv(words, ratings_csv)).params)
    with pytest.raises(FedMCError) as raised:
        resolve(options)
    assert raised.value.field == field
