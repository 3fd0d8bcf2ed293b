"""Experiments: expansion, validation, resumable runs, reports, plots and the commands."""

from __future__ import annotations

import csv
import json
import math
import shutil

import pytest
import typer
from typer.testing import CliRunner

from fedmc.cli.experiment import register
from fedmc.errors import ConfigError, FedMCError
from fedmc.experiments import expand, load_preset, preset_names, run_experiment
from fedmc.experiments.config import PaperValue, TableSpec, parse_experiment, with_overrides
from fedmc.experiments.results import FinishedRun
from fedmc.experiments.store import is_done, run_dir
from fedmc.experiments.tables import build_table

TINY = """
name = "tiny"
title = "Tiny"
seeds = 2
[run]
rounds = 3
active = 2
[data]
clients = 4
[[datasets]]
name = "synthetic"
params = { rank = 3 }
[[methods]]
label = "ADMM"
algorithm = "fedmc-admm"
params = { rank = 2, inner = 2 }
[[plots]]
y = "objective"
logy = true
[[plots]]
y = "test_rmse"
[[tables]]
metrics = ["test_rmse", "test_mae"]
"""

GRID = TINY + """
[[settings]]
label = "low"
params = { lam = 1e-3 }
run = { active = "all" }
[grid]
inner = [1, 2]
"run.eval_every" = [1, 3]
"""


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """An empty working folder and data folder (nothing real is read)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    monkeypatch.setenv("FEDMC_DATA", str(tmp_path / "data"))
    return tmp_path


@pytest.fixture
def cli():
    app = typer.Typer()
    register(app)
    runner = CliRunner()
    return lambda *args: runner.invoke(app, [str(a) for a in args])


def tiny(text: str = TINY, **changes):
    config = parse_experiment(text, "test")
    return config.model_copy(update=changes) if changes else config


# ----------------------------------------------------------------------------- expansion


def test_expansion_merges_entries_and_names_runs_stably(workdir):
    runs = expand(tiny(GRID)).runs
    assert len(runs) == 1 * 1 * 4 * 2
    first = runs[0]
    assert first.run_id == "synthetic__admm__low_inner=1_eval_every=1__s0"
    # dataset params override the method's, the setting's and the grid's override both
    assert first.params == {"rank": 3, "inner": 1, "lam": 1e-3}
    assert first.options == {"rounds": 3, "active": "all", "eval_every": 1, "seed": 0,
                             "clients": 4, "dataset": "synthetic"}
    assert first.facets == {"dataset": "synthetic", "method": "ADMM",
                            "setting": "low, inner=1, eval_every=1", "inner": 1,
                            "eval_every": 1, "seed": 0}
    assert len({r.run_id for r in runs}) == len(runs)
    assert expand(tiny(GRID)).digest == expand(tiny(GRID)).digest


def test_overrides_replace_data_sets_and_seeds(workdir):
    config = with_overrides(load_preset("fedmc-fig2"), ["ml-1m", "ml-100k"], seeds=1)
    runs = expand(config).runs
    assert [r.facets["dataset"] for r in runs] == ["ml-1m", "ml-1m", "ml-100k", "ml-100k"]
    assert runs[0].params["rank"] == 5  # the preset's ml-1m entry is kept
    assert "rank" not in runs[2].params
    assert {r.facets["seed"] for r in runs} == {0}


def test_missing_optional_set_is_skipped_and_fallback_noted(workdir):
    expansion = expand(load_preset("fedmc-fig2"))
    assert {r.facets["dataset"] for r in expansion.runs} == {"ml-1m", "synthetic-netflix"}
    assert any("ml-10m was skipped" in n for n in expansion.notes)
    assert any("synthetic-netflix stands in for netflix" in n for n in expansion.notes)
    netflix = next(r for r in expansion.runs if r.facets["dataset"] == "synthetic-netflix")
    assert netflix.params["rank"] == 13 and netflix.options["eval_every"] == 10


def test_every_preset_parses():
    names = preset_names()
    assert {"fedmc-fig2", "fedmc-fig3", "fedmc-fig4", "rfrec-table2", "rfrec-table3",
            "rfrec-table4", "rfrec-privacy", "felb-noise", "felb-dp", "felb-scalability",
            "felb-real"} <= set(names)
    for name in names:
        assert load_preset(name).name == name


@pytest.mark.parametrize("name", ["fedmc-fig2", "fedmc-fig3", "fedmc-fig4", "rfrec-table2",
                                  "rfrec-table3", "rfrec-table4", "rfrec-privacy"])
def test_presets_of_registered_algorithms_validate(workdir, name):
    assert expand(load_preset(name)).runs


# ----------------------------------------------------------------------------- validation


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ('"fedmc-admm"', None),
        ('"nope"', "unknown algorithm 'nope'"),
        ('"fedmc-admm"\nparams = { bogus = 1 }', "unknown parameter 'bogus'"),
        ('"fedmc-admm"\nparams = { beta = -1.0 }', "parameter beta"),
    ],
)
def test_invalid_methods_fail_before_anything_runs(workdir, change, message):
    text = TINY.replace('"fedmc-admm"\nparams = { rank = 2, inner = 2 }', change)
    if message is None:
        expand(tiny(text))
        return
    with pytest.raises(ConfigError, match=message):
        run_experiment(tiny(text))
    assert not (workdir / "runs").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ("[grid]\n\"run.bogus\" = [1]", "unknown run setting 'bogus'"),
        ("[grid]\n\"data.clients\" = [0]", "setting clients: Input should be greater"),
        ("[grid]\n\"server.x\" = [1]", "grid key 'server.x'"),
        ("[[datasets]]\nname = \"no-such-set\"", "unknown data set 'no-such-set'"),
    ],
)
def test_invalid_settings_fail_clearly(workdir, extra, message):
    with pytest.raises(ConfigError, match=message):
        expand(tiny(TINY + extra))


def test_bad_files_say_where(workdir):
    with pytest.raises(ConfigError, match="test: datasets"):
        parse_experiment('name = "x"\ntitle = "x"\n[[methods]]\nlabel = "a"\nalgorithm = "als"',
                         "test")
    with pytest.raises(ConfigError, match="not valid TOML"):
        parse_experiment("name = ", "test")
    with pytest.raises(ConfigError, match="unknown experiment"):
        load_preset("fedmc-fig99")


# ----------------------------------------------------------------------------- runs and resume


def test_run_resume_and_identical_report(workdir, cli):
    config_file = workdir / "tiny.toml"
    config_file.write_text(TINY)
    result = cli("experiment", "--config", config_file, "--quiet")
    assert result.exit_code == 0, result.output
    (folder,) = (workdir / "runs" / "tiny").iterdir()
    report = (folder / "report.md").read_text()
    assert "![synthetic](plots/synthetic.png)" in report
    assert "| test RMSE |" in report and " ± " in report
    assert (folder / "plots" / "synthetic.png").read_bytes().startswith(b"\x89PNG")
    original = {p: p.read_bytes() for p in [folder / "report.md", *folder.glob("plots/*")]}

    # a kill during the second run: its summary.json never appeared, nor the report
    victim = run_dir(folder, "synthetic__admm__s1")
    (victim / "summary.json").unlink()
    (folder / "report.md").unlink()
    (victim / ".history.csv.tmp").write_text("partial")
    kept = (run_dir(folder, "synthetic__admm__s0") / "summary.json").stat().st_mtime_ns

    result = cli("experiment", "--config", config_file, "--quiet")
    assert result.exit_code == 0, result.output
    assert "resumed" in result.output and "ran 1 of 2 runs" in result.output
    assert list((workdir / "runs" / "tiny").iterdir()) == [folder]
    assert (run_dir(folder, "synthetic__admm__s0") / "summary.json").stat().st_mtime_ns == kept
    assert not (victim / ".history.csv.tmp").exists()
    assert {p: p.read_bytes() for p in original} == original
    timing = json.loads((folder / "timing.json").read_text())
    assert [t["resumed"] for t in timing] == [False, True]


def test_finished_or_changed_experiments_get_a_new_folder(workdir):
    first = run_experiment(tiny(), quiet=True)
    second = run_experiment(tiny(), quiet=True)
    assert second.folder != first.folder and not second.resumed
    changed = run_experiment(tiny(seeds=1), quiet=True, fresh=True)
    assert changed.folder not in (first.folder, second.folder)


def test_parallel_jobs_give_the_serial_report(workdir):
    serial = run_experiment(tiny(), root=workdir / "a", quiet=True)
    parallel = run_experiment(tiny(), root=workdir / "b", jobs=2, quiet=True)
    assert sorted(parallel.outcome.seconds) == ["synthetic__admm__s0", "synthetic__admm__s1"]
    assert parallel.report.read_bytes() == serial.report.read_bytes()


def test_failed_runs_are_reported_and_retried(workdir):
    text = TINY.replace("params = { rank = 3 }", "params = { rank = 100000 }")
    with pytest.raises(FedMCError, match="2 of 2 runs failed.*rank 100000"):
        run_experiment(tiny(text), quiet=True)
    (folder,) = (workdir / "runs" / "tiny").iterdir()
    assert (run_dir(folder, "synthetic__admm__s0") / "error.txt").is_file()
    assert not is_done(folder, "synthetic__admm__s0")
    assert not (folder / "report.md").exists()


# ----------------------------------------------------------------------------- tables


def _run(method: str, dataset: str, seed: int, rmse: float) -> FinishedRun:
    return FinishedRun({"dataset": dataset, "method": method, "setting": "", "seed": seed},
                       {}, {"test_rmse": rmse})


def test_table_puts_the_papers_numbers_beside_ours():
    runs = [_run("Ours", "ml-1m", s, 0.88 + 0.01 * s) for s in range(3)]
    runs += [_run("Other", "ml-1m", 0, 0.9), _run("Ours", "ml-100k", 0, 0.93)]
    paper = [PaperValue(dataset="ml-1m", method="Ours", metric="test_rmse", value="0.8831"),
             PaperValue(dataset="ml-1m", method="PMF", metric="test_rmse", value="0.8762"),
             PaperValue(dataset="kuairec", method="Ours", metric="test_rmse", value="0.7")]
    spec = TableSpec(metrics=["test_mae", "test_rmse"], rows=["dataset", "metric"],
                     columns=["method"], order={"method": ["PMF", "Other", "Ours"]})
    header, *body = build_table(spec, runs, ["dataset", "method"], paper)
    assert header == ["Dataset", "Metric", "PMF (paper)", "Other", "Ours", "Ours (paper)"]
    assert body == [
        ["ml-1m", "test MAE", "–", "–", "–", "–"],
        ["ml-1m", "test RMSE", "0.8762", "0.9000", "0.8900 ± 0.0100", "0.8831"],
        ["ml-100k", "test MAE", "–", "–", "–", "–"],
        ["ml-100k", "test RMSE", "–", "–", "0.9300", "–"],
    ]


def test_table_rows_take_varied_facets_the_spec_leaves_out():
    runs = [FinishedRun({"dataset": "d", "method": "m", "setting": f"lam={v}", "lam": v,
                         "seed": 0}, {}, {"test_rmse": v}) for v in (1.0, 2.0)]
    header, *body = build_table(TableSpec(metrics=["test_rmse"]), runs, ["lam"], [])
    assert header == ["Dataset", "Lam", "Method", "test RMSE"]
    assert [row[1] for row in body] == ["1", "2"]


def test_ratio_metrics_and_missing_values():
    run = FinishedRun({"clients": 8}, {}, {"train_seconds": 4.0})
    assert run.final("train_seconds/clients") == 0.5
    assert math.isnan(run.final("test_rmse"))


# ------------------------------------------------------------- a run is a fedmc run command


def _parsed(words):
    """``fedmc run``'s keyword arguments for the command-line ``words`` (parsed, not run)."""
    from fedmc.cli import app

    command = typer.main.get_command(app).commands["run"]
    return command.make_context("run", list(words)).params


