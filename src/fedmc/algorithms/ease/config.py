"""Hyper-parameters of federated EASE (``fedmc.algorithms.ease``)."""

from __future__ import annotations

from pydantic import Field

from fedmc.core.factors import AlgorithmConfig, FactorLayout, clip_range

MAX_CATALOGUE = 10_000
"""The largest catalogue EASE is offered for: its model is the dense ``n x n`` matrix ``B``
(``8 n^2`` bytes, 800 MB at 10,000 items, and the server's solve holds about three such
arrays)."""


class EaseConfig(AlgorithmConfig):
    """Settings of EASE (Steck 2019): ``lam`` is the ridge weight ``lambda`` of Eq. (2)'s
    ``P = (G + lambda I)^-1``; ``max_items`` bounds the items one user contributes to the Gram
    matrix (a uniform draw of the user's own, for user-level DP: a binary row then has
    ``||x x^T||_F <= max_items``); ``implicit`` marks a fit on interactions, the only data it
    takes (``--implicit`` sets it).
    """

    lam: float = Field(1000.0, gt=0, description="lambda: ridge weight on the Gram "
                       "matrix's diagonal")
    max_items: int | None = Field(None, ge=1, description="the most items one user "
                                  "contributes (a uniform draw of its own; None: all)")
    implicit: bool = Field(False, description="fit interactions (EASE takes nothing else)")

    @property
    def layout(self) -> FactorLayout:
        """The item-item layout: ``V = B^T``, a user's row its interactions
        (:class:`fedmc.core.factors.FactorLayout`)."""
        return FactorLayout(0, False, item_item=True)

    def clip_range(self, value_range: tuple[float, float]) -> tuple[float, float]:
        """Nowhere: the scores rank items."""
        return clip_range(False, value_range)
