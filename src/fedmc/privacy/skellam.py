"""The Skellam mechanism inside a modular secure sum: integer uploads, integer noise, an exact
guarantee (Agarwal, Kairouz, Liu 2021, "The Skellam Mechanism for Differentially Private
Federated Learning").

A secure sum adds integers modulo a field size; Gaussian noise added to floats that the
protocol then quantizes and wraps is not the mechanism the Gaussian analysis covers. Here
every member of a secure exchange turns its clipped upload ``x`` (``||x|| <= C``) into integers
itself and adds integer noise:

1. **scale and round**: ``r = rint(gamma x)``, so ``||r - gamma x||_inf <= 1/2`` and
   ``||r|| <= gamma C + sqrt(d) / 2 =: Delta_2`` for every ``x`` (no probabilistic bound:
   deterministic rounding, whose error is at most half a unit per entry, far below the noise:
   ``gamma C`` is tens of thousands of units);
2. **noise share**: ``Sk(mu / m)`` on every entry, the difference of two Poisson variables of
   mean ``mu / (2 m)`` (:meth:`SkellamSum.shares`), ``m`` the members of the exchange: a sum
   of independent Skellam variables is Skellam, so the members' shares add up to exactly
   ``Sk(mu)`` (variance ``mu``) on the sum;
3. **wrap**: the member sends ``(r + noise) mod M`` (``M =`` :data:`MODULUS`); the secure sum
   returns the sum modulo ``M``, the server maps it to ``[-M/2, M/2)`` and divides by
   ``gamma`` (:meth:`SkellamSum.decode`). Reducing modulo ``M`` is post-processing of the
   noised integer sum: it costs no privacy; it only errs (wraps) if an entry of the sum
   leaves ``[-M/2, M/2)``, which the choice of ``gamma`` rules out up to
   :data:`TAIL_SIGMAS` standard deviations of the noise (:meth:`SkellamSum.of`).

The released sum is the multi-dimensional Skellam mechanism with L2 sensitivity ``Delta_2``
and L1 sensitivity ``Delta_1 <= min(sqrt(d) Delta_2, Delta_2^2)`` (an integer vector's entries
are at most their squares), whose Renyi DP at integer order ``alpha`` is at most (the paper's
Theorem 3.5, ``mu`` the variance of the noise on an entry)

    alpha Delta_2^2 / (2 mu) + min(((2 alpha - 1) Delta_2^2 + 6 Delta_1) / (4 mu^2),
                                   3 Delta_1 / (2 mu))

(:meth:`SkellamSum.rdp`). With ``mu = (z Delta_2)^2`` (noise multiplier ``z``) the first term
is the Gaussian mechanism's; the second vanishes as ``Delta_2`` grows. Exchanges compose by
adding their RDP (:class:`fedmc.privacy.accounting.Spent`), without credit for sampling
(no amplification is claimed for this mechanism: the bound is the same against outsiders
and against the server, which knows the cohorts). ``docs/privacy.md`` ("Noise inside the
secure sum") has the argument; tests check the bound against the exact Renyi divergence and
``dp_accounting``'s privacy loss distribution of the one-dimensional mechanism.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fedmc.errors import ConfigError

MODULUS = 2**30
"""The field of the integer sum: Flower's SecAgg+ quantization range (the stock quantizer's
``int32`` holds it), into which a member's wrapped integers map one to one."""
TAIL_SIGMAS = 12.0
"""The room left for the noise on an entry of the sum, in its standard deviations: beyond it
(probability below 1e-32 an entry) the sum wraps."""


