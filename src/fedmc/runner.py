"""One complete run: data, algorithm, engine, and the files of the run contract.

``--out DIR`` receives ``config.json`` (every resolved setting, seed, versions),
``history.csv`` (one row per evaluated round) and ``summary.json`` (final metrics, seconds,
peak memory); a factor-model run adds ``model.npz`` and ``model.json`` (:mod:`fedmc.model`).
Files are written only after the run succeeded, each atomically, so a failed or
interrupted run leaves no partial file behind.
"""

from __future__ import annotations

import platform
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numba
import numpy as np
import scipy
from pydantic import BaseModel, ConfigDict, Field

import fedmc
from fedmc import precompile
from fedmc.algorithms import get_algorithm
from fedmc.core.compile_time import compile_seconds
from fedmc.core.kernels import use_generic_kernels
from fedmc.data import FederatedData
from fedmc.errors import ConfigError
from fedmc.estimator import Estimator, FactorPredictions
from fedmc.files import strict_json, write_atomic
from fedmc.model import FactorModel
from fedmc.pipeline import DataSettings, federated_data, implicit_params, load_boolean_data
from fedmc.sim.history import History
from fedmc.sim.loop import RoundCallback
from fedmc.sim.sampling import SamplingKind


class RunSettings(BaseModel):
    """Everything that defines a run besides the data and the algorithm's own parameters."""

    model_config = ConfigDict(extra="forbid")

    algorithm: str = "fedmc-admm"
    rounds: int = Field(100, ge=0)
    active: int | None = Field(10, ge=1, description="clients per round (uniform sampling)")
    sampling: SamplingKind = "uniform"
    participation: float | None = Field(
        None, gt=0, le=1, description="p_i of every client for Bernoulli sampling"
    )
    dropout: float = Field(0.0, ge=0, lt=1, description="share of drawn clients that drop out")
    eval_every: int = Field(1, ge=1)
    seed: int = 0
    user_dp_epsilon: float | None = Field(None, gt=0, description="user-level DP budget")
    user_dp_delta: float = Field(1e-6, gt=0, lt=1, description="delta of the DP budget")
    user_dp_noise: float | None = Field(None, ge=0, description="DP noise / clip")
    user_dp_clip: float | None = Field(None, gt=0, description="L2 bound of one upload")
    user_dp_setup_scale: float = Field(1.0, gt=0, description="set-up noise / round noise")
    user_dp_setup_clip: float | None = Field(None, gt=0, description="L2 bound of a set-up "
                                             "upload (default: user_dp_clip)")
    ranking_k: int | None = Field(
        None, ge=1, description="cut-off K of the ranking metrics added after training"
    )
    save_user_factors: bool = Field(
        False, description="save U, raw user ids and rated items with the model (simulation)"
    )
    defaulted: list[str] = Field(
        default_factory=list,
        description="options taken from the algorithm's protocol (fedmc.algorithms.protocols)",
    )


@dataclass
class RunResult:
    """What a run produced; ``artifact`` is the saved model of a factor-model run."""

    model: Estimator
    data: FederatedData | Any
    history: History
    summary: dict[str, Any]
    config: dict[str, Any]
    artifact: FactorModel | None = None


