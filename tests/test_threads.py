"""BLAS on one thread inside a block (``fedmc.core.threads``), as it was after."""

from __future__ import annotations

import scipy.linalg.cython_blas  # noqa: F401 (the BLAS the kernels call, loaded before)
from threadpoolctl import threadpool_info

from fedmc.core.threads import one_blas_thread


def _blas_threads() -> list[int]:
    return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]


def test_one_blas_thread_inside_the_block_only():
    before = _blas_threads()
    assert before  # NumPy's and SciPy's BLAS are loaded
    with one_blas_thread():
        assert set(_blas_threads()) == {1}
    assert _blas_threads() == before
