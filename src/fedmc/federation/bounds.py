"""What one client's reply can hold: the bounds a server checks before it sums an upload or an
evaluation sum (in a real federation without secure aggregation, where it sees them).

Each algorithm's spec declares what its replies obey (:class:`fedmc.algorithms.spec.
AlgorithmSpec`: ``sums``, the kind of every evaluation sum, and ``nonnegative_uploads``); the
run adds a bound on the L2 norm of a client's whole upload (all its arrays together, as
user-level DP's clip measures it): the operator's ``max-upload-norm``, which honest clients
clip to as they clip to DP's bound, and with user-level DP the clip itself where no local
noise is added after it. :class:`ReplyBounds` checks them and raises :class:`OutOfBounds`
with the reason; whatever the bounds, an upload whose norm is not a finite number is refused.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from fedmc.core.uploads import Uploads
from fedmc.federation.defaults import GROWTH
from fedmc.federation.validation import sum_kind
from fedmc.privacy.gaussian import squared_norms

SumKind = Literal["nonnegative", "count", "cells", "per_user", "users"]
"""What an evaluation sum is: ``nonnegative`` (a sum of squares, of absolute values, a norm),
``count`` (a whole number >= 0), ``cells`` (a whole number of the client's (user, item)
cells: at most its users times the items), ``per_user`` (a sum over the client's users of a
value in [0, 1], a ranking metric: at most its users) or ``users`` (a whole number of the
client's users)."""
WHOLE: frozenset[str] = frozenset({"count", "cells", "users"})
SLACK = 1e-9  # relative: an upload clipped to the bound may exceed it by its rounding


class OutOfBounds(ValueError):
    """A reply outside what its algorithm can send."""


def upload_norm(uploads: Uploads) -> float:
    """The L2 norm of one client's upload over all its arrays (a batch of one)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return math.sqrt(float(sum(squared_norms(s)[0] for s in uploads.values())))


def lower_median(values: Sequence[float]) -> float:
    """The lower median of ``values`` (of two, the smaller): a value one of three or more
    cannot move, nor one of two raise."""
    return sorted(values)[(len(values) - 1) // 2]


@dataclass
class NormReference:
    """The default bound on a plain upload's norm, where the operator sets none and no DP clip
    binds (``max-upload-norm = "auto"``): :data:`GROWTH` times the phase's reference norm.

    The reference of a phase (a set-up, a round, a conjugate-gradient step: each has a scale
    of its own) is the lower median, over the clients whose uploads of that phase the server
    has taken, of each one's largest norm; in the phase's first exchange, the lower median of
    that exchange's norms. An honest client's norm varies with its data and shrinks as
    training converges, far less than a hundredfold, while a scaled upload (x1000) lies far
    outside; one client cannot move a lower median of three or more, nor raise one of two, so
    it cannot raise its own bound round by round. An upload in the first exchange of a phase
    that takes only one is not bounded (nothing to compare it with).

    Attributes
    ----------
    largest
        Per phase, each client's largest norm taken.
    """

    growth: float = GROWTH
    largest: dict[str, dict[int, float]] = field(default_factory=dict)

    def bound(self, phase: str, norms: Mapping[int, float]) -> float:
        """The bound on the uploads of an exchange of ``phase`` whose norms are ``norms``."""
        seen = self.largest.get(phase)
        values = [v for v in (seen.values() if seen else norms.values())
                  if math.isfinite(v) and v > 0]
        return self.growth * lower_median(values) if values else math.inf

    def take(self, phase: str, norms: Mapping[int, float]) -> None:
        """The norms of the uploads of an exchange of ``phase`` that the server took."""
        seen = self.largest.setdefault(phase, {})
        for client, norm in norms.items():
            seen[client] = max(seen.get(client, 0.0), norm)


@dataclass(frozen=True)
class ReplyBounds:
    """The bounds of one run's replies (module docstring).

    Attributes
    ----------
    sums
        The kind (:data:`SumKind`) of every evaluation sum the algorithm declares (others are
        not checked).
    nonnegative
        The uploads whose every entry is >= 0 (counts).
    cells
        Per client, its users times the items: the most a ``cells`` sum can count.
    users
        Per client, its users: the most a ``per_user`` or ``users`` sum can add up to.
    max_norm
        The operator's bound on the norm of a client's whole upload (inf: none).
    """

    sums: Mapping[str, str] = field(default_factory=dict)
    nonnegative: tuple[str, ...] = ()
    cells: Sequence[int] = ()
    users: Sequence[int] = ()
    max_norm: float = math.inf

    def size(self, client: int) -> float:
        """The square root of ``client``'s users (1 where unknown): how the norm of a sum over
        its users grows with their number, for uploads that are no larger per user than
        another client's."""
        return math.sqrt(max(self.users[client], 1)) if client < len(self.users) else 1.0

    def check_uploads(self, uploads: Uploads, clip: float = math.inf,
                      norm: float | None = None) -> None:
        """Refuse ``uploads`` (one client's) when its norm (``norm``, if the caller has it
        already) is not finite or exceeds the bound (the smaller of :attr:`max_norm` and
        ``clip``, the exchange's DP clip where it binds), or an upload declared nonnegative
        has a negative entry."""
        bound = min(self.max_norm, clip)
        if norm is None:
            norm = upload_norm(uploads)
        if not math.isfinite(norm):
            raise OutOfBounds("its norm is not a finite number")
        if norm > bound * (1 + SLACK):
            raise OutOfBounds(f"its norm {norm:.6g} exceeds the bound {bound:.6g}")
        for name in self.nonnegative:
            s = uploads.get(name)
            parts = [] if s is None else [s.dense, None if s.rows is None else s.rows.values]
            if any(p is not None and np.any(p < 0) for p in parts):
                raise OutOfBounds(f"upload {name!r} has negative entries (counts)")

    def check_sums(self, client: int, sums: Mapping[str, float]) -> None:
        """Refuse evaluation ``sums`` of ``client`` that its algorithm cannot produce."""
        for key, value in sums.items():
            kind = sum_kind(self.sums, key)
            if kind is None:
                continue
            if value < 0:
                raise OutOfBounds(f"evaluation sum {key!r} is negative ({value:g})")
            if kind in WHOLE and value != round(value):
                raise OutOfBounds(f"evaluation sum {key!r} is a count, not {value:g}")
            if (kind in ("per_user", "users") and client < len(self.users)
                    and value > self.users[client] * (1 + SLACK)):
                raise OutOfBounds(f"evaluation sum {key!r} is {value:g}, more than the "
                                  f"client's users ({self.users[client]}) can add up to")
            if kind == "cells" and client < len(self.cells) and value > self.cells[client]:
                raise OutOfBounds(f"evaluation sum {key!r} counts {value:g} cells, more than "
                                  f"the client's users times the items ({self.cells[client]})")
