"""Rating normalization fitted on training ratings only."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from fedmc.errors import ConfigError

NormalizeKind = Literal["none", "center", "zscore"]


@dataclass(frozen=True)
class Normalizer:
    """An affine map ``z = (r - mean) / scale`` and its inverse.

    ``kind="zscore"`` is what the FedMC-ADMM reference code does to all ratings; here the
    mean and standard deviation come from the training ratings only.
    """

    kind: NormalizeKind = "none"
    mean: float = 0.0
    scale: float = 1.0

    @classmethod
    def fit(cls, values: np.ndarray, kind: NormalizeKind = "none") -> Normalizer:
        """Fit on training values."""
        if kind == "none":
            return cls("none", 0.0, 1.0)
        if len(values) == 0:
            raise ConfigError("cannot normalize: there are no training ratings")
        mean = float(np.mean(values))
        if kind == "center":
            return cls("center", mean, 1.0)
        if kind == "zscore":
            std = float(np.std(values))
            return cls("zscore", mean, std if std > 0 else 1.0)
        raise ConfigError(f"unknown normalization {kind!r}: use none|center|zscore")

    def transform(self, values: np.ndarray) -> np.ndarray:
        """Original scale to normalized scale."""
        return (np.asarray(values, dtype=np.float64) - self.mean) / self.scale

    def inverse(self, z: np.ndarray) -> np.ndarray:
        """Normalized scale to original scale."""
        return np.asarray(z, dtype=np.float64) * self.scale + self.mean

    @property
    def is_identity(self) -> bool:
        """True when no normalization is applied."""
        return self.kind == "none"
