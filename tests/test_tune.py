"""``fedmc tune``: the search space, the scoring of a trial, a tiny search end to end, and
several processes on one study (``--storage``, ``--jobs``)."""

from __future__ import annotations

import csv
import dataclasses
import json
import os
import shlex
import subprocess
import sys

import pytest

from fedmc.algorithms.spec import Choice, Range
from fedmc.errors import ConfigError
from fedmc.tune.search import best_of
from fedmc.tune.space import is_searched, parse_range, parse_searched, search_space


@pytest.fixture(scope="module")
def small(ratings_file, tmp_path_factory):
    path = ratings_file(tmp_path_factory.mktemp("small"), users=120, items=30)
    return ["--ratings", str(path), "--columns", "user_id,item_id,stars"]


def test_ranges_parse_and_refuse():
    assert parse_range("rank", "4:64:log:int") == Range(4, 64, log=True, integer=True)
    assert parse_range("lam", " 0.5 : 3 ") == Range(0.5, 3.0)
    for text, message in (("3:1", "below"), ("a:2", "numbers"), ("0:2:log", "LO > 0"),
                          ("1:2:cubic", "optionally"), ("1", "LO:HI")):
        with pytest.raises(ConfigError, match=message):
            parse_range("lam", text)
    assert is_searched("1:300:log") and not is_searched("l2") and not is_searched(3.0)


def test_choices_parse_and_refuse():
    assert parse_searched("consensus", " all , rated") == Choice(("all", "rated"))
    assert parse_searched("lam", "1:2") == Range(1.0, 2.0)
    assert is_searched("all,rated")
    for text in ("all,", "all,all", ",rated"):
        with pytest.raises(ConfigError, match="two or more different values"):
            parse_searched("consensus", text)


def test_the_space_is_the_specs_then_the_users():
    implicit = search_space("fedals", True, {}, {})
    assert set(implicit) == {"rank", "lam", "alpha"}
    assert "alpha" not in search_space("fedals", False, {}, {})  # interactions only
    assert set(search_space("fedals", True, {"alpha": "off"}, {"lam": 30})) == {"rank"}
    mine = search_space("fedmc-admm", False, {"inner": "5:50:int"}, {})
    assert mine["inner"] == Range(5, 50, integer=True) and "gamma" in mine
    assert mine["consensus"] == Choice(("all", "rated"))
    assert "consensus" not in search_space("fedmc-admm", False, {}, {"consensus": "rated"})
    with pytest.raises(ConfigError, match="has no setting bogus"):
        search_space("fedmc-admm", False, {"bogus": "1:2"}, {})
    with pytest.raises(ConfigError, match="nothing to search"):
        search_space("fedmavg", False, {}, {})


def test_a_trial_scores_its_best_round():
    rows = [{"round": 0, "validation_rmse": 1.2}, {"round": 1, "validation_rmse": 0.9},
            {"round": 2, "validation_rmse": 0.9}, {"round": 3, "validation_rmse": 1.0}]
    assert best_of(rows, "validation_rmse", False) == (1, 0.9)  # the earliest of a tie
    # larger is better here: round 0 scores best, but the initial model is never chosen
    assert best_of(rows, "validation_rmse", True) == (3, 1.0)
    assert best_of(rows[:1], "validation_rmse", True) == (0, 1.2)  # one exchange: round 0
    stopped = {"round": 3, "value": 1.0}
    assert best_of(rows, "validation_rmse", False, stopped) == (3, 1.0)
    with pytest.raises(ConfigError, match="no finite"):
        best_of([{"round": 0}], "validation_rmse", False)


