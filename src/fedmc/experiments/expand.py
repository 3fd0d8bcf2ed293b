"""Expansion of an experiment file into runs with stable ids, validated before anything runs.

Each run gets an id built from its labels (``ml-1m__fedmc-admm__inner=5__s0``) that does not
depend on the order of the grid, and a complete set of resolved settings (the algorithm's
parameters, :class:`fedmc.federation.settings.Schedule`, :class:`fedmc.run.data.DataSettings`). The
hash of all runs names the expanded experiment: a folder made for the same hash can be
resumed.
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

SECTIONS = ("params", "run", "data")
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
        Algorithm parameters (the algorithm's defaults fill the rest).
    run
        Fields of :class:`fedmc.federation.settings.Schedule` (seed included) and the spec's
        own (:data:`fedmc.run.spec.OWN_RUN_SETTINGS`: ``ranking_k``, ``save_user_factors``,
        ``backend``).
    data
        Keyword arguments of :class:`fedmc.run.data.DataSettings` (seed included).
    facets
        What the report groups by: ``dataset``, ``method``, ``setting``, ``seed`` and one entry
        per grid key.
    """

    run_id: str
    algorithm: str
    params: dict[str, Any]
    run: dict[str, Any]
    data: dict[str, Any]
    facets: dict[str, Any]


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
        run = {**config.run, **method.run, **entry.run, **setting.run, "seed": seed}
        if run.get("active") == "all":
            run["active"] = None
        data = {**config.data, **method.data, **entry.data, **setting.data, **data_fields}
        data = {k: _fill(v, root) for k, v in data.items()} | {"seed": seed}
        if data_dir is not None:
            data.setdefault("data_dir", str(root))
        facets = {"dataset": label, "method": method.label, "setting": setting.label,
                  **grid_facets, "seed": seed}
        runs.append(PlannedRun(
            run_id=_run_id(label, method.label, setting.label, seed),
            algorithm=method.algorithm,
            params={**method.params, **entry.params, **setting.params},
            run=run,
            data=data,
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
    """Build every run's settings and algorithm configuration; report every distinct error.

    Nothing is loaded or run: this checks algorithm names, parameter names and values, run
    and data settings, and data-set names.
    """
    from fedmc.algorithms.registry import spec
    from fedmc.data.registry import dataset_names
    from fedmc.federation.settings import Backend, Schedule
    from fedmc.run.data import DataSettings
    from fedmc.run.spec import OWN_RUN_SETTINGS, RunSpec

    known_sets = {*dataset_names(), *generated_names()}
    errors: dict[str, None] = {}
    for r in runs:
        method = f"{r.facets['method']} ({r.algorithm})"
        where = f"{method} on {r.facets['dataset']}"
        try:
            algo = spec(r.algorithm)
        except FedMCError as exc:
            errors[f"{method}: {exc}"] = None
            continue
        checks = (
            ("parameter", algo.Config, r.params),
            ("run setting", Schedule, {k: v for k, v in r.run.items()
                                       if k not in OWN_RUN_SETTINGS}),
            ("backend setting", Backend, _table(r.run.get("backend", {}))),
            ("data setting", DataSettings, r.data),
        )
        failed = False
        for what, model, values in checks:
            place = f"on {r.facets['dataset']}" if model is DataSettings else where
            try:
                model(**values)
            except ValidationError as exc:
                errors[f"{place}: {validation_text(exc, what, list(model.model_fields))}"] = None
                failed = True
            except (FedMCError, ValueError) as exc:
                errors[f"{where}: {exc}"] = None
                failed = True
        if not failed:  # the rules between settings (a DP run's normalizer)
            try:
                RunSpec.of(r.algorithm, r.params, r.data, r.run)
            except ValidationError as exc:
                errors[f"{where}: {validation_text(exc, 'run', [])}"] = None
            except ValueError as exc:
                errors[f"{where}: {exc}"] = None
        dataset = r.data.get("dataset")
        if dataset is not None and dataset not in known_sets:
            errors[f"unknown data set {dataset!r}; known: {', '.join(sorted(known_sets))}"] = None
    if errors:
        shown = list(errors)[:MAX_ERRORS]
        more = len(errors) - len(shown)
        raise ConfigError(f"{name}: " + "; ".join(shown) + (f"; and {more} more" if more else ""))


def validation_text(exc: ValidationError, what: str, known: list[str]) -> str:
    """The first error of ``exc`` in one line: ``what`` and where, or an unknown name with the
    ``known`` ones."""
    first = exc.errors()[0]
    loc = ".".join(str(x) for x in first["loc"])
    if first["type"] == "extra_forbidden":
        return f"unknown {what} {loc!r} (known: {', '.join(known)})"
    msg = first["msg"].removeprefix("Value error, ")
    return f"{what} {loc}: {msg}" if loc else f"{what}: {msg}"


def _table(value: Any) -> dict[str, Any]:
    """A run's ``backend``: a table of :class:`fedmc.federation.settings.Backend` fields.

    Raises
    ------
    ConfigError
        Anything else.
    """
    if not isinstance(value, dict):
        raise ConfigError(f"run setting backend: a table such as {{ kind = \"ray\", workers = "
                          f"2 }}, got {value!r}")
    return value