@dataclass(frozen=True)
class SkellamSum:
    """The integer form of one exchange's secure sum (module docstring).

    Attributes
    ----------
    scale
        ``gamma``: integer units per unit of an upload.
    dim
        ``d``: numbers in one upload (all its named arrays).
    sensitivity
        ``Delta_2``: the L2 bound of one member's rounded upload, in integer units.
    variance
        ``mu``: the variance of the noise on every entry of the sum, in integer units.
    """

    scale: float
    dim: int
    sensitivity: float
    variance: float

    @classmethod
    def of(cls, clip: float, noise: float, dim: int, members: int) -> SkellamSum:
        """The largest ``gamma`` at which a sum of ``members`` rounded uploads of L2 norm at
        most ``clip`` plus :data:`TAIL_SIGMAS` standard deviations of the noise
        (multiplier ``noise``, so ``mu = (noise Delta_2)^2``) stays inside
        ``[-M/2, M/2)``: an entry of the sum is at most ``members (gamma clip + 1/2)``
        (each member's entry at most ``gamma |x_j| + 1/2``, the ``|x_j|`` of the members at
        most the sum of their norms), so ``gamma clip (members + T z) + members / 2 +
        T z sqrt(d) / 2 <= M / 2``. Public settings alone: every party computes the same.

        Raises
        ------
        ConfigError
            When the field leaves the rounding more than a sixth of the sensitivity (too many
            members or too large an upload for ``2^30``).
        """
        if clip <= 0 or noise <= 0 or dim < 1 or members < 1:
            raise ValueError(f"need clip, noise, dim and members > 0, got {clip}, {noise}, "
                             f"{dim}, {members}")
        half = math.sqrt(dim) / 2
        room = MODULUS / 2 - members / 2 - TAIL_SIGMAS * noise * half
        gamma = room / (clip * (members + TAIL_SIGMAS * noise))
        if gamma * clip < 3 * math.sqrt(dim):
            raise ConfigError(
                f"the discrete DP mechanism of the secure sum needs its field (2^30) to hold "
                f"the sum of {members} members' uploads of {dim} numbers with a resolution "
                f"well below the noise; it does not: use fewer clients or a smaller rank")
        sensitivity = gamma * clip + half
        return cls(gamma, dim, sensitivity, (noise * sensitivity) ** 2)

    @property
    def l1_sensitivity(self) -> float:
        """``Delta_1``: the L1 bound of one member's rounded upload (module docstring)."""
        return min(math.sqrt(self.dim) * self.sensitivity, self.sensitivity**2)

    def rdp(self, orders: Sequence[int]) -> np.ndarray:
        """The Renyi DP of one release at every integer order of ``orders`` (module
        docstring)."""
        a = np.asarray(orders, dtype=np.float64)
        d2, d1, mu = self.sensitivity**2, self.l1_sensitivity, self.variance
        return a * d2 / (2 * mu) + np.minimum(((2 * a - 1) * d2 + 6 * d1) / (4 * mu**2),
                                              3 * d1 / (2 * mu))

    def integers(self, x: np.ndarray) -> np.ndarray:
        """A member's upload in integer units, ``rint(gamma x)`` (as floats)."""
        return np.rint(self.scale * np.asarray(x, dtype=np.float64))

    def shares(self, shapes: Mapping[str, tuple[int, ...]], members: int,
               rng: np.random.Generator) -> dict[str, np.ndarray]:
        """One member's share of the noise on a sum of ``members``: ``Sk(mu / members)`` on
        every entry of every array, drawn name by name in sorted order."""
        return {name: self.noise(shapes[name], 1.0 / members, rng) for name in sorted(shapes)}

    def noise(self, shape: tuple[int, ...], share: float, rng: np.random.Generator,
              ) -> np.ndarray:
        """``Sk(share mu)`` on every entry: the noise of a ``share`` of the members (all of
        them: the noise of the sum)."""
        half = 0.5 * share * self.variance
        return (rng.poisson(half, size=shape) - rng.poisson(half, size=shape)).astype(
            np.float64)

    @staticmethod
    def wrap(z: np.ndarray) -> np.ndarray:
        """Integers reduced modulo :data:`MODULUS`, in ``[0, M)``."""
        return np.mod(z, MODULUS)

    def decode(self, total: np.ndarray) -> np.ndarray:
        """A secure sum of integers (in any representative modulo ``M``) as the sum of the
        uploads: its representative in ``[-M/2, M/2)`` over ``gamma``."""
        t = np.mod(total, MODULUS)
        return np.where(t >= MODULUS // 2, t - MODULUS, t) / self.scale


def member_stream(secret: int, client: int, round_: int, phase: str) -> np.random.Generator:
    """The random stream of one member's noise share in one exchange: seeded by the member's
    ``secret`` (its own in a private run; the run's, from its seed, when reproducible), the
    client and the exchange (its round and phase), so a repeated exchange (a resumed round)
    adds the same share again instead of releasing a second draw."""
    return np.random.default_rng([secret, client, round_, zlib.crc32(phase.encode())])
