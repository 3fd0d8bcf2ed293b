"""Every held-out user's top-N list, in the long format other recommender libraries compare
(``fedmc recommend RUN --out FILE``).

The users of a :class:`~fedmc.run.evaluation.HeldOut` with at least one held-out rating (the
users the ranking metrics score) are folded in from their training ratings with the
algorithm's fold-in, as ``fedmc evaluate`` folds them in, and ranked by
:func:`fedmc.core.ranking.top_n`, their training items left out as the ranking metrics leave
them out: both a block of :data:`USER_BLOCK` users at a time, so memory stays bounded on any
number of users. The lists are written as ``user,item,rank,score`` rows (LensKit's and
implicit's long format) with the raw ids; the score is the predicted rating on the original
scale, clipped as :meth:`fedmc.model.FactorModel.recommend` clips (for a model of implicit
feedback, the predicted preference).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import IO

import numpy as np

from fedmc.algorithms.registry import spec
from fedmc.core.ranking import top_n
from fedmc.core.shard import CSR
from fedmc.errors import DataError
from fedmc.model.factor_model import FactorModel
from fedmc.run.evaluation import HeldOut

USER_BLOCK = 4096
"""Users folded in and ranked at a time."""

COLUMNS = ("user", "item", "rank", "score")


@dataclass(frozen=True)
class TopLists:
    """Top-N lists in long format, one entry per row: the user's and the item's raw ids, the
    item's rank in the user's list (from 1) and its score. Users come in the order of their
    raw ids; each user's entries run from rank 1 up."""

    users: np.ndarray
    items: np.ndarray
    ranks: np.ndarray
    scores: np.ndarray

    def __len__(self) -> int:
        return len(self.items)

    @property
    def n_users(self) -> int:
        """Number of users with a list."""
        return int(np.count_nonzero(self.ranks == 1))

    def write_csv(self, fh: IO[bytes]) -> None:
        """Write the lists as UTF-8 CSV with the header ``user,item,rank,score``."""
        text = io.TextIOWrapper(fh, encoding="utf-8", newline="")
        writer = csv.writer(text, lineterminator="\n")
        writer.writerow(COLUMNS)
        writer.writerows(zip(self.users.tolist(), self.items.tolist(), self.ranks.tolist(),
                             self.scores.tolist(), strict=True))
        text.flush()
        text.detach()


def top_lists(model: FactorModel, held: HeldOut, n: int, exclude_rated: bool = True,
              block: int = USER_BLOCK) -> TopLists:
    """The top-``n`` list of every user of ``held`` with held-out ratings.

    Parameters
    ----------
    model
        The published model.
    held
        The users' training ratings (folded in) and held-out ratings (which users are listed).
    n
        Length of every list (shorter where fewer items are left).
    exclude_rated
        Leave each user's training items out of its list (as the ranking metrics do).
    block
        Users folded in and ranked at a time.

    Raises
    ------
    DataError
        When no user has a held-out rating.
    """
    listed = np.flatnonzero(np.diff(held.test.indptr) > 0)
    if len(listed) == 0:
        raise DataError("there are no held-out ratings: no user to list")
    n = min(n, len(model.V))
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for t0 in range(0, len(held.user_ids), block):
        rows = slice(t0, min(t0 + block, len(held.user_ids)))
        train = held.train.row_block(rows)
        R = CSR(train.indptr, train.indices, model.normalizer.transform(train.values))
        U = spec(model.algorithm).fold_in_users(model.config, model.V, R)
        keep = listed[(listed >= rows.start) & (listed < rows.stop)]
        seen = train if exclude_rated else CSR(np.zeros(len(U) + 1, dtype=np.int64),
                                                train.indices[:0], train.values[:0])
        U_rank, V_rank = model.ranking_factors(U)
        items, z = top_n(U_rank, V_rank, seen.indptr, seen.indices, n)
        if V_rank is not model.V:  # ranked with a boost: the listed items' predictions
            z = np.einsum("tkw,tw->tk", model.V[np.maximum(items, 0)], U)
        parts.append((keep, items[keep - t0], z[keep - t0]))
    users, items, z = (np.concatenate(column) for column in zip(*parts, strict=True))
    order = np.argsort(held.user_ids[users], kind="stable")  # by raw user id
    users, items, z = users[order], items[order], z[order]
    filled = items >= 0
    ranks = np.broadcast_to(np.arange(1, n + 1), items.shape)
    scores = np.clip(model.normalizer.inverse(z[filled]), *model.clip)
    return TopLists(np.repeat(held.user_ids[users], filled.sum(axis=1)),
                    model.item_ids[items[filled]], ranks[filled], scores)