def test_a_tiny_search_leaves_a_study_a_table_plots_and_a_run(invoke, monkeypatch, capsys,
                                                              tmp_path, small):
    out = tmp_path / "tune"
    code, _, err = invoke(monkeypatch, capsys, "tune", *small, "--clients", "4", "--rounds",
                          "6", "--trials", "3", "-P", "lam=0.1:10:log", "--space", "gamma=off",
                          "--space", "beta=0.05:1", "--space", "inner=off", "-P", "rank=3",
                          "-P", "consensus=all,rated", "--space", "dual_init=off",
                          "--space", "rank=off",  # off: the value typed with -P still holds
                          "--out", out, "--quiet")
    assert code == 0, err
    for name in ("study.db", "trials.csv", "best.json", "search.png", "settings.png"):
        assert (out / name).exists(), name
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert len(rows) == 3 and set(rows[0]) >= {"trial", "state", "value", "lam", "beta"}
    from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig

    default = FedMCADMMConfig()  # the first trial: the run's own settings, in their ranges
    assert (float(rows[0]["lam"]), float(rows[0]["beta"]), rows[0]["consensus"]) == (
        default.lam, max(default.beta, 0.05), default.consensus)
    best = json.loads((out / "best.json").read_text())
    winner = min((r for r in rows if r["state"] == "complete"), key=lambda r: float(r["value"]))
    assert best["value"] == pytest.approx(float(winner["value"]))
    # scored on the published model, at the fold-in's best lambda (chosen after training)
    assert set(best["settings"]) - {"fold_lam"} == {"lam", "beta", "consensus"}
    assert best["scored"] == "published model, users folded in"
    assert all(r["clients_value"] for r in rows if r["state"] == "complete")
    assert {r["consensus"] for r in rows} <= {"all", "rated"}
    assert best["metric"] == "validation_rmse"
    assert "--rounds 6" not in best["command"].split("-P")[0]  # the final run sets its own
    assert best["command"].endswith(f"--rounds {best['best_round']}")
    config = json.loads((out / "best" / "config.json").read_text())
    assert config["data"]["validation_fraction"] == 0.0  # trained on every training rating
    assert (best["run"], best["data"]) == (config["run"], config["data"])  # clients too
    assert best["validation_fraction"] == 0.2  # the cut the trials were scored on
    assert config["run"]["rounds"] == best["best_round"]
    assert config["params"]["lam"] == pytest.approx(best["settings"]["lam"])
    assert config["params"]["rank"] == 3 and "-P rank=3" in best["command"]
    assert config["params"]["consensus"] == best["settings"]["consensus"]
    assert "consensus=all,rated" not in best["command"]  # the choice is no run option
    assert config["params"]["fold_lam"] == best["settings"].get("fold_lam")  # none: as trained
    searched = json.loads((out / "best" / "evaluation.json").read_text())
    code, _, err = invoke(monkeypatch, capsys, "evaluate", out / "best")
    assert code == 0, err  # the search's reported test figure is fedmc evaluate's
    assert json.loads((out / "best" / "evaluation.json").read_text()) == searched
    assert best["evaluation"]["test_rmse"] == searched["test_rmse"]
    # best.json's command is the final run: the same parameters, the same model
    words = shlex.split(best["command"])
    assert words[:2] == ["fedmc", "run"] and "-P implicit" not in best["command"]
    code, _, err = invoke(monkeypatch, capsys, *words[1:], "--out", tmp_path / "again", "-q")
    assert code == 0, err
    again = json.loads((tmp_path / "again" / "config.json").read_text())
    assert again["params"] == config["params"]
    # the search pins the algorithm it resolved; the command leaves it to resolve again
    assert {**again["run"], "defaulted": None} == {**config["run"], "defaulted": None}
    for name in ("test_rmse", "round"):
        assert json.loads((tmp_path / "again" / "summary.json").read_text())[name] == (
            json.loads((out / "best" / "summary.json").read_text())[name])


