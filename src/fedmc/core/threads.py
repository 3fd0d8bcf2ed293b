"""Threads of the libraries under the kernels.

A Numba kernel that runs its rows in parallel and calls BLAS inside each (a small matrix
product per row: :func:`fedmc.core.uploads._scatter_outer`) needs the BLAS on one thread, else
each of its threads may start the library's own and the machine runs more threads than cores.
:func:`one_blas_thread` holds every loaded BLAS (NumPy's, SciPy's, the one Numba calls) to one
thread for a block, through ``threadpoolctl``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from typing import Any


@cache
def _controller() -> Any:
    """The BLAS libraries of this process (found once: the search reads every loaded library),
    SciPy's, which Numba's kernels call, loaded first."""
    import scipy.linalg.cython_blas  # noqa: F401 (loads the library the kernels call)
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@contextmanager
def one_blas_thread() -> Iterator[None]:
    """Every loaded BLAS on one thread inside the block, as it was after."""
    with _controller().limit(limits=1, user_api="blas"):
        yield
