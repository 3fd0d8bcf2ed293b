"""A trial's score on the model as it will be used (issue 41, item 2): the published item side,
every user of the validation cut folded in from its own fitting ratings, scored on its cut:
what ``fedmc evaluate`` computes on a test split, here on the cut
(:func:`fedmc.run.evaluation.evaluate_model`). The fold-in's own settings (an algorithm's
``fold_in_space``, e.g. FedMC-ADMM's ``fold_lam``) act only there, so each trial takes the best
of them on the cut, its own as trained among them: a choice that costs no training run.

Without it a search scored the clients' own user rows (the run's ``validation_*`` columns),
which a device that folds itself in from the published model never has; the winner and
``fedmc evaluate DIR/best`` could disagree by about 1% (issue 41).
"""

from __future__ import annotations

import itertools
from dataclasses import replace
from typing import Any

import numpy as np

from fedmc.algorithms.registry import spec
from fedmc.algorithms.spec import Choice
from fedmc.core.shard import CSR
from fedmc.data import FederatedData
from fedmc.errors import ConfigError
from fedmc.federation.validation import VALIDATION
from fedmc.model import FactorModel
from fedmc.run.evaluation import HeldOut, evaluate_model


def evaluated_as(column: str) -> str | None:
    """The key of :func:`fedmc.run.evaluation.evaluate_model` that a validation ``column``
    (``validation_rmse``, ``validation_ndcg@10``, ...) is the fold-in version of; None where
    there is none (a loss, a Boolean error)."""
    name = column.removeprefix(VALIDATION)
    if name in ("rmse", "mae"):
        return f"test_{name}"
    return name if "@" in name else None


def scores_published(algorithm: str, column: str) -> bool:
    """Whether a search of ``algorithm`` scoring ``column`` scores the published model
    (:func:`published_score`): the algorithm folds users in, and the column has a fold-in
    version."""
    return spec(algorithm).fold_in is not None and evaluated_as(column) is not None


def cut_held_out(data: FederatedData, implicit: bool) -> HeldOut:
    """Every user's fitting ratings (the training ratings less the cut: what it folds in
    from) and its validation cut, on the original scale, as ``fedmc evaluate`` reads a split.

    Raises
    ------
    ConfigError
        Data without a validation cut.
    """
    if data.validation is None:
        raise ConfigError("a search scores its trials on a validation cut")
    inverse = data.normalizer.inverse
    fit, cut = (CSR(m.indptr, m.indices, inverse(m.values)) for m in (data.train,
                                                                      data.validation))
    return HeldOut(fit, cut, np.asarray(data.user_ids), implicit=implicit)


def fold_in_candidates(algorithm: str, params: dict[str, Any],
                       fold_in: dict[str, Choice]) -> list[dict[str, Any]]:
    """Every combination of the fold-in values, each as the algorithm's ``Config`` reads it
    with ``params`` (a value typed as text becomes its number); one empty combination where
    there are none.

    Raises
    ------
    ConfigError
        A combination the algorithm refuses.
    """
    config = spec(algorithm).Config
    out = []
    for values in itertools.product(*(c.values for c in fold_in.values())):
        typed = dict(zip(fold_in, values, strict=True))
        try:
            cfg = config(**{**params, **typed})
        except ValueError as err:  # pydantic's ValidationError is a ValueError
            raise ConfigError(f"fold-in settings {typed}: {err}") from None
        out.append({name: getattr(cfg, name) for name in typed})
    return out


def published_score(model: FactorModel, held: HeldOut, column: str, larger: bool,
                    fold_in: dict[str, Choice]) -> tuple[float, dict[str, Any]]:
    """``model``'s score of ``column`` with every user of ``held`` folded in, with the
    model's own fold-in settings (as trained: FedMC-ADMM's ``fold_lam`` unset is the
    training's ``lam``) and at each combination of the ``fold_in`` values; the best: its value
    and the fold-in values that gave it (none for the model's own: a choice never does worse
    than not choosing)."""
    key = evaluated_as(column)
    if key is None:
        raise ConfigError(f"{column} has no version on a folded-in model")
    k = int(key.split("@")[1]) if "@" in key else None
    candidates = [{}, *(fold_in_candidates(model.algorithm, model.params, fold_in)
                        if fold_in else [])]
    scored = [(evaluate_model(replace(model, params={**model.params, **values}), held, k)[key],
               values) for values in candidates]
    return (max if larger else min)(scored, key=lambda s: s[0])  # the first of equals
