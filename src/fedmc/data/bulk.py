"""Ratings far outside the bulk of a data set without a stated scale: a typo (17 for 1.7, 100
for 1.00) or a sentinel (-1, 99) that training would learn silently.

The rule: the bulk is ``[q01 - 1.5 IQR, q99 + 1.5 IQR]``, with ``q01`` and ``q99`` the 1st and 99th
percentiles and ``IQR`` the interquartile range (``q99 - q01`` where the quartiles meet, as
they do on a scale of few levels); a rating outside it is far outside the bulk. On a 1-to-5
scale (IQR 1 or 2) the bulk reaches at least -0.5 to 6.5: a rating on the scale never leaves
it, 17, -3 or 100 do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

WIDTHS = 1.5
"""How many interquartile ranges beyond the 1st and 99th percentiles the bulk reaches."""


@dataclass(frozen=True)
class Outlying:
    """The ratings far outside the bulk: how many, the bulk's bounds and the first few
    values (in the order read)."""

    count: int
    bulk: tuple[float, float]
    examples: tuple[float, ...]

    def sentence(self, source: str) -> str:
        """One line saying so, of the data ``source``."""
        shown = ", ".join(f"{v:g}" for v in self.examples)
        more = ", ..." if self.count > len(self.examples) else ""
        return (f"{source}: {self.count:,} rating(s) far outside the bulk "
                f"[{self.bulk[0]:g}, {self.bulk[1]:g}] of the others ({shown}{more}); they are "
                "trained on as they are: state the scale with --rating-scale LO,HI to refuse "
                "them")

    def record(self) -> dict[str, object]:
        """The facts as ``config.json`` keeps them."""
        return {"count": self.count, "bulk": list(self.bulk), "examples": list(self.examples)}


def outlying(values: np.ndarray, shown: int = 3) -> Outlying | None:
    """The ratings of ``values`` far outside their bulk (the module's rule), None if none."""
    if len(values) == 0:
        return None
    q01, q25, q75, q99 = np.percentile(values, [1, 25, 75, 99])
    spread = q75 - q25 if q75 > q25 else q99 - q01
    low, high = q01 - WIDTHS * spread, q99 + WIDTHS * spread
    far = np.flatnonzero((values < low) | (values > high))
    if not len(far):
        return None
    return Outlying(len(far), (float(low), float(high)),
                    tuple(float(v) for v in values[far[:shown]]))