def test_trials_evaluate_a_twentieth_of_the_rounds_and_the_final_run_as_typed(
        invoke, monkeypatch, capsys, tmp_path):
    """A trial's curve is read at every ``rounds / 20``-th round (pruning and its best round
    need no more); the final run evaluates every round unless ``--eval-every`` says
    otherwise, which then holds for the trials too."""
    import optuna

    base = ["tune", "--dataset", "synthetic", "--algorithm", "fedals", "--clients", "4",
            "--rounds", "40", "--trials", "1", "-P", "rank=2", "--space", "lam=1:2", "--quiet"]
    for extra, trial_rounds, final_rounds in (
            ([], set(range(2, 41, 2)), None),
            (["--eval-every", "8"], {8, 16, 24, 32, 40}, 8)):
        out = tmp_path / f"tune{len(extra)}"
        code, _, err = invoke(monkeypatch, capsys, *base, *extra, "--out", out)
        assert code == 0, err
        study = optuna.load_study(study_name="fedmc", storage=f"sqlite:///{out / 'study.db'}")
        assert set(study.trials[0].intermediate_values) == trial_rounds
        best = json.loads((out / "best.json").read_text())
        rows = list(csv.DictReader((out / "best" / "history.csv").open()))
        evaluated = {int(r["round"]) for r in rows if r["test_rmse"]}
        step, last = final_rounds or 1, best["best_round"]
        assert last >= 2 * step  # the search trains: its best round is not the initial model
        assert evaluated == {0, *range(step, last + 1, step), last}
        assert ("--eval-every 8" in best["command"]) == bool(extra)


def test_a_space_of_choices_is_a_grid_walked_once(invoke, monkeypatch, capsys, tmp_path):
    """Every combination once (not the 10 trials asked), the run's own settings first."""
    from fedmc.algorithms.fedals.config import FedALSConfig

    own = FedALSConfig().lam
    out = tmp_path / "grid"
    code, _, err = invoke(monkeypatch, capsys, "tune", "--dataset", "synthetic", "--algorithm",
                          "fedals", "--clients", "4", "--rounds", "4", "--trials", "10",
                          "--space", "rank=2,3", "--space", f"lam={own * 2:g},{own:g}",
                          "--quiet", "--out", out)
    assert code == 0, err
    rows = list(csv.DictReader((out / "trials.csv").open()))
    combos = [(int(r["rank"]), float(r["lam"])) for r in rows]
    assert sorted(combos) == sorted((k, x) for k in (2, 3) for x in (own, own * 2))
    assert combos[0][1] == own  # the defaults' lam (rank 32 is no choice: left to the grid)


REFUSED = (
    (["--trials", "0"], "--trials must be >= 1"),
    (["--pruner", "random"], "--pruner takes"),
    (["--space", "lam=5:1"], "--space lam: 5:1: LO must be below HI"),
    (["--space", "rank=2"], "--space rank: 2: expected two or more different values"),
    (["--space", "rank"], "--space expects NAME=LO:HI"),
    (["--space", "rank=0,1"], "--space rank: 0 is refused (rank must be at least 1"),
    (["--space", "rank=0:5:int"], "--space rank: 0 is refused"),
    (["--space", "rank=2:500:int"], "--space rank: 500 is refused (rank 500 exceeds"),
    (["--space", "lam=-1:2"], "--space lam: -1.0 is refused"),
    (["--space", "consensus=all,sometimes"], "--space consensus: sometimes is refused"),
    (["--validation-fraction", "0"], "--validation-fraction 0: a search scores"),
    (["--timeout", "0"], "--timeout must be > 0"),
    (["--jobs", "0"], "--jobs must be >= 1"),
    (["--jobs", "2", "--backend", "ray"], "--jobs 2 with --backend ray would start a Ray in "
                                          "each process"),
    (["--dp-epsilon", "8", "--dp-clip", "1", "--jobs", "2"], "--jobs: a private search runs"),
    (["--rounds", "0"], "--rounds 0: a search compares trained models"),
    (["--storage", "notaurl"], "--storage notaurl: not a database URL"),
    (["--storage", "postgresql://u@h/db"], "driver of that database is not installed"),
    (["--storage", "sqlite:////no/dir/x.db"], "cannot open the database"),
    (["--algorithm", "fedmavg"], "nothing to search"),
    (["--dp-epsilon", "8", "--dp-clip", "1", "--implicit"], "--implicit: a private search"),
)
"""Search inputs refused before any trial (``--storage`` before any data are read), one line
naming the flag, exit 2, nothing left behind."""


