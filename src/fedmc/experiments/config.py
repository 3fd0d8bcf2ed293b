"""The experiment file: a TOML grid of data sets x methods x settings x seeds.

An experiment file (a packaged preset, or the user's own copy given with ``--config``) says
which runs to make and how to report them::

    name = "my-experiment"
    title = "FedMC-ADMM against FedMAvg"
    seeds = 3                          # seeds 0, 1, 2; or a list such as [0, 7]

    [run]                              # fedmc.federation.settings.Schedule of every run
    rounds = 100
    active = 10                        # or "all": every client in every round
    [data]                             # fedmc.run.data.DataSettings of every run
    clients = 100

    [[datasets]]
    name = "ml-1m"
    params = { rank = 5 }              # algorithm parameters on this data set
    [[datasets]]
    name = "netflix"
    fallback = "synthetic-netflix"     # used when the netflix files are absent

    [[methods]]
    label = "FedMC-ADMM"
    algorithm = "fedmc-admm"
    params = { inner = 10 }

    [grid]                             # cartesian product of settings
    inner = [5, 10]                    # an algorithm parameter
    "run.dropout" = [0.0, 0.5]         # a Schedule field; "data.X" a DataSettings field

    [[plots]]
    y = "test_rmse"                    # a history column against x (default: round)
    [[tables]]
    metrics = ["test_rmse", "test_mae"]

Every data set, method and setting may carry ``params``, ``run`` and ``data`` tables; a run's
values are merged in the order: top-level ``[run]``/``[data]``, method, data set, setting (the
most specific wins). String values in ``data`` may use ``{data}`` for the data folder
(``--data-dir``, ``$FEDMC_DATA`` or ``~/.cache/fedmc``).
"""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from fedmc.errors import ConfigError

Scalar = str | int | float | bool
PRESET_PACKAGE = "fedmc.experiments"
PRESET_FOLDER = "presets"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Overrides(_Strict):
    """Algorithm parameters, run settings and data settings that an entry sets."""

    params: dict[str, Any] = Field(default_factory=dict)
    run: dict[str, Any] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)


class DatasetEntry(Overrides):
    """One data set of the grid.

    ``name`` is the label in reports and, unless ``dataset`` is given or ``data`` names a file
    (``ratings`` or ``binary``), the named data set too.
    """

    name: str
    dataset: str | None = None
    optional: bool = Field(False, description="skip this data set when its files are absent")
    fallback: str | None = Field(None, description="data set used when the files are absent")


class MethodEntry(Overrides):
    """One algorithm of the grid, under a label (a method may appear twice, differently set)."""

    label: str
    algorithm: str


class SettingEntry(Overrides):
    """One named variant of the settings, applied to every method and data set."""

    label: str


class PlotSpec(_Strict):
    """One panel of the report's figures.

    ``kind = "curve"``: the history column ``y`` against the history column ``x`` (``round`` or
    ``seconds``), one line per series. ``kind = "final"``: the final value of ``y`` (from
    ``summary.json``) against ``x``, a grid facet or a summary value (``epsilon``), one line per
    series. Lines are the mean over seeds with a min-max band.
    """

    kind: Literal["curve", "final"] = "curve"
    y: str
    x: str = "round"
    title: str | None = None
    xlabel: str | None = None
    ylabel: str | None = None
    logx: bool = False
    logy: bool = False
    series: list[str] | None = Field(
        None, description="facets that make a line (default: the varied ones besides x)"
    )


class TableSpec(_Strict):
    """A table of final metrics, mean +- std over seeds, pivoted like the paper's tables.

    ``rows`` and ``columns`` name facets (``dataset``, ``method``, ``setting``, a grid key) or
    ``metric``; a varied facet named in neither is added to the rows. ``order`` fixes the order
    of a facet's values (values missing from our runs but present in ``[[paper]]`` become
    columns of the paper's numbers only).
    """

    title: str = "Final metrics"
    metrics: list[str] = Field(min_length=1)
    rows: list[str] = Field(default_factory=lambda: ["dataset", "setting", "method"])
    columns: list[str] = Field(default_factory=lambda: ["metric"])
    order: dict[str, list[Scalar]] = Field(default_factory=dict)
    digits: int = Field(4, ge=0, le=10)

    @model_validator(mode="after")
    def _disjoint(self) -> TableSpec:
        both = set(self.rows) & set(self.columns)
        if both:
            raise ValueError(f"{sorted(both)} cannot be both rows and columns")
        return self


