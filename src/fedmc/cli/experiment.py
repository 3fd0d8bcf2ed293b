"""The ``fedmc experiment`` and ``fedmc plot`` commands.

``register(app)`` adds both to the ``fedmc`` Typer app. Errors in the user's input raise
:class:`fedmc.errors.FedMCError`, which ``fedmc.cli.main`` turns into exit status 2 with a
one-line reason.
"""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from rich.console import Console
from rich.table import Table

from fedmc.errors import ConfigError

if TYPE_CHECKING:
    from fedmc.experiments.config import ExperimentConfig

err = Console(stderr=True)
out = Console()


def experiment(
    name: Annotated[str | None, typer.Argument(help="A preset (see --list).")] = None,
    config: Annotated[Path | None, typer.Option("--config", help="An experiment TOML file "
                                                "(copy a preset with --show and edit it).")] = None,
    dataset: Annotated[list[str] | None, typer.Option(
        "--dataset", help="Run on this data set instead of the experiment's (repeatable).")] = None,
    seeds: Annotated[int | None, typer.Option(help="Seeds 0 .. N-1 instead of the "
                                              "experiment's.")] = None,
    jobs: Annotated[int, typer.Option("--jobs", "-j", help="Runs at the same time, each in "
                                      "its own process.")] = 1,
    out_root: Annotated[Path | None, typer.Option("--out", help="Parent of the timestamped "
                                                  "experiment folders (default "
                                                  "runs/<name>).")] = None,
    fresh: Annotated[bool, typer.Option("--fresh", help="Start a new folder instead of "
                                        "resuming an unfinished one.")] = False,
    list_presets: Annotated[bool, typer.Option("--list", help="List the presets.")] = False,
    show: Annotated[bool, typer.Option("--show", help="Print the preset's TOML and "
                                       "exit.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Validate and list the runs, each "
                                          "as its fedmc run command; run nothing.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bar.")] = False,
) -> None:
    """Run a reproducible experiment: a grid of data sets x methods x settings x seeds.

    Writes runs/<name>/<timestamp>/ with every run's files and a report.md with figures and
    tables. Started again after an interruption, the same command finishes only the missing
    runs in the same folder.
    """
    from fedmc.experiments import config as cfg

    if list_presets:
        _list_presets()
        return
    if (name is None) == (config is None):
        raise ConfigError("give a preset NAME or --config FILE (see fedmc experiment --list)")
    if show:
        if name is None:
            raise ConfigError("--show prints a preset; your --config file is already yours")
        typer.echo(cfg.preset_text(name), nl=False)
        return
    if out_root is not None and out_root.exists() and not out_root.is_dir():
        raise ConfigError(f"--out {out_root} is a file: give the folder the experiment "
                          "folders go in")
    base = (cfg.load_preset(name) if name is not None  # else a --config is given
            else cfg.load_experiment(cast(Path, config)))
    experiment_config = cfg.with_overrides(base, dataset, seeds)
    if dry_run:
        _dry_run(experiment_config)
        return
    from fedmc.experiments.session import run_experiment

    result = run_experiment(experiment_config, root=out_root, jobs=jobs, fresh=fresh,
                            console=err, quiet=quiet)
    verb = "resumed" if result.resumed else "made"
    ran = len(result.outcome.seconds)
    typer.echo(f"{verb} {result.folder}: ran {ran} of {len(result.expansion.runs)} runs",
               err=True)
    for note in result.expansion.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(str(result.report))


def _list_presets() -> None:
    from fedmc.experiments.config import load_preset, preset_names

    table = Table(show_header=True, header_style="bold")
    table.add_column("preset")
    table.add_column("what it reproduces")
    for preset in preset_names():
        table.add_row(preset, load_preset(preset).title)
    out.print(table)


def _dry_run(experiment_config: ExperimentConfig) -> None:
    from fedmc.cli.options import command_words, typed_of
    from fedmc.experiments.expand import expand

    expansion = expand(experiment_config)
    for spec in expansion.runs:
        command = shlex.join(["fedmc", "run", *command_words(typed_of(spec.run_options()))])
        typer.echo(f"{spec.run_id}  {command}")
    for note in expansion.notes:
        typer.echo(f"note: {note}", err=True)
    typer.echo(f"{len(expansion.runs)} runs, hash {expansion.digest[:12]}", err=True)


def plot(
    run_dirs: Annotated[list[Path], typer.Argument(help="Run folders (fedmc run --out) or "
                                                   "experiment folders.")],
    out_file: Annotated[Path, typer.Option("--out", help="The PNG to write.")] = Path(
        "plot.png"),
    y: Annotated[list[str] | None, typer.Option("--y", help="History column, one panel each "
                                                "(repeatable; default objective and "
                                                "test_rmse).")] = None,
    x: Annotated[str, typer.Option("--x", help="round | seconds.")] = "round",
    log: Annotated[list[str] | None, typer.Option("--log", help="Column drawn on a log scale "
                                                  "(repeatable; default objective, "
                                                  "loss).")] = None,
    title: Annotated[str | None, typer.Option(help="Figure title.")] = None,
) -> None:
    """Re-plot and overlay finished runs: mean over seeds with a min-max band."""
    from fedmc.experiments.overlay import plot_runs

    if out_file.is_dir():
        raise ConfigError(f"--out {out_file} is a folder; give the PNG file to write "
                          f"(e.g. {out_file / 'plot.png'})")
    typer.echo(str(plot_runs(run_dirs, out_file, y, x, log, title)))


def register(app: typer.Typer) -> None:
    """Add ``experiment`` and ``plot`` to the ``fedmc`` app."""
    app.command("experiment")(experiment)
    app.command("plot")(plot)
