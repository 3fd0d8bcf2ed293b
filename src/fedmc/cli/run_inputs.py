"""What ``fedmc evaluate`` and ``fedmc recommend`` read besides the model: the run folder (a
search folder stands for its best run) and the held-out users (the run's own split, or a file
of training ratings and one of held-out ratings).

Heavy modules are imported inside the functions: the commands' ``--help`` loads none of them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import typer

from fedmc.errors import ConfigError, DataError

if TYPE_CHECKING:
    from fedmc.model import FactorModel
    from fedmc.run.evaluation import HeldOut

SEARCH_MARKS = ("best.json", "study.db")
"""Files of a ``fedmc tune`` output folder that no run folder holds."""


def run_folder(path: Path) -> Path:
    """``path`` itself, or for a search folder (``fedmc tune --out DIR``) its best run,
    ``DIR/best``, said in one line on standard error.

    Raises
    ------
    DataError
        A search folder without its best run (a search that did not finish).
    """
    if (path / "model.npz").exists() or not any((path / m).exists() for m in SEARCH_MARKS):
        return path
    best = path / "best"
    if not (best / "model.npz").exists():
        raise DataError(f"a search folder without its best run: {best} holds no model (did "
                        "the search finish?)", path)
    typer.echo(f"{path} is a search (fedmc tune): using its best run, {best}", err=True)
    return best


def check_files(train: Path | None, test: Path | None) -> None:
    """Refuse one of ``--train`` and ``--test`` without the other (before any work)."""
    if (train is None) != (test is None):
        raise ConfigError("give --train and --test together (or neither: the run's own split)")


def held_out_users(model: FactorModel, run_dir: Path, train: Path | None, test: Path | None,
                   columns: str | None) -> tuple[HeldOut, dict[str, Any]]:
    """The users to evaluate or list: the run's own split (neither file), or the users of
    ``test`` folded in from their ratings in ``train``; and where they came from (for a
    report).

    ``train`` and ``test`` come together (:func:`check_files`).
    """
    from fedmc.cli.options import parse_columns
    from fedmc.data.loaders import load_ratings_file
    from fedmc.run.evaluation import held_out_files, held_out_split

    if train is None or test is None:
        return held_out_split(model, run_data(run_dir)), {"source": "split"}
    names = parse_columns(columns) if columns else ()
    cols = cast(tuple[str | int, str | int, str | int] | None,  # three names, or none
                tuple(int(c) if c.isdigit() else c for c in names) or None)
    data = run_data(run_dir) if (run_dir / "config.json").exists() else {}
    held = held_out_files(model, load_ratings_file(train, columns=cols),
                          load_ratings_file(test, columns=cols),
                          bool(data.get("implicit")) or model.implicit,
                          data.get("implicit_threshold"))
    return held, {"source": "files", "train": str(train), "test": str(test)}


def run_data(run_dir: Path) -> dict:
    """The ``data`` settings of the run's ``config.json``."""
    path = run_dir / "config.json"
    try:
        config = json.loads(path.read_text())
    except FileNotFoundError:
        raise DataError("no config.json here: not a run folder (or give --train and --test)",
                        run_dir) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"cannot read the run's config.json: {exc}", path) from None
    data = config.get("data") if isinstance(config, dict) else None
    if not isinstance(data, dict):
        raise DataError("config.json has no data settings", path)
    return data