class PaperValue(BaseModel):
    """A published number: ``value`` as printed, ``metric``, and the facets it belongs to."""

    model_config = ConfigDict(extra="allow")

    value: str
    metric: str

    def facets(self) -> dict[str, str]:
        """The facets this value is matched on, as strings."""
        return {k: facet_text(v) for k, v in (self.model_extra or {}).items()}


class ExperimentConfig(_Strict):
    """A whole experiment file (see the module docstring)."""

    name: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    title: str
    description: str = ""
    reference: str = Field("", description="the paper and figure or table reproduced")
    seeds: int | list[int] = 3
    run: dict[str, Any] = Field(default_factory=dict)
    data: dict[str, Any] = Field(default_factory=dict)
    datasets: list[DatasetEntry] = Field(min_length=1)
    methods: list[MethodEntry] = Field(min_length=1)
    settings: list[SettingEntry] = Field(default_factory=list)
    grid: dict[str, list[Scalar]] = Field(default_factory=dict)
    plots: list[PlotSpec] = Field(default_factory=list)
    tables: list[TableSpec] = Field(default_factory=list)
    paper: list[PaperValue] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> ExperimentConfig:
        if isinstance(self.seeds, int) and self.seeds < 1:
            raise ValueError("seeds must be at least 1")
        if isinstance(self.seeds, list) and (not self.seeds or len(set(self.seeds)) != len(
            self.seeds
        )):
            raise ValueError("seeds must be a non-empty list of distinct integers")
        for what, labels in (
            ("data set", [d.name for d in self.datasets]),
            ("method", [m.label for m in self.methods]),
            ("setting", [s.label for s in self.settings]),
        ):
            dup = sorted({x for x in labels if labels.count(x) > 1})
            if dup:
                raise ValueError(f"{what} labels must be unique; repeated: {', '.join(dup)}")
        for key, values in self.grid.items():
            if not values:
                raise ValueError(f"grid {key!r} has no values")
        return self

    @property
    def seed_list(self) -> list[int]:
        """The seeds of every (data set, method, setting)."""
        return list(range(self.seeds)) if isinstance(self.seeds, int) else list(self.seeds)


def facet_text(value: Any) -> str:
    """A facet value as text: ``0.2``, ``1e-06``, ``5``, ``ml-1m``."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return format(value, "g")
    return str(value)


def parse_experiment(text: str, origin: str) -> ExperimentConfig:
    """Parse and validate an experiment file's text; ``origin`` names it in errors."""
    try:
        raw = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{origin}: not valid TOML: {exc}") from None
    try:
        return ExperimentConfig(**raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "file"
        raise ConfigError(f"{origin}: {where}: {first['msg']}") from None


def load_experiment(path: str | Path) -> ExperimentConfig:
    """Read an experiment file."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"no experiment file {path}")
    return parse_experiment(path.read_text(), str(path))


def preset_names() -> list[str]:
    """Names of the packaged presets, sorted."""
    folder = resources.files(PRESET_PACKAGE).joinpath(PRESET_FOLDER)
    return sorted(p.name.removesuffix(".toml") for p in folder.iterdir()
                  if p.name.endswith(".toml"))


def load_preset(name: str) -> ExperimentConfig:
    """The packaged preset ``name``."""
    if name not in preset_names():
        raise ConfigError(
            f"unknown experiment {name!r}; presets: {', '.join(preset_names())} "
            "(or give your own file with --config)"
        )
    res = resources.files(PRESET_PACKAGE).joinpath(PRESET_FOLDER, f"{name}.toml")
    return parse_experiment(res.read_text(), f"preset {name}")


def preset_text(name: str) -> str:
    """The TOML text of a preset, to copy and edit."""
    load_preset(name)
    return resources.files(PRESET_PACKAGE).joinpath(PRESET_FOLDER, f"{name}.toml").read_text()


def with_overrides(
    config: ExperimentConfig, datasets: list[str] | None = None, seeds: int | None = None
) -> ExperimentConfig:
    """``config`` with its data sets replaced and/or ``seeds`` seeds (0 .. seeds-1).

    A replacement data set that the experiment lists keeps its entry (its parameters, such as
    the rank), but is no longer optional nor replaced by a fallback: it was asked for.
    """
    update: dict[str, Any] = {}
    if datasets:
        entries = {e.name: e for e in config.datasets}
        update["datasets"] = [
            entries[name].model_copy(update={"optional": False, "fallback": None})
            if name in entries else DatasetEntry(name=name)
            for name in dict.fromkeys(datasets)
        ]
    if seeds is not None:
        if seeds < 1:
            raise ConfigError(f"--seeds must be at least 1, got {seeds}")
        update["seeds"] = seeds
    return config.model_copy(update=update)
