"""What a run records of its rating scale: the range its predictions are clipped to and where
that range comes from, and the ratings far outside the bulk where no scale is known
(:mod:`fedmc.data.bulk`; a warning before training).

A stated scale (``--rating-scale``) and a named data set's are public facts, checked where the
ratings are read (a rating outside is refused by file and line). The range inferred from the
training ratings (their smallest and largest) is a function of the data: a private run neither
records nor warns of it (``docs/privacy.md``).
"""

from __future__ import annotations

import warnings
from typing import Any

from fedmc.data import FederatedData
from fedmc.data.bulk import outlying
from fedmc.data.federated import DataOutline
from fedmc.errors import RunWarning
from fedmc.run.data_settings import DataSettings

INFERRED = "training ratings"
"""``value_range_from`` of a range inferred from the data: their smallest and largest rating."""


def scale_facts(settings: DataSettings, data: FederatedData | DataOutline,
                private: bool) -> dict[str, Any]:
    """``config.json``'s facts of the scale of ``data`` (read as ``settings`` say):
    ``value_range`` (what predictions are clipped to) and ``value_range_from`` (``"rating
    scale"``: the stated or the data set's; :data:`INFERRED`), and without a known scale the
    ratings far outside the bulk (``outlying_ratings``, warned of as a :class:`RunWarning`).
    Nothing inferred in a ``private`` run."""
    declared = settings.normalize == "public" or settings.rating_scale is not None
    if private and not declared:
        return {}
    facts: dict[str, Any] = {"value_range": list(data.value_range),
                             "value_range_from": "rating scale" if declared else INFERRED}
    # (data loaded by the shards of a population are a synthetic set's: its scale is known)
    if settings.public_scale() is None and not settings.implicit \
            and isinstance(data, FederatedData):
        far = outlying(data.normalizer.inverse(data.train.values))
        if far is not None:
            warnings.warn(far.sentence(data.name), RunWarning, stacklevel=3)
            facts["outlying_ratings"] = far.record()
    return facts
