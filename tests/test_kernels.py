"""The shared kernels against NumPy, at ranks whose scratch lives on the stack and on the heap."""

from __future__ import annotations

import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fedmc.core.kernels import (
    MAX_UNROLLED_RANK,
    SUM_BLOCKS,
    fro_norm,
    gram_fro,
    normal_equations,
    quad_gradient,
    rank_token,
    rating_blocks,
    residual_sums,
    scratch_matrix,
    scratch_vector,
)

# 1 and 3: tiny; 8: a usual rank; 70 > MAX_UNROLLED_RANK: an array token, scratch on the heap
RANKS = [1, 3, 8, 70]


@numba.njit
def _group_statistics(ptr, idx, values, X, token):
    """Every group's ``(A, b, ||A||_F, A x - b)`` through stack (or heap) scratch arrays."""
    r = len(token)
    n_groups = ptr.shape[0] - 1
    A_out = np.empty((n_groups, r, r))
    b_out = np.empty((n_groups, r))
    fro = np.empty(n_groups)
    grad = np.empty((n_groups, r))
    A = scratch_matrix(token)
    b = scratch_vector(token)
    g = scratch_vector(token)
    x = scratch_vector(token)
    for a in range(r):
        x[a] = 0.5 - a / r
    for k in range(n_groups):
        normal_equations(ptr, idx, values, k, X, A, b, token)
        A_out[k] = A
        b_out[k] = b
        fro[k] = fro_norm(A, token)
        quad_gradient(A, b, x, g, token)
        grad[k] = g
    return A_out, b_out, fro, grad


@pytest.mark.parametrize("r", RANKS)
def test_normal_equations_match_numpy(r):
    assert isinstance(rank_token(r), tuple) == (r <= MAX_UNROLLED_RANK) == (r != 70)
    rng = np.random.default_rng(r)
    X = rng.normal(size=(9, r))
    ptr = np.array([0, 3, 3, 8, 14])  # one empty group
    idx = rng.integers(0, 9, size=14).astype(np.int32)
    values = rng.normal(size=14)
    A, b, fro, grad = _group_statistics(ptr, idx, values, X, rank_token(r))
    x = 0.5 - np.arange(r) / r
    for k in range(4):
        rows = X[idx[ptr[k]:ptr[k + 1]]]
        A_ref = rows.T @ rows
        b_ref = rows.T @ values[ptr[k]:ptr[k + 1]]
        np.testing.assert_allclose(A[k], A_ref, atol=1e-12)
        np.testing.assert_allclose(b[k], b_ref, atol=1e-12)
        np.testing.assert_allclose(fro[k], np.linalg.norm(A_ref), atol=1e-12)
        np.testing.assert_allclose(grad[k], A_ref @ x - b_ref, atol=1e-11)


@pytest.mark.parametrize("r", RANKS)
def test_gram_fro_matches_numpy(r):
    X = np.random.default_rng(r).normal(size=(11, r))
    assert gram_fro(X, rank_token(r)) == pytest.approx(np.linalg.norm(X.T @ X), rel=1e-12)


@pytest.mark.parametrize("r", RANKS)
def test_residual_sums_match_numpy(r):
    rng = np.random.default_rng(r)
    U = rng.normal(size=(4, r)) / np.sqrt(r)
    V = rng.normal(size=(6, r)) / np.sqrt(r)
    indptr = np.array([0, 2, 2, 5, 9])
    indices = np.array([0, 5, 1, 2, 3, 0, 1, 4, 5], dtype=np.int32)
    values = rng.normal(size=9)
    rows = np.repeat(np.arange(4), np.diff(indptr))
    z = np.einsum("kr,kr->k", U[rows], V[indices])
    mean, scale, lo, hi = 3.0, 1.5, 2.0, 4.0
    e = np.clip(z * scale + mean, lo, hi) - (values * scale + mean)
    got = residual_sums(indptr, indices, values, U, V, mean, scale, lo, hi, rank_token(r))
    np.testing.assert_allclose(got, [np.sum((z - values) ** 2), np.sum(e**2), np.sum(abs(e))],
                               rtol=1e-12)


def test_scratch_lives_in_the_callers_frame_without_llvm_inlining(tmp_path):
    """With ``NUMBA_OPT=0`` nothing is inlined by LLVM: scratch arrays must still be valid."""
    script = (
        "import numpy as np\n"
        "from tests.test_kernels import test_normal_equations_match_numpy as t\n"
        "t(3)\n"
    )
    env = {**os.environ, "NUMBA_OPT": "0", "NUMBA_CACHE_DIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, cwd=os.path.dirname(os.path.dirname(__file__)))
    assert done.returncode == 0, done.stderr[-2000:]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=300))
def test_rating_blocks_are_the_rows_a_plain_scan_finds(row_sizes):
    """:func:`fedmc.core.kernels.rating_blocks` (NumPy) against the scan it replaces: block
    ``k`` starts at the first row whose ratings start at or after ``k / SUM_BLOCKS`` of all."""
    indptr = np.concatenate([[0], np.cumsum(row_sizes)]).astype(np.int64)
    m = len(row_sizes)
    expected, row = [], 0
    for k in range(SUM_BLOCKS):
        while row < m and indptr[row] < indptr[m] * k // SUM_BLOCKS:
            row += 1
        expected.append(row)
    expected.append(m)
    found = rating_blocks(indptr)
    assert found.dtype == np.int64 and found.tolist() == expected