def test_refused_searches(invoke, monkeypatch, capsys, tmp_path, small):
    def no_trial(*args, **kwargs):
        raise AssertionError("a trial ran")

    monkeypatch.setattr("fedmc.tune.search.execute", no_trial)
    for args, message in REFUSED:
        if args[0] == "--storage":  # refused before the data are read
            monkeypatch.setattr("fedmc.tune.search.federated_data", no_trial)
        code, _, err = invoke(monkeypatch, capsys, "tune", *small, *args,
                              "--out", tmp_path / "x")
        monkeypatch.undo()
        monkeypatch.setattr("fedmc.tune.search.execute", no_trial)
        assert code == 2 and message in err, (args, err)
        assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert not (tmp_path / "x").exists()


def _trials_stopped_at(monkeypatch, stop: int | None) -> list[tuple[int, dict]]:
    """Runs that train nothing (a trial's score is a function of its settings), the
    ``stop``-th trial interrupted as Ctrl-C interrupts a command; the rounds and settings of
    each run: the warm-up's (one round) and the trials'."""
    import signal
    from types import SimpleNamespace

    from fedmc.cli.interrupts import Interrupted

    ran: list[tuple[int, dict]] = []

    def trial(run, **kwargs):
        ran.append((run.schedule.rounds, dict(run.params)))
        if sum(rounds > 1 for rounds, _ in ran) == stop:
            raise Interrupted(signal.SIGINT)
        score = float(run.params.get("rank", 0)) + float(run.params.get("lam", 0)) / 10
        return SimpleNamespace(history=SimpleNamespace(  # no model: scored on the clients' rows
            rows=[{"round": 1, "validation_rmse": score}]), summary={}, artifact=None)

    monkeypatch.setattr("fedmc.tune.search.execute", trial)
    return ran


def test_a_study_interrupted_keeps_its_trials_and_continues(monkeypatch, tmp_path):
    """The search's own steps (no command, no final run): a signal in the third trial
    closes it as interrupted; the study opened again runs the rest of the grid."""
    from fedmc.cli.interrupts import Interrupted
    from fedmc.run.options import RunOptions
    from fedmc.tune.report import trial_rows
    from fedmc.tune.search import Search, open_study, run_study, trial_data
    from fedmc.tune.space import search_space

    search = Search(RunOptions(dataset="synthetic", algorithm="fedals", validation_fraction=0.2),
                    search_space("fedals", False, {"rank": "2,3", "lam": "1,2"}, {}), 10,
                    f"sqlite:///{tmp_path / 'study.db'}")
    monkeypatch.setattr("fedmc.tune.search.federated_data", lambda data: None)
    _trials_stopped_at(monkeypatch, 3)
    study = open_study(search)
    with pytest.raises(Interrupted):
        run_study(search, study, None)
    before = trial_rows(study)
    assert [r["state"] for r in before] == ["complete", "complete", "interrupted"]
    ran = _trials_stopped_at(monkeypatch, None)
    study = run_study(search, open_study(search), trial_data(search))
    after = trial_rows(open_study(search))
    assert after[:3] == before and len(after) == 5
    assert [rounds for rounds, _ in ran] == [1, 100, 100]  # compiled first, then two trials
    assert sorted((r["rank"], r["lam"]) for r in after if r["state"] == "complete") == [
        (k, x) for k in ("2", "3") for x in ("1", "2")]


