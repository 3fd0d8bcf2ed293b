"""User-level DP on summed uploads: every client clips its upload, the sum carries Gaussian noise.

Each uploading client scales its whole upload (all named arrays together) to L2 norm at most
``clip`` (:func:`clip_uploads`), so adding or removing one user changes the cohort sum by at
most ``clip``. Gaussian noise of standard deviation ``noise * clip`` is added to every entry of
every summed array (:func:`add_noise`) by the server (central DP); under secure aggregation
the members add integer Skellam shares instead (:mod:`fedmc.privacy.skellam`). Their one
caller is :mod:`fedmc.federation.aggregator`, which decides who
clips and draws what in each mode. The budget is accounted in :mod:`fedmc.privacy.accounting`;
``docs/privacy.md`` has the argument.
"""

from __future__ import annotations

import numpy as np

from fedmc.core.uploads import Stacked, Summed, Uploads


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
        per_row = rows.squared_norms()  # OuterRows: from their factors, no row formed
        if dense is not None:
            values = rows.values.reshape(len(rows.index), -1)
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


def add_noise(summed: Summed, std: float, rng: np.random.Generator) -> Summed:
    """``summed`` with Gaussian noise of standard deviation ``std`` on every entry of every
    array (the server's draw: central DP)."""
    return summed.with_arrays({name: total + rng.normal(0.0, std, size=total.shape)
                               for name, total in summed.arrays.items()})

