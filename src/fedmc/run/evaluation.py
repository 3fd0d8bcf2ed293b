"""The exact evaluation of a published factor model on held-out ratings (``fedmc evaluate``).

A private run publishes its model and nothing exact about its data (``docs/privacy.md``); its
quality on held-out ratings is measured afterwards, by whoever holds them, as a separate step
whose output is not private. Every evaluated user is folded in from its own training ratings
with the algorithm's fold-in (:meth:`fedmc.algorithms.registry.AlgorithmSpec.fold_in_users`:
what the user's device computes from the published ``V``, all users at once), then its held-out
ratings are predicted (original scale, clipped as the model clips) and scored: RMSE, MAE and,
with a cut-off ``k``, the ranking metrics of :mod:`fedmc.core.ranking` (each user's top-``k``
list leaves out its training items).

:func:`held_out_split` re-creates a simulated run's own split from its ``config.json``;
:func:`held_out_files` reads a file of training ratings and one of held-out ratings by raw ids.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from fedmc.algorithms.registry import spec
from fedmc.core.factors import predict
from fedmc.core.ranking import top_k_metrics
from fedmc.core.shard import CSR
from fedmc.data.interactions import as_interactions
from fedmc.data.ratings import Ratings
from fedmc.data.vocabulary import IdVocabulary
from fedmc.errors import DataError
from fedmc.model.factor_model import FactorModel


@dataclass(frozen=True)
class HeldOut:
    """Users' training ratings (what each folds in from) and held-out ratings: two CSRs with
    one row per user in the same order, columns the model's items, values on the original
    scale; ``user_ids`` the raw id of every row; ``notes`` count what was left out (for the
    report); ``implicit``: the values are interactions (``fedmc run --implicit``), judged by
    ranking alone."""

    train: CSR
    test: CSR
    user_ids: np.ndarray
    notes: dict[str, int] = field(default_factory=dict)
    implicit: bool = False


def evaluate_model(model: FactorModel, held: HeldOut, ranking_k: int | None = None,
                   ) -> dict[str, float]:
    """Fold every user of ``held`` in and score the predictions of its held-out ratings.

    Returns
    -------
    dict
        ``test_rmse``, ``test_mae`` (original scale; not for interactions, whose predictions
        are preferences, not values), ``test_ratings`` (``test_interactions``), ``users`` (the
        rows folded in) and, with ``ranking_k``, the ranking metrics at that cut-off.
    """
    norm = model.normalizer
    tr, te = held.train, held.test
    if te.nnz == 0:
        raise DataError("there are no held-out ratings to evaluate")
    R = CSR(tr.indptr, tr.indices, norm.transform(tr.values))
    U = spec(model.algorithm).fold_in_users(model.config, model.V, R)
    out: dict[str, float] = {}
    if held.implicit:
        out["test_interactions"] = float(te.nnz)
    else:
        error = predict(U, model.V, te.rows(), te.indices, norm, model.clip) - te.values
        out.update(test_rmse=float(np.sqrt(np.mean(error**2))),
                   test_mae=float(np.mean(np.abs(error))), test_ratings=float(te.nnz))
    out["users"] = float(len(U))
    if ranking_k is not None:
        out.update(top_k_metrics(held, *model.ranking_factors(U), ranking_k))
    return out


def held_out_split(model: FactorModel, data_config: Mapping[str, Any]) -> HeldOut:
    """The split of a simulated run, re-created from its ``config.json`` ``data`` settings
    (same source, split, seed and partition), with the ratings on the original scale."""
    from fedmc.run.data import DataSettings, federated_data

    fields = {k: v for k, v in data_config.items() if k in DataSettings.model_fields}
    # every training rating a user holds is folded in, a validation cut's too
    settings = DataSettings(**{**fields, "normalize": "none", "rating_scale": None,
                               "validation_fraction": 0.0})
    data, notes = federated_data(settings)
    if not np.array_equal(np.asarray(data.item_ids), np.asarray(model.item_ids)):
        raise DataError("the run's data no longer give the model's items (a changed ratings "
                        "file?); evaluate with --train and --test files")
    return HeldOut(data.train, data.test, np.asarray(data.user_ids),
                   {k: int(v) for k, v in notes.items()},
                   settings.implicit)


def held_out_files(model: FactorModel, train: Ratings, test: Ratings,
                   implicit: bool = False, threshold: float | None = None) -> HeldOut:
    """The users of ``test`` (raw ids), their training ratings from ``train`` and their
    held-out ratings, by the model's items.

    Ratings of items the model does not know cannot be predicted or folded in: they are left
    out and counted in ``notes`` (``test_dropped_unknown_item``, ``train_dropped_unknown_item``);
    training ratings of users without held-out ratings are not needed and are left out too. A
    held-out user without training ratings is folded in from none (the model's item biases).
    With ``implicit`` both files are read as interactions, as the run read its data
    (:func:`fedmc.data.interactions.as_interactions` with ``threshold``).
    """
    if implicit:
        train, test = as_interactions(train, threshold), as_interactions(test, threshold)
    users = IdVocabulary(np.unique(_raw(test.user_ids)[test.users]), "user")
    notes = {}
    csrs = []
    for what, r in (("train", train), ("test", test)):
        row, user_known = users.lookup(_raw(r.user_ids)[r.users])
        col, item_known = model.items.lookup(_raw(r.item_ids)[r.items])
        keep = user_known & item_known
        notes[f"{what}_dropped_unknown_item"] = int(np.count_nonzero(user_known & ~item_known))
        csrs.append(_csr(row[keep], col[keep], r.values[keep], len(users)))
    return HeldOut(csrs[0], csrs[1], users.ids, notes, implicit)


def _raw(ids: np.ndarray | None) -> np.ndarray:
    """The raw ids of a ratings file (read from a file: never None)."""
    if ids is None:
        raise ValueError("ratings read from a file have raw ids")
    return ids


def _csr(rows: np.ndarray, cols: np.ndarray, values: np.ndarray, n_rows: int) -> CSR:
    """The triples as a CSR of ``n_rows`` rows (stable within a row)."""
    order = np.argsort(rows, kind="stable")
    indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n_rows))))
    return CSR(indptr.astype(np.int64), cols[order].astype(np.int32),
               np.asarray(values, dtype=np.float64)[order])