@pytest.mark.slow
def test_an_interrupted_search_continues_where_it_stopped(invoke, monkeypatch, capsys,
                                                          tmp_path):
    """Ctrl-C after two finished trials: ``trials.csv`` says so, the same command continues
    the study (the two trials kept, the interrupted one's settings tried again, the rest of
    the grid run), another command on the folder is refused and ``--overwrite`` starts
    over."""
    out = tmp_path / "tune"
    args = ["tune", "--dataset", "synthetic", "--algorithm", "fedals", "--clients", "4",
            "--rounds", "2", "--space", "rank=2,3", "--space", "lam=1,2", "--quiet",
            "--out", out]
    _trials_stopped_at(monkeypatch, 3)
    code, _, err = invoke(monkeypatch, capsys, *args)
    assert code == 130 and "interrupted by SIGINT" in err, err
    before = list(csv.DictReader((out / "trials.csv").open()))
    assert [r["state"] for r in before] == ["complete", "complete", "interrupted"]
    assert json.loads((out / "status.json").read_text())["status"] == "interrupted"
    assert not (out / "best.json").exists()
    code, _, err = invoke(monkeypatch, capsys, *args[:-3], "--seed", "1", "--out", out)
    assert code == 2 and "interrupted run of another command" in err, err
    ran = _trials_stopped_at(monkeypatch, None)
    code, _, err = invoke(monkeypatch, capsys, *args)
    assert code == 0, err
    after = list(csv.DictReader((out / "trials.csv").open()))
    assert after[:3] == before  # the finished trials back, the interrupted one marked
    assert [r["state"] for r in after[3:]] == ["complete", "complete"] and len(ran) == 3
    grid = {(r["rank"], r["lam"]) for r in after if r["state"] == "complete"}
    assert grid == {(k, x) for k in ("2", "3") for x in ("1", "2")}  # each once
    assert ran[0][0] == 1  # the warm-up, then the trials: the interrupted one tried again
    assert (after[2]["rank"], after[2]["lam"]) in {(p["rank"], p["lam"]) for _, p in ran[1:]}
    assert json.loads((out / "best.json").read_text())["settings"] == {"rank": "2",
                                                                       "lam": "1"}
    assert json.loads((out / "status.json").read_text())["status"] == "finished"
    code, _, err = invoke(monkeypatch, capsys, *args)  # finished: not run again
    assert code == 2 and "--overwrite" in err, err
    ran = _trials_stopped_at(monkeypatch, None)
    code, _, err = invoke(monkeypatch, capsys, *args, "--overwrite")
    assert code == 0, err
    assert [r["state"] for r in csv.DictReader((out / "trials.csv").open())] == [
        "complete"] * 4 and len(ran) == 5


def test_a_trial_a_killed_process_left_running_is_closed_and_tried_again(tmp_path):
    """In a study of its own, a trial still running when the search opens it was left by a
    process that died without a word (SIGKILL): it is closed as interrupted, its settings
    queued first."""
    from fedmc.run.options import RunOptions
    from fedmc.tune.report import trial_rows
    from fedmc.tune.search import Search, open_study
    from fedmc.tune.space import search_space

    search = Search(RunOptions(dataset="synthetic", algorithm="fedals", validation_fraction=0.2),
                    search_space("fedals", False, {"rank": "2:8:int"}, {}), 3,
                    f"sqlite:///{tmp_path / 'study.db'}")
    study = open_study(search)
    killed = study.ask()  # the first trial (the run's own settings), then no word
    assert killed.params == {}  # killed before its first suggestion: its queued settings hold
    shared = open_study(dataclasses.replace(search, exclusive=False))
    assert [t.state.name for t in shared.trials] == ["RUNNING"]  # maybe another process's
    study = open_study(search)
    assert [r["state"] for r in trial_rows(study)] == ["interrupted"]
    assert [t.state.name for t in study.trials] == ["FAIL", "WAITING"]
    queued = study.ask()
    assert queued.suggest_int("rank", 2, 8) == 8  # fedals' default rank 10, into the range


