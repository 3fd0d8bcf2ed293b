"""Rating normalization: fitted on training ratings only, or fixed by a public rating scale.

``zscore`` and ``center`` fit the mean (and standard deviation) of the training ratings: exact
data-dependent values, which a differentially private run may not publish. ``public`` depends
on a public fact only, the rating scale ``[lo, hi]`` (MovieLens 1M: 1 to 5 stars), declared by
the user (``--rating-scale``) or by a named data set's registry entry: centre at the scale's
midpoint, unit at its half-width, so every rating maps into ``[-1, 1]``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from fedmc.errors import ConfigError

if TYPE_CHECKING:  # NumPy is imported where the arrays are: run settings read this module
    from collections.abc import Callable, Iterable

    import numpy as np

NormalizeKind = Literal["none", "center", "zscore", "public"]
RatingScale = tuple[float, float]


@dataclass(frozen=True)
class Normalizer:
    """An affine map ``z = (r - mean) / scale`` and its inverse.

    ``kind="zscore"`` is what the FedMC-ADMM reference code does to all ratings; here the
    mean and standard deviation come from the training ratings only. ``kind="public"`` is
    :meth:`public`: a function of the rating scale alone.
    """

    kind: NormalizeKind = "none"
    mean: float = 0.0
    scale: float = 1.0

    @classmethod
    def public(cls, scale: RatingScale) -> Normalizer:
        """The map of the rating scale ``[lo, hi]`` onto ``[-1, 1]``: mean ``(lo + hi) / 2``,
        scale ``(hi - lo) / 2``; no rating enters it."""
        lo, hi = check_scale(scale)
        return cls("public", 0.5 * (lo + hi), 0.5 * (hi - lo))

    @classmethod
    def fit(cls, values: np.ndarray, kind: NormalizeKind = "none",
            scale: RatingScale | None = None) -> Normalizer:
        """Fit on training values (``public``: from the rating ``scale``, values unread)."""
        return cls.fitted(kind, scale, lambda: Moments.of(values))

    @classmethod
    def fitted(cls, kind: NormalizeKind, scale: RatingScale | None,
               moments: Callable[[], Moments]) -> Normalizer:
        """:meth:`fit` from the training values' ``moments`` (asked for by ``center`` and
        ``zscore`` alone): the values may lie in several places (the shards of a population,
        :meth:`Moments.combine`)."""
        if kind == "none":
            return cls("none", 0.0, 1.0)
        if kind == "public":
            if scale is None:
                raise ConfigError("`normalize='public'` needs the rating scale: give "
                                  "`rating_scale=LO,HI`")
            return cls.public(scale)
        if kind not in ("center", "zscore"):
            raise ConfigError(f"unknown normalization {kind!r}: use none|center|zscore|public")
        m = moments()
        if m.count == 0:
            raise ConfigError("cannot normalize: there are no training ratings")
        if kind == "center":
            return cls("center", m.mean, 1.0)
        std = math.sqrt(m.m2 / m.count)
        return cls("zscore", m.mean, std if std > 0 else 1.0)

    def transform(self, values: np.ndarray) -> np.ndarray:
        """Original scale to normalized scale."""
        import numpy as np

        return (np.asarray(values, dtype=np.float64) - self.mean) / self.scale

    def inverse(self, z: np.ndarray) -> np.ndarray:
        """Normalized scale to original scale."""
        import numpy as np

        return np.asarray(z, dtype=np.float64) * self.scale + self.mean

    @property
    def is_identity(self) -> bool:
        """True when no normalization is applied."""
        return self.kind == "none"


@dataclass(frozen=True)
class Moments:
    """How many values, their mean and the sum of their squared deviations from it (``m2``):
    what a normalizer is fitted on (:meth:`Normalizer.fitted`)."""

    count: int
    mean: float
    m2: float

    @classmethod
    def of(cls, values: np.ndarray) -> Moments:
        """The moments of ``values`` (``np.mean`` and ``np.std``'s arithmetic)."""
        import numpy as np

        if len(values) == 0:
            return cls(0, 0.0, 0.0)
        mean = np.mean(values)
        return cls(len(values), float(mean), float(np.sum(np.square(values - mean))))

    @staticmethod
    def combine(parts: Iterable[Moments]) -> Moments:
        """The moments of the values of all ``parts`` together (Chan, Golub and LeVeque's
        pairwise update)."""
        total = Moments(0, 0.0, 0.0)
        for part in parts:
            if part.count == 0:
                continue
            n = total.count + part.count
            delta = part.mean - total.mean
            total = Moments(n, total.mean + delta * part.count / n,
                            total.m2 + part.m2 + delta * delta * total.count * part.count / n)
        return total


def check_scale(scale: RatingScale) -> RatingScale:
    """``scale`` as two finite floats ``lo < hi``, else a :class:`ConfigError`."""
    try:
        lo, hi = (float(v) for v in scale)
    except (TypeError, ValueError):
        raise ConfigError(f"a rating scale is two numbers LO,HI, got {scale!r}") from None
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi):
        raise ConfigError(f"a rating scale needs finite LO < HI, got {lo:g},{hi:g}")
    return lo, hi