def _same_run(one, two):
    """Two specs that train the same run (parameters compared validated: the command line
    gives them as text)."""
    assert one.model_dump(exclude={"params"}) == two.model_dump(exclude={"params"})
    assert one.config() == two.config()


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_run_is_the_fedmc_run_command_it_lists(name, require_shared_data):
    """An experiment's runs resolve their options as ``fedmc run`` does (paper settings,
    sampling, DP rules), and the command ``--dry-run`` lists for a run asks for that run."""
    from fedmc.cli.options import command_words, run_options, typed_of
    from fedmc.run.settings import resolve

    try:
        runs = expand(load_preset(name), "/nonexistent").runs
    except ConfigError:  # felb-real reads licensed files only
        runs = expand(load_preset(name), require_shared_data()).runs
    first_seed = runs[0].facets["seed"]  # another seed changes --seed alone
    for run in (r for r in runs if r.facets["seed"] == first_seed):
        options = run.run_options()
        typed = _parsed(command_words(typed_of(options)))
        _same_run(resolve(run_options(typed)), resolve(options))


def test_an_experiment_run_equals_its_fedmc_run_command(workdir, cli):
    """The run an experiment makes and the ``fedmc run`` command it lists give the same
    history and configuration."""
    from fedmc.cli import app
    from fedmc.cli.options import command_words, typed_of

    done = run_experiment(tiny(GRID, seeds=[1]), quiet=True)
    planned = next(r for r in expand(tiny(GRID, seeds=[1])).runs if r.params["inner"] == 2)
    words = command_words(typed_of(planned.run_options()))
    result = CliRunner().invoke(app, ["run", *words, "--out", str(workdir / "alone"), "-q"])
    assert result.exit_code == 0, result.output
    experiment = run_dir(done.folder, planned.run_id)

    def history(folder):
        rows = list(csv.DictReader((folder / "history.csv").read_text().splitlines()))
        return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]

    assert history(workdir / "alone") == history(experiment)
    one, two = (json.loads((folder / "config.json").read_text())
                for folder in (experiment, workdir / "alone"))
    assert one == two