@pytest.mark.slow
def test_two_processes_work_on_one_study(tmp_path, small):
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    args = [sys.executable, "-m", "fedmc", "tune", *small, "--clients", "4", "--rounds", "4",
            "--trials", "4", "--space", "gamma=off", "--space", "beta=off", "--space",
            "rank=2:4:int", "--storage", storage, "--quiet"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [subprocess.Popen([*args, "--out", str(tmp_path / f"p{i}")], env=env,
                              stderr=subprocess.PIPE, text=True) for i in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    import optuna

    study = optuna.load_study(study_name="fedmc", storage=storage)
    finished = [t for t in study.trials if t.state.is_finished()]
    assert 4 <= len(finished) <= 5  # both may start the last trial at once
    tables = [list(csv.DictReader((tmp_path / f"p{i}" / "trials.csv").open())) for i in (0, 1)]
    assert max(len(t) for t in tables) == len(study.trials)  # one study, seen by both


def test_best_json_command_is_the_typed_run_options_without_the_searchs():
    from fedmc.cli.options import OPTIONS, command_words
    from fedmc.cli.tune import _run_words

    typed = {name: d.default for name, d in OPTIONS.items()}
    typed.update(dataset="ml-100k", rank=8, implicit=True, refit=False, trials=30,
                 param=["lam=1:30:log", "consensus=all,rated", "beta=0.5"], out_dir="x",
                 quiet=True, rounds=50)
    assert _run_words(typed) == ["--dataset", "ml-100k", "--implicit", "--rank", "8",
                                 "-P", "beta=0.5"]
    everything = command_words(typed)
    assert {"--no-refit", "--rounds", "50", "--out", "-P", "lam=1:30:log"} <= set(everything)


def test_a_search_from_python_refuses_before_any_trial():
    from fedmc.tune import tune

    for space, options, message in (({"lam": "-1:2"}, {}, "--space lam: -1.0 is refused"),
                                    ({}, {"validation_fraction": 0.0}, "validation cut"),
                                    ({}, {"algorithm": "fedmavg"}, "nothing to search")):
        with pytest.raises(ConfigError, match=message):
            tune(space, dataset="synthetic", **{"algorithm": "fedals", **options}, trials=2)


@pytest.mark.slow
def test_a_search_from_python_is_the_commands(invoke, monkeypatch, capsys, tmp_path):
    """``fedmc.tune.tune`` finds what ``fedmc tune`` finds (in memory: no folder) and trains
    the same final run."""
    from fedmc.tune import Tuned, tune

    args = {"dataset": "synthetic", "algorithm": "fedals", "clients": 4, "rounds": 6}
    found = tune({"lam": "1:30:log"}, trials=3, **args, params={"rank": 2})
    assert isinstance(found, Tuned) and len(found.study.trials) == 3
    code, _, err = invoke(monkeypatch, capsys, "tune", "--dataset", "synthetic", "--algorithm",
                          "fedals", "--clients", "4", "--rounds", "6", "--rank", "2",
                          "--space", "lam=1:30:log", "--trials", "3", "--quiet", "--out",
                          tmp_path / "cli")
    assert code == 0, err
    best = json.loads((tmp_path / "cli" / "best.json").read_text())
    assert found.settings == best["settings"]
    assert found.run.schedule.rounds == best["best_round"]
    summary = json.loads((tmp_path / "cli" / "best" / "summary.json").read_text())
    assert found.result.summary["test_rmse"] == summary["test_rmse"]


def _hundred_items(tmp_path, users: int = 60):
    """A ratings file of ``users`` users over 100 items (every user rates about a third)."""
    path = tmp_path / "hundred.csv"
    path.write_text("user,item,rating\n" + "".join(
        f"{u},{i},{1 + (u * i) % 5}\n" for u in range(users) for i in range(100)
        if (u + 2 * i) % 3 == 0))
    return path


def test_a_declared_range_is_clipped_to_the_data_a_given_one_is_refused(tmp_path):
    """fedals declares ranks 8 to 128: on 60 users and 100 items they are searched up to 60,
    said in a line; the same range given with --space is refused, a range wholly above the
    data too."""
    from fedmc.run.options import RunOptions
    from fedmc.tune.search import Search, check_space, fit_to_data, trial_data

    options = RunOptions(ratings=_hundred_items(tmp_path), clients=4, algorithm="fedals",
                         validation_fraction=0.2)
    declared = Search(options, search_space("fedals", False, {}, {}), 4, None)
    loaded = trial_data(declared)
    assert loaded is not None
    data = loaded[0]
    assert (data.n_users, data.n_items) == (60, 100)
    clipped, notes = fit_to_data(declared, data)
    assert clipped.space["rank"] == dataclasses.replace(declared.space["rank"], high=60.0)
    assert clipped.space["lam"] == declared.space["lam"]
    assert notes == ["rank searched from 8 to 60 (what the data allow), not to 128"]
    check_space(clipped, data)
    given = dataclasses.replace(declared, given=("rank",))
    assert fit_to_data(given, data)[0].space == given.space
    with pytest.raises(ConfigError, match="--space rank: 128 is refused"):
        check_space(given, data)
    above = dataclasses.replace(declared, space={"rank": Range(70, 90, integer=True)})
    with pytest.raises(ConfigError, match="the data allow rank <= 60"):
        fit_to_data(above, data)


@pytest.mark.parametrize("algorithm", ["fedals", "fedmc-admm"])
def test_no_trial_fails_for_a_range_the_data_cannot_take(tmp_path, algorithm):
    """Issue 41, acceptance 4: the declared spaces searched on a 100-item set (60 users)."""
    from fedmc.tune import tune

    found = tune(trials=4, pruner="none", algorithm=algorithm, ratings=_hundred_items(tmp_path),
                 clients=4, rounds=3, seed=0)
    states = [t.state.name for t in found.study.trials]
    assert states.count("COMPLETE") == 4 and "FAIL" not in states, states
    if algorithm == "fedals":
        assert all(t.params["rank"] <= 60 for t in found.study.trials)


def test_a_trial_drawn_past_a_grid_is_not_run(monkeypatch, tmp_path):
    """Where other processes took a grid's last points, a process's next trial is drawn by
    the sampler: it is not run, the search stops, and ``trials.csv`` leaves it out."""
    from fedmc.run.options import RunOptions
    from fedmc.tune.report import trial_rows
    from fedmc.tune.search import SURPLUS, Search, open_study, run_study
    from fedmc.tune.space import search_space

    search = Search(RunOptions(dataset="synthetic", algorithm="fedals", validation_fraction=0.2),
                    search_space("fedals", False, {"rank": "2,3", "lam": "1,2"}, {}), 10,
                    f"sqlite:///{tmp_path / 'study.db'}", exclusive=False)
    monkeypatch.setattr("fedmc.tune.search.warm_up", lambda search, loaded: None)
    ran = _trials_stopped_at(monkeypatch, None)
    study = open_study(search)
    taken = [study.ask() for _ in range(4)]  # every point taken by "other processes"
    study.tell(taken[0], 1.0)  # one of them finished, three running
    study = run_study(search, study, None)
    assert ran == []  # a drawn trial, not run
    assert len(study.trials) == 5 and study.trials[-1].user_attrs == {SURPLUS: True}
    assert [r["trial"] for r in trial_rows(study)] == [0, 1, 2, 3]


def _grid_search(out, *extra: str) -> list[str]:
    return [sys.executable, "-m", "fedmc", "tune", "--rounds", "4", "--space", "rank=2,4,8",
            "--space", "lam=1,4", "--space", "inner=5,10", "--space", "beta=off", "--space",
            "gamma=off", "--space", "consensus=off", "--space", "dual_init=off", "--pruner",
            "none", "--quiet", "--out", str(out), *extra]


def _by_settings(out) -> dict[tuple[str, str, str], tuple[str, float, str]]:
    return {(r["rank"], r["lam"], r["inner"]): (r["state"], float(r["value"]), r["best_round"])
            for r in csv.DictReader((out / "trials.csv").open())}


@pytest.mark.slow
def test_a_grid_in_two_processes_equals_the_sequential_grid(tmp_path):
    """``--jobs 2``: the twelve points of a grid, each run once over the two processes, with
    the sequential search's scores and best settings."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for name, extra in (("one", ()), ("two", ("--jobs", "2"))):
        subprocess.run(_grid_search(tmp_path / name, *extra), env=env, check=True,
                       timeout=600, capture_output=True)
    one, two = _by_settings(tmp_path / "one"), _by_settings(tmp_path / "two")
    assert len(one) == 12 and one.keys() == two.keys()
    for key, (state, value, best_round) in one.items():
        assert two[key][0] == state == "complete" and two[key][2] == best_round
        assert two[key][1] == pytest.approx(value, rel=1e-12, abs=0)
    best = [json.loads((tmp_path / n / "best.json").read_text())["settings"]
            for n in ("one", "two")]
    assert best[0] == best[1]


@pytest.mark.slow
def test_a_search_in_two_processes_stops_whole_and_continues(tmp_path):
    """SIGTERM to ``fedmc tune --jobs 2`` after two finished trials: the command exits 143
    within seconds, its other process too, no trial is left running; the same command then
    finishes the grid, each point once."""
    import signal
    import time

    import optuna

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = tmp_path / "tune"
    command = _grid_search(out, "--jobs", "2", "--rounds", "40")
    search = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True)
    storage = f"sqlite:///{out / 'study.db'}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            trials = optuna.load_study(study_name="fedmc", storage=storage).trials
        except Exception:  # not created yet
            continue
        if sum(t.state.is_finished() for t in trials) >= 2:
            break
    others = subprocess.run(["pgrep", "-f", "fedmc.cli.tune_jobs"], capture_output=True,
                            text=True).stdout.split()
    assert others, "no second process"
    search.send_signal(signal.SIGTERM)
    _, err = search.communicate(timeout=15)
    assert search.returncode == 143, err
    left = subprocess.run(["pgrep", "-f", "fedmc.cli.tune_jobs"], capture_output=True,
                          text=True).stdout.split()
    assert not set(left) & set(others)
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert "running" not in {r["state"] for r in rows}
    assert sum(r["state"] == "complete" for r in rows) >= 2
    subprocess.run(command, env=env, check=True, timeout=600, capture_output=True)
    finished = [r for r in csv.DictReader((out / "trials.csv").open())
                if r["state"] == "complete"]
    assert sorted((r["rank"], r["lam"], r["inner"]) for r in finished) == sorted(
        (k, x, n) for k in ("2", "4", "8") for x in ("1", "4") for n in ("5", "10"))


def test_the_candidates_of_a_search():
    from fedmc.tune.space import AUTO, candidates, settings_of, unclaimed

    assert candidates(None, True) == [] and candidates("fedals", True) == []
    assert set(candidates(AUTO, True)) == {"fedals", "ease"}  # interactions
    assert "fedmc-admm" in candidates(AUTO, False) and "ease" not in candidates(AUTO, False)
    assert candidates("ease, fedals", True) == ["ease", "fedals"]
    for named, message in (("fedals,felb", "felb cannot be among"),
                           ("fedals,nope", "unknown algorithm 'nope'"),
                           ("fedals,fedals", "two or more")):
        with pytest.raises(ConfigError, match=message):
            candidates(named, True)
    assert settings_of("ease", {"lam": "1:2", "rank": "2:8"}) == {"lam": "1:2"}
    assert unclaimed(["ease", "fedals"], {"lam": 1, "beta": 2}) == ["beta"]


def test_a_search_among_algorithms_keeps_the_best_on_the_cut(invoke, monkeypatch, capsys,
                                                             tmp_path, small):
    out = tmp_path / "among"
    code, _, err = invoke(monkeypatch, capsys, "tune", *small, "--implicit", "--algorithm",
                          "fedals,ease", "--rounds", "3", "--trials", "2", "-P", "rank=3",
                          "--out", out, "--quiet")
    assert code == 0, err
    rows = list(csv.DictReader((out / "trials.csv").open()))
    assert [r["algorithm"] for r in rows] == ["fedals"] * 2 + ["ease"] * 2
    assert all(r["alpha"] == "" for r in rows if r["algorithm"] == "ease")  # fedals' alone
    best = json.loads((out / "best.json").read_text())
    by_algorithm = {a: max(float(r["value"]) for r in rows
                           if r["algorithm"] == a and r["state"] == "complete")
                    for a in ("fedals", "ease")}
    assert best["candidates"] == pytest.approx(by_algorithm)  # NDCG: larger is better
    winner = max(by_algorithm, key=by_algorithm.__getitem__)
    assert best["algorithm"] == winner and best["value"] == pytest.approx(by_algorithm[winner])
    assert json.loads((out / "best" / "config.json").read_text())["algorithm"] == winner
    # refused with one line naming what: a setting no candidate has, a private search
    for extra, message in ((["--space", "beta=0.1:1"], "beta: no candidate"),
                           (["--dp-epsilon", "8"], "a private search fits one algorithm")):
        code, _, err = invoke(monkeypatch, capsys, "tune", *small, "--implicit",
                              "--algorithm", "fedals,ease", *extra, "--out", tmp_path / "x")
        assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "x").exists()