def execute(
    run: RunSettings,
    data_settings: DataSettings,
    params: dict[str, Any],
    callback: RoundCallback | None = None,
    progress_download: bool = False,
    kernels: Literal["specialized", "auto"] = "specialized",
) -> RunResult:
    """Load data, build the algorithm, run it; nothing is written here.

    A factor model's run also evaluates its top-``ranking_k`` lists once training is over (the
    columns are added to the last history row, :mod:`fedmc.core.ranking`) and builds the model
    artifact (``RunResult.artifact``; user factors only with ``save_user_factors``).

    ``kernels="auto"`` runs a rank whose specialized kernels are not compiled yet on the
    generic kernels instead of compiling them first (:mod:`fedmc.precompile`; the caller may
    then compile them in the background: ``RunResult.config["kernels"]`` says which ran).
    """
    started = time.perf_counter()
    compiled_before = compile_seconds()
    algo_cls = get_algorithm(run.algorithm)
    params = implicit_params(algo_cls.Config, params, data_settings)
    cfg = algo_cls.Config(**params)  # validate parameters before any loading
    factor_model = issubclass(algo_cls, FactorPredictions)
    if not factor_model and (run.ranking_k is not None or run.save_user_factors):
        raise ConfigError(f"--ranking-k and --save-user-factors need a factor model; "
                          f"{run.algorithm} is not one")
    width = precompile.token_width(algo_cls, cfg)
    generic = (kernels == "auto" and width is not None
               and not precompile.is_compiled(run.algorithm, width))
    if width is not None:
        use_generic_kernels(width, generic)
    settings = {**run.model_dump(), "random_state": run.seed}  # the estimator's run params
    dp_keys = ("user_dp_epsilon", "user_dp_noise", "user_dp_clip")
    if "user_dp_clip" not in algo_cls.run_params and any(settings[k] is not None
                                                         for k in dp_keys):
        raise ConfigError(f"user-level DP applies to federated algorithms; "
                          f"{run.algorithm} is not one")
    model = algo_cls(**cfg.model_dump(),
                     **{k: v for k, v in settings.items() if k in algo_cls.run_params})
    if algo_cls.data_kind == "boolean":
        data = load_boolean_data(data_settings)
        stats = {"rows": data.shape[0], "columns": data.shape[1], "density": data.density}
    else:
        data, notes = federated_data(data_settings, progress=progress_download)
        stats = {**notes,
            "users": data.n_users,
            "items": data.n_items,
            "ratings": data.train.nnz + data.test.nnz,
            "train_ratings": data.train.nnz,
            "test_ratings": data.test.nnz,
        }
    load_seconds = time.perf_counter() - started
    model.fit_with_progress(data, callback)
    if width is not None and not generic:
        precompile.mark_compiled(run.algorithm, width)
    history = model.history_
    if run.ranking_k is not None:
        history.rows[-1].update(model.ranking_metrics(data, run.ranking_k))
    artifact = None
    if factor_model:
        artifact = FactorModel.from_estimator(model, data if run.save_user_factors else None)
    final = history.rows[-1]
    summary = {
        **{k: v for k, v in final.items()},
        "data_seconds": load_seconds,
        "train_seconds": final["seconds"],
        "compile_seconds": compile_seconds() - compiled_before,
        "total_seconds": time.perf_counter() - started,
        "peak_memory_mb": peak_memory_mb(),
    }
    config = {
        "algorithm": run.algorithm,
        "params": cfg.model_dump(mode="json"),
        "run": run.model_dump(mode="json"),
        "data": {**data_settings.model_dump(mode="json"), **stats,
                 "normalizer": vars(data.normalizer) if hasattr(data, "normalizer") else None},
        "versions": versions(),
        "kernels": "generic" if generic else "specialized",
    }
    return RunResult(model, data, history, summary, config, artifact)


def peak_memory_mb() -> float:
    """Peak resident memory of this process in MiB."""
    kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kb / 1024 if sys.platform != "darwin" else kb / 2**20


def versions() -> dict[str, str]:
    """Versions of what produced a result."""
    return {
        "fedmc": fedmc.__version__,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "scipy": scipy.__version__,
        "numba": numba.__version__,
        "machine": platform.machine(),
    }


def write_outputs(out: Path, result: RunResult) -> None:
    """Write the files of the run contract into ``out``, each atomically (JSON strictly: an
    undefined metric is ``null``)."""
    out.mkdir(parents=True, exist_ok=True)
    write_atomic(out / "config.json", strict_json(result.config))
    write_atomic(out / "history.csv", result.history.csv_text())
    write_atomic(out / "summary.json", strict_json(result.summary))
    if result.artifact is not None:  # model.npz + model.json (fedmc.model.store)
        result.artifact.save(out)
