"""The ``fedmc`` command: ``run`` one training, ``recommend`` and ``predict`` with its model,
``audit`` what a curious server learns, and ``data`` sets.

Errors in the user's input exit with status 2 and a one-line reason on stderr.
"""

from __future__ import annotations

import atexit
import gc
import os
import sys
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from fedmc.cli.audit import register as register_audit_command
from fedmc.cli.data import data_app
from fedmc.cli.evaluate import register as register_evaluate_command
from fedmc.cli.experiment import register as register_experiment_commands
from fedmc.cli.federate import register as register_federate_commands
from fedmc.cli.interrupts import Interrupted, catch_signals, signal_of, worker_running
from fedmc.cli.options import flag, in_flags, parameter_flag
from fedmc.cli.recommend import register as register_model_commands
from fedmc.cli.run import run
from fedmc.cli.tune import register as register_tune_command
from fedmc.errors import FedMCError, marked_text, printable

app = typer.Typer(
    name="fedmc",
    help="Federated matrix completion: FedMC-ADMM and friends, on real or synthetic data.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_app, name="data", help="List, describe and download data sets.")
register_experiment_commands(app)
register_model_commands(app)
register_evaluate_command(app)
err = Console(stderr=True)


def _print_version(value: bool) -> None:
    if value:
        from fedmc import __version__

        typer.echo(f"fedmc {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[bool, typer.Option("--version", callback=_print_version, is_eager=True,
                                          help="Print the version and exit.")] = False,
) -> None:
    """Federated matrix completion: FedMC-ADMM and friends, on real or synthetic data."""

app.command("run")(run)
register_federate_commands(app)
register_audit_command(app)
register_tune_command(app)


def _fail(reason: str, code: int = 2) -> None:
    """One line on stderr, exit status ``code``."""
    sys.stderr.write("fedmc: error: " + printable(" ".join(reason.split()), 2000) + "\n")
    sys.exit(code)


def _validation_message(exc: ValidationError) -> str:
    """The first error of a settings model, named by the user's flag; an unknown setting
    with the list of those there are."""
    from fedmc.algorithms.registry import specs

    first = exc.errors()[0]
    loc = [str(x) for x in first["loc"]]
    # an algorithm's Config (found by its name, not loaded) names its own parameters
    algorithm = next((e for e in specs().values()
                      if e.config.rpartition(":")[2] == exc.title), None)
    if not loc:
        where = "settings"
    else:
        where = parameter_flag(loc[-1]) if algorithm else flag(loc[-1])
    if first["type"] == "extra_forbidden":
        known = "" if algorithm is None else \
            f" (-P takes {', '.join(algorithm.Config.model_fields)})"
        return f"{where}: not a setting of {exc.title}" + known
    return f"{where}: {in_flags(marked_text(first), algorithm=algorithm is not None)}"


def main() -> None:
    """Entry point: run the app; input errors exit 2, SIGINT 130 and SIGTERM 143."""
    # The interpreter's last garbage collections would walk every object Numba and LLVM made
    # (most of a second after a run on a loaded 2-core machine): what is alive at exit is
    # left to the process's end instead (benchmarks/README.md, "Instant commands").
    atexit.register(gc.freeze)
    if len(sys.argv) <= 1:  # bare ``fedmc``: its help, and success
        sys.argv.append("--help")
    try:
        with catch_signals():
            code = app(standalone_mode=False)
    except (Interrupted, SystemError) as exc:
        stopped = signal_of(exc)
        if stopped is None:
            raise
        where = f"; its partial output is in {stopped.folder}" if stopped.folder else ""
        sys.stderr.write(f"fedmc: interrupted by {stopped.name}{where}\n")
        if worker_running():  # inside a kernel no exception reaches: the files are written
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(stopped.exit_code)
        sys.exit(stopped.exit_code)
    except FedMCError as exc:
        _fail(in_flags(exc.marked))
    except ValidationError as exc:
        _fail(_validation_message(exc))
    except typer.Abort:
        err.print("fedmc: aborted", markup=False)
        sys.exit(130)
    except Exception as exc:
        # Usage errors (unknown option, a value of the wrong type) are click's exceptions, which
        # newer typer releases vendor: recognised by their interface, not their class.
        message, code = getattr(exc, "format_message", None), getattr(exc, "exit_code", None)
        if not (callable(message) and isinstance(code, int)):
            raise
        ctx = getattr(exc, "ctx", None)
        hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
        _fail(message() + hint, code)
    sys.exit(code if isinstance(code, int) else 0)
