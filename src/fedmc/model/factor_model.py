"""The factor model a run publishes: predict and recommend by raw ids, fold in new users.

A :class:`FactorModel` holds what the server of a federation publishes after training (the
item factors ``V`` with the item biases in their layout column, the normalizer, the rating
range, the raw item ids, the algorithm and its settings) and, only when asked for in a
simulation study, the user factors ``U`` with the raw user ids and every user's training items
(the clients' private property: in a federation they never leave the devices).

Users are named by raw ids (those of the rating file) or given as a :class:`NewUser` from
:meth:`FactorModel.fold_in`. Every id is checked (:mod:`fedmc.data.vocabulary`) before it
indexes an array: unknown, negative, out-of-range or non-integer ids raise a
:class:`~fedmc.errors.DataError` with a one-line reason.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from fedmc.algorithms.registry import spec
from fedmc.core.factors import RANK_BOOST, FactorLayout, predict
from fedmc.core.ranking import top_n
from fedmc.core.scale import Normalizer
from fedmc.data.vocabulary import IdVocabulary
from fedmc.errors import ConfigError, DataError

_NO_USER_FACTORS = ("this model has no user factors (they stay on the clients): run with "
                    "--save-user-factors, or fold the user in from ratings")

@dataclass(frozen=True)
class NewUser:
    """A user folded in on the device: its factor row, the items it rated (dense indices,
    excluded from its recommendations) and the fingerprint of the model it was folded in on
    (:attr:`FactorModel.fingerprint`: its factor means nothing to another model, which
    refuses it). Nothing of it is sent anywhere."""

    factor: np.ndarray
    rated: np.ndarray
    model: str


@dataclass(frozen=True)
class TopN:
    """A recommendation list, best first: raw item ids and predicted ratings (original
    scale, clipped as :meth:`FactorModel.predict` clips)."""

    items: np.ndarray
    ratings: np.ndarray

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True)
class SimilarItems:
    """The items most like one item, most similar first: raw item ids and the cosine
    similarity of their factors (in ``[-1, 1]``; 0 for an item whose factor is zero)."""

    items: np.ndarray
    similarity: np.ndarray

    def __len__(self) -> int:
        return len(self.items)


@dataclass(frozen=True, eq=False)
class FactorModel:
    """A trained ``U V^T`` model with biases, by raw ids.

    Attributes
    ----------
    algorithm
        The ``--algorithm`` name that trained it (it picks the fold-in).
    params
        The algorithm's settings (its ``Config`` as JSON values).
    V
        Item factors ``(n_items, width)``; with biases, column ``rank + 1`` is the item bias.
    item_ids
        Raw id of every row of ``V``.
    normalizer
        Map from ratings to the scale the factors predict on.
    value_range
        Smallest and largest training rating (predictions are clipped to it when the
        settings say ``clip``).
    dataset
        Name of the training data (a named set such as ``ml-1m`` lets ``fedmc recommend``
        show titles).
    fedmc_version
        The version that trained the model.
    private
        Whether the model carries a DP guarantee (a private run's: secret noise,
        ``docs/privacy.md``).
    rank_boost
        A score per item that top-N lists add to the predicted (normalized) rating, as the
        algorithm published it (FedMC-ADMM's ``rank_popularity`` times the square root of its
        released rater count; :meth:`ranking_factors`); None where the model ranks by
        predicted rating alone.
    U, user_ids, rated_ptr, rated_items
        Only in simulation studies (``--save-user-factors``): user factors ``(n_users,
        width)``, their raw ids, and each user's training items as a CSR
        (``rated_items[rated_ptr[t]:rated_ptr[t+1]]``, ``int32`` dense item indices); else
        None.
    """

    algorithm: str
    params: dict[str, Any]
    V: np.ndarray
    item_ids: np.ndarray
    normalizer: Normalizer
    value_range: tuple[float, float]
    dataset: str
    fedmc_version: str
    private: bool = False
    rank_boost: np.ndarray | None = None
    U: np.ndarray | None = None
    user_ids: np.ndarray | None = None
    rated_ptr: np.ndarray | None = None
    rated_items: np.ndarray | None = None

    @classmethod
    def from_estimator(cls, estimator: Any, user_data: Any = None) -> FactorModel:
        """The model a fitted factor estimator publishes.

        Parameters
        ----------
        estimator
            A fitted :class:`fedmc.estimators.FactorPredictions` estimator (``V_``, ``U_``,
            ``item_ids_``, ``user_ids_``, ``data_name_``, ``config_``, ``info_``).
        user_data
            The :class:`~fedmc.data.FederatedData` it was fitted on, to keep the user factors
            and each user's training items as well (simulation studies only); None keeps the
            item model alone, what a federation publishes.
        """
        if user_data is not None and not np.array_equal(np.asarray(user_data.user_ids),
                                                         estimator.user_ids_):
            raise DataError("user_data is not the data the estimator was fitted on")
        published = getattr(estimator, "model_", None) or {"V": estimator.V_}
        return cls.of(estimator.name, estimator.config_, published, estimator.info_,
                      estimator.item_ids_, estimator.data_name_,
                      getattr(estimator, "privacy_", {}).get("private", False),
                      None if user_data is None else (estimator.U_, user_data))

    @classmethod
    def of(cls, algorithm: str, cfg: Any, published: Mapping[str, np.ndarray], info: Any,
           item_ids: Any, dataset: str, private: bool = False,
           users: tuple[np.ndarray, Any] | None = None) -> FactorModel:
        """The model a training of ``algorithm`` with ``cfg`` publishes: the arrays it
        ``published`` (its item factors ``V``, rows ``item_ids``, and where its lists rank with
        one, ``rank_boost``), the federation's facts ``info`` (normalizer,
        value range), the data's name; ``users``: the user factors in federated row order and
        the :class:`~fedmc.data.FederatedData` they were trained on, to keep them and each
        user's training items as well (simulation studies only)."""
        import fedmc

        extra: dict[str, np.ndarray] = {}
        if RANK_BOOST in published:
            extra[RANK_BOOST] = np.array(published[RANK_BOOST], dtype=np.float64)
        if users is not None:
            U, user_data = users
            extra |= {
                "U": np.array(U, dtype=np.float64),
                "user_ids": np.array(user_data.user_ids),
                "rated_ptr": np.array(user_data.train.indptr, dtype=np.int64),
                "rated_items": np.array(user_data.train.indices, dtype=np.int32),
            }
        return cls(
            algorithm=algorithm,
            params=cfg.model_dump(mode="json"),
            V=np.array(published["V"], dtype=np.float64),
            item_ids=np.array(item_ids),
            normalizer=info.normalizer,
            value_range=(float(info.value_range[0]), float(info.value_range[1])),
            dataset=dataset,
            fedmc_version=fedmc.__version__,
            private=private,
            **extra,
        )

    # ------------------------------------------------------------------ what it knows

    @cached_property
    def config(self) -> Any:
        """The algorithm's validated ``Config``."""
        return spec(self.algorithm).Config(**self.params)

    @property
    def layout(self) -> FactorLayout:
        """Column layout of ``V`` (and ``U``)."""
        return self.config.layout

    @property
    def clip(self) -> tuple[float, float]:
        """Where predictions are clipped (the training range with ``clip``, else nowhere)."""
        return self.config.clip_range(self.value_range)

    @property
    def item_biases(self) -> np.ndarray:
        """Each item's bias ``b_j`` on the normalized scale (zeros without biases)."""
        if not self.layout.biases:
            return np.zeros(len(self.V))
        return self.V[:, self.layout.rank + 1].copy()

    @property
    def has_user_factors(self) -> bool:
        """Whether the user factors were saved (``--save-user-factors``)."""
        return self.U is not None

    @cached_property
    def items(self) -> IdVocabulary:
        """The raw item ids."""
        return IdVocabulary(self.item_ids, "item")

    @cached_property
    def users(self) -> IdVocabulary:
        """The raw user ids of the saved user factors.

        Raises
        ------
        DataError
            When the user factors were not saved.
        """
        if self.user_ids is None:
            raise DataError(_NO_USER_FACTORS)
        return IdVocabulary(self.user_ids, "user")

    def _saved_users(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The saved user factors and each user's training items (``U``, ``rated_ptr``,
        ``rated_items``); a :class:`DataError` when they were not saved."""
        if self.U is None or self.rated_ptr is None or self.rated_items is None:
            raise DataError(_NO_USER_FACTORS)
        return self.U, self.rated_ptr, self.rated_items

    @property
    def lists_note(self) -> str | None:
        """What a user of this model's top-N lists should know, or None: a private model of
        ratings (public normalizer) that ranks by predicted rating alone lists items that few
        users rated, whose noise-dominated biases top every list (docs/privacy.md, "Private
        top-N lists")."""
        if not self.private or self.rank_boost is not None or self.normalizer.kind != "public":
            return None
        return ("this private model ranks items by predicted rating alone, and such lists are "
                "weak: items few users rated carry noise-dominated biases and top them (ML-1M, "
                "epsilon 8: NDCG@10 about 0.02 against the DP popularity list's 0.20); "
                "FedMC-ADMM's DP defaults blend the released rater counts in "
                "(-P rank_popularity; docs/privacy.md, \"Private top-N lists\")")

    def ranking_factors(self, U: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The factors whose products rank items for top-N lists: ``(U, V)`` where the model
        ranks by predicted rating; with a :attr:`rank_boost`, one column more on each side, so
        that ``U V^T`` adds item ``j``'s boost to every user's predicted (normalized) rating
        of it."""
        if self.rank_boost is None:
            return U, self.V
        return np.hstack([U, np.ones((len(U), 1))]), self._boosted_V

    @cached_property
    def _boosted_V(self) -> np.ndarray:
        """``V`` with the rank boost as one more column (:meth:`ranking_factors`), built once
        for every block of users a list ranks."""
        return np.hstack([self.V, np.asarray(self.rank_boost)[:, None]])

    # ------------------------------------------------------------------ use

    def predict(self, users: Any, items: Any) -> np.ndarray:
        """Predicted ratings (original scale, clipped) of raw ``(user, item)`` pairs.

        ``users`` is a raw user id or a sequence of them (needs saved user factors), or a
        :class:`NewUser`; ``items`` a raw item id or a sequence; a single user or item is
        paired with every entry of the other.
        """
        cols = self.items.index(items)
        if isinstance(users, NewUser):
            U, rows = self._factor(users)[None, :], np.zeros(1, dtype=np.int64)
        else:
            U, rows = self._saved_users()[0], self.users.index(users)
        if len(rows) != len(cols) and 1 not in (len(rows), len(cols)):
            raise DataError(f"{len(rows)} users but {len(cols)} items: give one item per "
                            "user, or one user or one item for all")
        rows, cols = np.broadcast_arrays(rows, cols)
        return predict(U, self.V, rows, cols, self.normalizer, self.clip)

    def recommend(self, user: Any, n: int = 10, exclude_rated: bool = True) -> TopN:
        """The ``n`` items of highest predicted rating for ``user`` (ranked with the
        model's rank boost where it has one, :meth:`ranking_factors`; the ratings shown
        are the predicted ones).

        Parameters
        ----------
        user
            A raw user id (needs saved user factors) or a :class:`NewUser`.
        n
            Length of the list (shorter when fewer items are left).
        exclude_rated
            Leave out the items the user rated (in training, or in its fold-in ratings).
        """
        _check_n(n)
        if isinstance(user, NewUser):
            u, rated = self._factor(user), np.asarray(user.rated, dtype=np.int64)
        else:
            row = self.users.index(user)
            if len(row) != 1:
                raise DataError(f"recommend takes one user, got {len(row)}")
            t = int(row[0])
            U, rated_ptr, rated_items = self._saved_users()
            u, rated = U[t], rated_items[rated_ptr[t] : rated_ptr[t + 1]]
        if not exclude_rated:
            rated = rated[:0]
        ptr = np.array([0, len(rated)], dtype=np.int64)
        n = min(int(n), len(self.V))
        best, _ = top_n(*self.ranking_factors(u[None, :]), ptr,
                        np.asarray(rated, dtype=np.int64), n)
        best = best[0][best[0] >= 0]
        z = self.V[best] @ u
        return TopN(self.item_ids[best], np.clip(self.normalizer.inverse(z), *self.clip))

    def similar_items(self, item: Any, n: int = 10) -> SimilarItems:
        """The ``n`` items whose factors point most nearly the way ``item``'s does.

        Similarity is the cosine of the item factors ``V[:, :rank]``: the layout's bias
        columns (the user-bias carrier and the item bias, :class:`fedmc.core.factors.
        FactorLayout`) are left out, so popularity alone makes no item similar. The item
        itself is left out; ties go to the item first in the model's order.

        Parameters
        ----------
        item
            A raw item id.
        n
            Length of the list (shorter when the model has fewer other items).

        Raises
        ------
        DataError
            An unknown item id, or a model without item factors (rank 0: biases alone).
        """
        _check_n(n)
        col = self.items.index(item)
        if len(col) != 1:
            raise DataError(f"similar_items takes one item, got {len(col)}")
        rank = self.layout.rank
        if rank == 0:
            raise DataError(f"a {self.algorithm} model has no item factors (rank 0), so no "
                            "similar items")
        F = self.V[:, :rank]
        norms = np.linalg.norm(F, axis=1)
        unit = np.divide(F, norms[:, None], out=np.zeros_like(F), where=norms[:, None] > 0)
        j = int(col[0])
        best, cosine = top_n(unit[j][None, :], unit, np.array([0, 1]), np.array([j]),
                             min(int(n), len(self.V) - 1) or 1)
        keep = best[0] >= 0
        return SimilarItems(self.item_ids[best[0][keep]], np.clip(cosine[0][keep], -1, 1))

    @cached_property
    def fingerprint(self) -> str:
        """A digest of the item model (``V`` and the biases it holds): what a
        :class:`NewUser` names as its model."""
        return hashlib.sha256(np.ascontiguousarray(self.V, dtype=np.float64).tobytes()
                              ).hexdigest()[:16]

    def _factor(self, user: NewUser) -> np.ndarray:
        """A new user's factor, checked against the model it was folded in on and the width."""
        if user.model != self.fingerprint:
            raise DataError("this user was folded in on another model: fold it in on this one "
                            "(model.fold_in)")
        u = np.asarray(user.factor, dtype=np.float64)
        if u.shape != (self.V.shape[1],) or not np.all(np.isfinite(u)):
            raise DataError(f"a user factor must be {self.V.shape[1]} finite numbers; this "
                            f"one has shape {u.shape}")
        return u

    @property
    def implicit(self) -> bool:
        """Whether the model learned from interactions (implicit feedback), not ratings."""
        entry = spec(self.algorithm)
        return entry.needs_interactions is not None and entry.needs_interactions(self.config)

    def fold_in(self, items: Any, ratings: Any = None) -> NewUser:
        """A new user's factor from its own ratings, computed where they are (on the device)
        with the algorithm's user step and the published ``V`` (:mod:`fedmc.algorithms.fold_in`).

        Parameters
        ----------
        items
            Raw ids of the rated items (distinct), or of the items interacted with for a model
            of implicit feedback.
        ratings
            The ratings, on the original scale, one per item; for a model of implicit feedback
            none (every item an interaction of strength 1, as training read them).
        """
        cols = self.items.index(items)
        if self.implicit != (ratings is None):
            raise DataError("this model learned from interactions: give the items alone"
                            if self.implicit else "folding in needs a rating for every item")
        try:
            values = (np.ones(len(cols)) if ratings is None
                      else np.asarray(ratings, dtype=np.float64).reshape(-1))
        except (TypeError, ValueError):
            raise DataError("ratings must be numbers") from None
        if len(values) != len(cols):
            raise DataError(f"{len(cols)} items but {len(values)} ratings")
        if not np.all(np.isfinite(values)):
            raise DataError("ratings must be finite numbers")
        lo, hi = self.value_range
        outside = (values < lo) | (values > hi)
        if ratings is not None and np.any(outside):
            raise DataError(f"rating {values[outside][0]:g} lies outside the model's rating "
                            f"range {lo:g}-{hi:g}")
        uniq, counts = np.unique(cols, return_counts=True)
        if np.any(counts > 1):
            raise DataError(f"item {self.item_ids[uniq[counts > 1][0]]!s} is rated more "
                            "than once")
        u = spec(self.algorithm).load_fold_in()(self.config, self.V, cols,
                                        self.normalizer.transform(values))
        return NewUser(factor=u, rated=cols, model=self.fingerprint)

    # ------------------------------------------------------------------ files

    def save(self, folder: str | Path) -> Path:
        """Write ``model.npz`` (arrays, ``allow_pickle=False``) and ``model.json``
        (metadata) into ``folder``; returns the ``model.npz`` path."""
        from fedmc.model.store import write

        return write(self, Path(folder))


def _check_n(n: Any) -> None:
    """Refuse a list length that is not a positive integer."""
    if isinstance(n, bool) or not isinstance(n, int | np.integer) or n < 1:
        raise ConfigError(f"n must be a positive integer, got {n!r}")


def load_model(path: str | Path) -> FactorModel:
    """The model saved in ``path`` (a run folder, or its ``model.npz``/``model.json``).

    Raises
    ------
    DataError
        A missing or damaged file, shapes or dtypes that do not fit, a format this version
        cannot read, or settings that do not validate; with a one-line reason.
    """
    from fedmc.model.store import read

    return FactorModel(**read(Path(path)))
