"""Local differential privacy of uploads: the clip-and-Laplace mechanism of RFRec, Eq. (9).

A client perturbs every entry of what it uploads,

    Ṽ_(i) = Clip(V_(i), delta) + Laplace(0, s)                                        (9)

where ``Clip`` clamps each entry to ``[-delta, delta]`` and the Laplace noise is drawn
i.i.d. per entry. The paper states that this is ``epsilon``-DP with ``epsilon = 2 delta / s``:
one clamped entry moves by at most ``2 delta`` (its sensitivity), and Laplace noise of scale
``s`` on it gives ``2 delta / s``. That is a per-entry, per-upload budget; an upload of ``N``
entries has L1 sensitivity ``2 delta N`` and repeated uploads compose (see ``docs/rfrec.md``).

:class:`LaplaceMechanism` is algorithm-agnostic: any algorithm can pass its uploads through
:meth:`LaplaceMechanism.perturb`. An aggregating server that only uses the *sum* of ``n``
uploads can be simulated with :meth:`LaplaceMechanism.perturb_sum`, which draws the sum of
the ``n`` noise terms from its exact distribution in one go (a Laplace variable is the
difference of two exponentials, so a sum of ``n`` of them is ``Gamma(n, s) - Gamma(n, s)``)
instead of materializing ``n`` noisy copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fedmc.errors import ConfigError


@dataclass(frozen=True)
class LaplaceMechanism:
    """Element-wise clip to ``[-delta, delta]`` plus ``Laplace(0, s)`` noise, Eq. (9).

    Parameters
    ----------
    delta
        Clipping bound ``delta > 0``.
    s
        Scale of the Laplace noise, ``s > 0`` (its mean absolute value; variance ``2 s^2``).
    """

    delta: float
    s: float

    def __post_init__(self) -> None:
        if not self.delta > 0:
            raise ConfigError(f"LDP clipping bound delta must be > 0, got {self.delta}")
        if not self.s > 0:
            raise ConfigError(f"LDP noise scale s must be > 0, got {self.s}")

    @property
    def epsilon(self) -> float:
        """Privacy budget ``epsilon = 2 delta / s`` as stated under Eq. (9)."""
        return 2.0 * self.delta / self.s

    def user_epsilon(self, entries: int, uploads: int) -> float:
        """``epsilon`` (pure, ``delta = 0``) that one user spends over ``uploads`` uploads of
        ``entries`` entries each, against neighbours that replace the user's whole data.

        Every entry is clamped to ``[-delta, delta]`` before its noise, and any of them can
        differ between two users (which items a user rated is private too), so one upload has
        L1 sensitivity ``2 delta entries`` and the Laplace mechanism of scale ``s`` on it is
        ``2 delta entries / s``-DP; the uploads of a user are separate releases and compose
        additively, which is tight for pure DP.
        """
        return uploads * 2.0 * self.delta * entries / self.s

    def clip(self, X: np.ndarray) -> np.ndarray:
        """``Clip(X, delta)``: every entry clamped to ``[-delta, delta]`` (a new array)."""
        return np.clip(X, -self.delta, self.delta)

    def noise(self, shape: tuple[int, ...], rng: np.random.Generator) -> np.ndarray:
        """I.i.d. ``Laplace(0, s)`` noise of the given shape."""
        return rng.laplace(0.0, self.s, size=shape)

    def perturb(self, X: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """One client's upload ``Clip(X, delta) + Laplace(0, s)``, Eq. (9)."""
        return self.clip(X) + self.noise(np.shape(X), rng)

    def summed_noise(
        self, n: int, shape: tuple[int, ...], rng: np.random.Generator
    ) -> np.ndarray:
        """The sum of ``n`` independent noise arrays, exact in distribution.

        ``Laplace(0, s) = Exp(s) - Exp(s)``, hence the sum of ``n`` i.i.d. draws is
        ``Gamma(n, s) - Gamma(n, s)`` entry by entry (variance ``2 n s^2``).
        """
        if n < 1:
            return np.zeros(shape)
        return rng.gamma(n, self.s, size=shape) - rng.gamma(n, self.s, size=shape)

    def perturb_sum(
        self, clipped_sum: np.ndarray, n: int, rng: np.random.Generator
    ) -> np.ndarray:
        """``sum_i (Clip(X_i) + noise_i)`` of ``n`` uploads from the sum of their clipped parts.

        The result has exactly the distribution of summing ``n`` outputs of :meth:`perturb`,
        for a server that only uses the sum (an average, as in RFRec).
        """
        return clipped_sum + self.summed_noise(n, np.shape(clipped_sum), rng)
