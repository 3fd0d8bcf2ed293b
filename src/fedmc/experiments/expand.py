"""Expansion of an experiment file into runs with stable ids, validated before anything runs.

Each run gets an id built from its labels (``ml-1m__fedmc-admm__inner=5__s0``) that does not
depend on the order of the grid, and the options ``fedmc run`` would be given for it
(:class:`fedmc.run.options.RunOptions`: the file's ``[run]`` and ``[data]`` tables merged, the
algorithm's parameters); :func:`fedmc.run.settings.resolve` chooses the rest, as for ``fedmc
run``, so each run is the ``fedmc run`` command :func:`fedmc.cli.options.run_command` writes
for it. The hash of all runs names the expanded experiment: a folder made for the same hash
can be resumed.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from fedmc.errors import ConfigError, FedMCError
from fedmc.experiments.config import DatasetEntry, ExperimentConfig, SettingEntry, facet_text
from fedmc.run.options import RunOptions

SECTIONS = ("params", "run", "data")
NOT_IN_A_FILE = ("algorithm", "params", "seed")
"""The options of ``fedmc run`` an experiment file gives elsewhere: a method's ``algorithm``
and ``params``, the seeds."""
BASE_FACETS = ("dataset", "method", "setting", "seed")
MAX_ERRORS = 5
FILE_FIELDS = ("ratings", "binary")


@dataclass(frozen=True)
class PlannedRun:
    """One run of an experiment.

    Attributes
    ----------
    run_id
        Stable, unique name; the run's folder.
    algorithm
        Registered algorithm name.
    params
        Algorithm parameters the file gives.
    options
        The other options of ``fedmc run`` the file gives (fields of
        :class:`~fedmc.run.options.RunOptions` by name, the seed included):
        :func:`fedmc.run.settings.resolve` chooses the rest.
    facets
        What the report groups by: ``dataset``, ``method``, ``setting``, ``seed`` and one entry
        per grid key.
    """

    run_id: str
    algorithm: str
    params: dict[str, Any]
    options: dict[str, Any]
    facets: dict[str, Any]

    def run_options(self) -> RunOptions:
        """What this run asks of ``fedmc run``.

        Raises
        ------
        pydantic.ValidationError
            A value an option refuses, or a name that is no option.
        """
        return RunOptions(algorithm=self.algorithm, params=self.params, **self.options)


@dataclass
class Expansion:
    """The runs of an experiment, notes about substituted or skipped data sets, and the hash."""

    runs: list[PlannedRun]
    notes: list[str] = field(default_factory=list)

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON of every run: equal hashes, equal runs."""
        text = json.dumps([asdict(r) for r in self.runs], sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest()

    def grid_keys(self) -> list[str]:
        """Facets that come from the grid."""
        return [k for k in self.runs[0].facets if k not in BASE_FACETS]

    def varied(self) -> list[str]:
        """Facets (besides ``seed``) that take more than one value, in facet order.

        ``setting`` is left out when it only spells out the grid point (no named settings).
        """
        def distinct(keys: list[str]) -> int:
            return len({tuple(facet_text(r.facets[k]) for k in keys) for r in self.runs})

        keys = [k for k in self.runs[0].facets if k != "seed"]
        out = [k for k in keys if distinct([k]) > 1]
        grid = self.grid_keys()
        if grid and "setting" in out and distinct(["setting"]) == distinct(grid):
            out.remove("setting")
        return out


def expand(config: ExperimentConfig, data_dir: str | Path | None = None) -> Expansion:
    """All runs of ``config``, every one validated; raise :class:`ConfigError` otherwise.

    Parameters
    ----------
    config
        The experiment.
    data_dir
        The data folder (else ``$FEDMC_DATA``, else the user cache): where optional data sets
        are looked for and what ``{data}`` stands for; when given, every run reads from it.
    """
    from fedmc.data.registry import resolve_data_dir

    root = resolve_data_dir(data_dir)
    notes: list[str] = []
    datasets = []
    for entry in config.datasets:
        resolved = _resolve_dataset(entry, config.data, root, notes)
        if resolved is not None:
            datasets.append(resolved)
    if not datasets:
        raise ConfigError(f"{config.name}: none of its data sets is present in {root}")
    settings = _settings(config)
    runs = []
    for (label, entry, data_fields), method, (setting, grid_facets), seed in itertools.product(
        datasets, config.methods, settings, config.seed_list
    ):
        data = {**config.data, **method.data, **entry.data, **setting.data, **data_fields}
        data = {k: _fill(v, root) for k, v in data.items()}
        if data_dir is not None:
            data.setdefault("data_dir", str(root))
        run = {**config.run, **method.run, **entry.run, **setting.run}
        facets = {"dataset": label, "method": method.label, "setting": setting.label,
                  **grid_facets, "seed": seed}
        runs.append(PlannedRun(
            run_id=_run_id(label, method.label, setting.label, seed),
            algorithm=method.algorithm,
            params={**method.params, **entry.params, **setting.params},
            options={**_options(data, "data"), **_options(run, "run"), "seed": seed},
            facets=facets,
        ))
    _check_unique(runs)
    validate(runs, config.name)
    return Expansion(runs, notes)


def _resolve_dataset(
    entry: DatasetEntry, base_data: dict[str, Any], root: Path, notes: list[str]
) -> tuple[str, DatasetEntry, dict[str, Any]] | None:
    """``(label, entry, data fields)`` of a data set, its fallback, or ``None`` to skip it."""
    data = {**base_data, **entry.data}
    names_file = any(data.get(k) is not None for k in FILE_FIELDS)
    name = entry.dataset or (None if names_file else entry.name)
    fields = {"dataset": name}
    if not (entry.optional or entry.fallback) or _present(name, data, root):
        return entry.name, entry, fields
    where = f"{root}" if name else "its file"
    if entry.fallback:
        notes.append(
            f"{entry.fallback} stands in for {entry.name}: {entry.name} is not in {where}."
        )
        return entry.fallback, entry, {"dataset": entry.fallback}
    notes.append(f"{entry.name} was skipped: it is not in {where}.")
    return None


def generated_names() -> tuple[str, ...]:
    """Data sets that are generated, not read: always present."""
    from fedmc.data.boolean import SYNTHETIC
    from fedmc.data.registry import SYNTHETIC_NAMES

    return (*SYNTHETIC_NAMES, SYNTHETIC)


def _present(name: str | None, data: dict[str, Any], root: Path) -> bool:
    from fedmc.data.registry import dataset_files

    if name is None:
        return all(Path(_fill(data[k], root)).exists() for k in FILE_FIELDS if data.get(k))
    if name in generated_names():
        return True
    try:
        return bool(dataset_files(name, root))
    except FedMCError:
        return False


def _fill(value: Any, root: Path) -> Any:
    return value.replace("{data}", str(root)) if isinstance(value, str) else value


def _settings(config: ExperimentConfig) -> list[tuple[SettingEntry, dict[str, Any]]]:
    """Named settings x grid points, each with its grid facets."""
    base = config.settings or [SettingEntry(label="")]
    if not config.grid:
        return [(s, {}) for s in base]
    keys = list(config.grid)
    parsed = [_grid_key(k) for k in keys]
    facet_names = [name for _, name in parsed]
    if len(set(facet_names)) != len(facet_names):
        raise ConfigError(f"{config.name}: grid keys must end in distinct names: {keys}")
    out = []
    for setting, values in itertools.product(base, itertools.product(*config.grid.values())):
        over: dict[str, dict[str, Any]] = {s: dict(getattr(setting, s)) for s in SECTIONS}
        for (section, name), value in zip(parsed, values, strict=True):
            over[section][name] = value
        point = ", ".join(f"{n}={facet_text(v)}" for n, v in zip(facet_names, values,
                                                                 strict=True))
        label = f"{setting.label}, {point}" if setting.label else point
        out.append((SettingEntry(label=label, **over), dict(zip(facet_names, values,
                                                                strict=True))))
    return out


def _grid_key(key: str) -> tuple[str, str]:
    """``"run.dropout"`` -> ``("run", "dropout")``; a bare name is an algorithm parameter."""
    section, dot, name = key.partition(".")
    if not dot:
        return "params", key
    if section not in SECTIONS or not name:
        raise ConfigError(f"grid key {key!r}: use NAME, params.NAME, run.NAME or data.NAME")
    return section, name


def slug(text: str) -> str:
    """A file-name-safe form of a label: ``FedMC-ADMM`` -> ``fedmc-admm``."""
    text = re.sub(r"[^a-z0-9.=+-]+", "_", text.lower().replace(", ", "_"))
    return text.strip("_") or "x"


def _run_id(dataset: str, method: str, setting: str, seed: int) -> str:
    parts = [dataset, method, setting] if setting else [dataset, method]
    return "__".join(slug(p) for p in parts) + f"__s{seed}"


def _check_unique(runs: list[PlannedRun]) -> None:
    seen: dict[str, PlannedRun] = {}
    for r in runs:
        if r.run_id in seen:
            raise ConfigError(
                f"two runs map to the folder {r.run_id}: make the labels differ by more than "
                "punctuation or case"
            )
        seen[r.run_id] = r


def validate(runs: list[PlannedRun], name: str) -> None:
    """Resolve every run's options as ``fedmc run`` does (:func:`fedmc.run.settings.resolve`:
    the algorithm's paper settings, the sampling, the DP rules) and check its algorithm's
    parameters; report every distinct error.

    Nothing is loaded or run: this checks algorithm names, parameter names and values, the
    options and the rules between them, and data-set names.
    """
    from fedmc.algorithms.registry import spec
    from fedmc.data.registry import dataset_names
    from fedmc.run.settings import resolve

    known_sets = {*dataset_names(), *generated_names()}
    errors: dict[str, None] = {}
    for r in runs:
        method = f"{r.facets['method']} ({r.algorithm})"
        where = f"{method} on {r.facets['dataset']}"
        try:
            spec(r.algorithm)
        except FedMCError as exc:  # an unknown algorithm: its settings are not checked
            errors[f"{method}: {exc}"] = None
            continue
        try:
            resolve(r.run_options())
        except ValidationError as exc:
            errors[f"{where}: {validation_text(exc, r.algorithm)}"] = None
        except (FedMCError, ValueError) as exc:
            errors[f"{where}: {exc}"] = None
        dataset = r.options.get("dataset")
        if dataset is not None and dataset not in known_sets:
            errors[f"unknown data set {dataset!r}; known: {', '.join(sorted(known_sets))}"] = None
    if errors:
        shown = list(errors)[:MAX_ERRORS]
        more = len(errors) - len(shown)
        raise ConfigError(f"{name}: " + "; ".join(shown) + (f"; and {more} more" if more else ""))


def validation_text(exc: ValidationError, algorithm: str) -> str:
    """The first error of ``exc`` in one line: the setting or ``algorithm``'s parameter and
    what is wrong, or an unknown parameter with the known ones."""
    from fedmc.algorithms.registry import spec

    first = exc.errors()[0]
    loc = ".".join(str(x) for x in first["loc"])
    config = spec(algorithm).Config
    what = "parameter" if exc.title == config.__name__ else "setting"
    if first["type"] == "extra_forbidden":
        return f"unknown {what} {loc!r} (known: {', '.join(config.model_fields)})"
    msg = first["msg"].removeprefix("Value error, ")
    return f"{what} {loc}: {msg}" if loc else f"{what}: {msg}"


def _options(table: dict[str, Any], section: str) -> dict[str, Any]:
    """A ``[run]`` or ``[data]`` table of options of ``fedmc run``, checked by name.

    Raises
    ------
    ConfigError
        A name that is no option of ``fedmc run`` (or one the file gives elsewhere).
    """
    known = [n for n in RunOptions.model_fields if n not in NOT_IN_A_FILE]
    for key in table:
        if key not in known:
            raise ConfigError(f"unknown {section} setting {key!r}: an experiment's [run] and "
                              f"[data] take the options of fedmc run by name "
                              f"({', '.join(known)})")
    return table
