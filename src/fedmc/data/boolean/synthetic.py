"""The paper's synthetic Boolean data (Sec. 4.1): dense random tiles plus destructive XOR noise."""

from __future__ import annotations

import numpy as np

from fedmc.errors import ConfigError


def synthetic_tiles(
    n: int,
    m: int,
    k: int = 10,
    noise: float = 0.1,
    tile_density: float = 0.9,
    size_range: tuple[float, float] = (1 / 20, 1 / 5),
    seed: int = 0,
) -> tuple[np.ndarray, np.ndarray]:
    """Ground truth ``G`` of ``k`` random tiles and data ``A = G xor N``.

    Best reading of Sec. 4.1 (spec section 5.1): each tile is an axis-aligned block whose
    height and width are uniform in ``size_range`` times ``n`` and ``m`` and whose top-left
    corner is uniform (clipped at the border, overlaps allowed); a cell of a tile is 1 with
    probability ``tile_density``. ``N`` is i.i.d. Bernoulli(``noise``), so ``noise = 0.5`` is
    pure noise.

    Returns
    -------
    A, G
        ``uint8`` arrays of shape ``(n, m)``: the noisy data and the noise-free signal.
    """
    if not 0.0 <= noise <= 0.5:
        raise ConfigError(f"XOR noise must lie in [0, 0.5], got {noise}")
    if not 0.0 < tile_density <= 1.0:
        raise ConfigError(f"tile density must lie in (0, 1], got {tile_density}")
    if n < 1 or m < 1 or k < 1:
        raise ConfigError(f"n, m and k must be positive, got {n}, {m}, {k}")
    lo, hi = size_range
    if not 0.0 < lo <= hi <= 1.0:
        raise ConfigError(f"tile size range must satisfy 0 < lo <= hi <= 1, got {size_range}")
    rng = np.random.default_rng(seed)
    G = np.zeros((n, m), dtype=np.uint8)
    for _ in range(k):
        h = rng.integers(max(1, round(lo * n)), max(1, round(hi * n)) + 1)
        w = rng.integers(max(1, round(lo * m)), max(1, round(hi * m)) + 1)
        r, c = rng.integers(0, n), rng.integers(0, m)
        block = G[r : r + h, c : c + w]
        block |= (rng.random(block.shape) < tile_density).astype(np.uint8)
    A = G.copy()
    chunk = max(1, 2**22 // m)
    for start in range(0, n, chunk):
        rows = A[start : start + chunk]
        rows ^= (rng.random(rows.shape) < noise).astype(np.uint8)
    return A, G