# ----------------------------------------------------------------------------- commands


def test_list_show_and_dry_run(workdir, cli):
    listed = cli("experiment", "--list")
    assert listed.exit_code == 0 and "fedmc-fig2" in listed.output
    shown = cli("experiment", "fedmc-fig2", "--show")
    assert shown.exit_code == 0 and shown.output.startswith("# FedMC-ADMM paper")
    assert parse_experiment(shown.output, "shown").name == "fedmc-fig2"
    dry = cli("experiment", "fedmc-fig2", "--dataset", "ml-1m", "--seeds", "2", "--dry-run")
    assert dry.exit_code == 0 and "ml-1m__fedmavg__s1  fedmc run --algorithm fedmavg " \
        "--dataset ml-1m" in dry.output
    assert not (workdir / "runs").exists()
    neither = cli("experiment")
    assert isinstance(neither.exception, ConfigError)


def test_plot_overlays_runs(workdir, cli):
    done = run_experiment(tiny(), quiet=True)
    single = workdir / "single"
    shutil.copytree(run_dir(done.folder, "synthetic__admm__s0"), single)
    result = cli("plot", done.folder, single, "--out", workdir / "fig.png")
    assert result.exit_code == 0, result.output
    assert (workdir / "fig.png").read_bytes().startswith(b"\x89PNG")
    bad = cli("plot", single, "--y", "nope", "--out", workdir / "x.png")
    assert isinstance(bad.exception, ConfigError) and "no column nope" in str(bad.exception)


