"""User-level DP on summed uploads: every client clips its upload, the sum carries Gaussian noise.

Each uploading client scales its whole upload (all named arrays together) to L2 norm at most
``clip`` (:func:`clip_uploads`), so adding or removing one user changes the cohort sum by at
most ``clip``. Gaussian noise of standard deviation ``noise * clip`` is added to every entry of
every summed array (:class:`GaussianSum`): by the server (central DP) or as one share of
variance ``(noise * clip)^2 / n`` per client of a cohort of ``n`` (distributed DP, with
secure aggregation hiding the rest); the sum carries the same noise either way, so the
simulation draws it once, on the sum, from the server's stream. :func:`with_user_dp` wraps an
algorithm so that both happen in every exchange, whichever driver runs it. The budget is
accounted in :mod:`fedmc.privacy.accounting`; ``docs/privacy.md`` has the argument.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.core.protocol import Algorithm, FederationInfo, NoiseOnSum
from fedmc.core.uploads import Stacked, Uploads


def squared_norms(stacked: Stacked) -> np.ndarray:
    """Squared L2 norm of every client's upload in ``stacked`` (its dense part plus its rows,
    times its scale)."""
    s = stacked.n_clients
    sq = np.zeros(s)
    dense = stacked.dense
    if dense is not None:
        flat = dense.reshape(s, -1)
        sq += (flat[0] @ flat[0]) if dense.strides[0] == 0 else np.einsum("ce,ce->c", flat, flat)
    rows = stacked.rows
    if rows is not None and len(rows.index):
        owner = np.repeat(np.arange(s), np.diff(rows.ptr))
        values = rows.values.reshape(len(rows.index), -1)
        per_row = np.einsum("qe,qe->q", values, values)
        if dense is not None:
            base = dense.reshape(s, dense.shape[1], -1)
            under = base[0][rows.index] if dense.strides[0] == 0 else base[owner, rows.index]
            per_row += 2.0 * np.einsum("qe,qe->q", under, values)
        sq += np.bincount(owner, weights=per_row, minlength=s)
    if stacked.scale is not None:
        sq *= stacked.scale**2
    return sq


def clip_uploads(uploads: Uploads, clip: float) -> Uploads:
    """Every client's upload scaled to L2 norm at most ``clip`` over all its named arrays."""
    if not uploads:
        return uploads
    norms = np.sqrt(sum(squared_norms(stacked) for stacked in uploads.values()))
    factors = np.minimum(1.0, clip / np.maximum(norms, np.finfo(float).tiny))
    return {name: stacked.scaled(factors) for name, stacked in uploads.items()}


@dataclass(frozen=True)
class GaussianSum:
    """Gaussian noise of standard deviation ``std`` on every entry of a cohort sum; with
    ``before`` (an algorithm's own local noise) applied first."""

    std: float
    before: NoiseOnSum | None = None

    def perturb_sum(self, total: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
        """``total`` plus the noise (the same whatever the cohort size ``n``: distributed
        shares of variance ``std^2 / n`` add up to it)."""
        if self.before is not None:
            total = self.before.perturb_sum(total, n, rng)
        return total + rng.normal(0.0, self.std, size=total.shape)


def with_user_dp(algorithm: Algorithm, clip: float, std: float) -> Algorithm:
    """``algorithm`` with every upload clipped to ``clip`` by its client and Gaussian noise of
    standard deviation ``std`` on every summed array."""

    def client_step(cfg, shard, state, msg, compute, upload):
        state, uploads = algorithm.client_step(cfg, shard, state, msg, compute, upload)
        return state, clip_uploads(uploads, clip) if len(upload) else uploads

    def local_noise(cfg, info: FederationInfo) -> Mapping[str, NoiseOnSum]:
        own = algorithm.local_noise(cfg, info)
        return {name: GaussianSum(std, own.get(name))
                for name in algorithm.upload_shapes(cfg, info)}

    return dataclasses.replace(algorithm, client_step=client_step, local_noise=local_noise)