def test_a_folder_in_use_is_not_entered_twice(workdir):
    from fedmc.experiments.store import locked

    first = run_experiment(tiny(), quiet=True)
    (first.folder / "report.md").unlink()
    with locked(first.folder), pytest.raises(FedMCError, match="in use"):
        run_experiment(tiny(), quiet=True)


def test_a_data_set_without_download_stops_before_any_run(workdir):
    with pytest.raises(FedMCError, match="Netflix Prize data has no official download"):
        run_experiment(with_overrides(tiny(), ["netflix"]), quiet=True)
    (folder,) = (workdir / "runs" / "tiny").iterdir()
    assert not (folder / "runs").exists()


# ----------------------------------------------------------------------------- backends


def test_a_run_table_places_the_clients_on_a_backend(workdir, cli):
    from fedmc.experiments.expand import validate
    from fedmc.run.settings import resolve

    runs = expand(tiny(TINY.replace("active = 2", 'active = 2\nbackend = "ray"\nworkers = 3'))).runs
    assert (runs[0].options["backend"], runs[0].options["workers"]) == ("ray", 3)
    spec = resolve(runs[0].run_options())
    assert (spec.backend.kind, spec.backend.workers) == ("ray", 3)
    assert spec.schedule.active == 2  # the schedule's settings stay the schedule's
    for bad, message in (('backend = "ray"\nworkers = 0', "workers=0: the clients need"),
                         ('backend = "spark"', "setting backend: Input should be"),
                         ('backend = { kind = "ray" }', "setting backend: Input should be"),
                         ("workers = 2", "workers=2 places the clients in Ray's")):
        with pytest.raises(ConfigError, match=message):
            validate(expand(tiny(TINY.replace("active = 2", f"active = 2\n{bad}"))).runs, "t")
    config_file = workdir / "ray.toml"
    config_file.write_text(TINY.replace("active = 2", 'active = 2\nbackend = "ray"'))
    result = cli("experiment", "--config", config_file, "--jobs", "2", "--quiet")
    assert "would start a Ray in each process" in str(result.exception)
    assert not (workdir / "runs").exists()  # refused before a folder is made


@pytest.mark.slow
def test_an_experiment_on_ray_equals_the_batched_one(workdir, cli):
    pytest.importorskip("ray")
    histories = {}
    for name, extra in (("batched", ""), ("ray", '\nbackend = "ray"\nworkers = 2')):
        config_file = workdir / f"{name}.toml"
        config_file.write_text(TINY.replace('name = "tiny"', f'name = "{name}"')
                               .replace("seeds = 2", "seeds = 1")
                               .replace("active = 2", "active = 2" + extra))
        result = cli("experiment", "--config", config_file, "--quiet")
        assert result.exit_code == 0, result.output
        (folder,) = (workdir / "runs" / name).iterdir()
        (run,) = (folder / "runs").iterdir()
        histories[name] = (run / "history.csv").read_text().splitlines()
        backend = json.loads((run / "config.json").read_text())["run"].get("backend")
        assert backend == ({"kind": "ray", "workers": 2, "address": None} if extra else None)
    header = histories["batched"][0].split(",")
    for one, two in zip(histories["batched"][1:], histories["ray"][1:], strict=True):
        for key, a, b in zip(header, one.split(","), two.split(","), strict=True):
            if key != "seconds":
                assert float(b) == pytest.approx(float(a), rel=1e-10, abs=1e-12), key
