"""Numba kernels shared by the matrix-factorization algorithms.

Conventions: ratings are a CSR over users (``indptr``, ``indices`` = item, ``values``), user
factors ``U`` are ``(m, r)`` and item factors are stored item-major as ``(n, r)`` arrays — the
transpose of the paper's ``r x n`` matrices ``V`` and ``W_i`` — so that the factor of item ``j``
is the contiguous row ``W[j]``. All kernels are compiled with ``nogil=True``: ``fedmc run``
trains in a worker thread that holds no GIL inside them, so the main thread handles SIGINT and
SIGTERM at once whatever kernel runs (:mod:`fedmc.cli.interrupts`).

The kernels Python calls are cached (``cache=True``); the helpers here, called only inside
kernels (and FedMC-ADMM's steps, :mod:`fedmc.algorithms.fedmc_admm.kernels`), are not cached
on their own: each kernel compiles them into itself and its cache entry holds them. So a
kernel's machine code never depends on which helpers the cache held when it was compiled
(LLVM inlines a helper compiled in the same process, not one loaded from the cache, and a
sum may then round differently), and two processes may compile kernels that call the same
helpers at once (a first run does: :mod:`fedmc.run.precompile`). A step that a kernel calls
once and that calls helpers in turn is inlined into it instead (``inline="always"``: FedMC-ADMM's
``u_steps``, ``w_steps``, :func:`fedmc.core.ridge.solve_row`, :func:`~fedmc.core.ridge.cg_steps`):
Numba optimizes each compiled callee's code on its own and again inside its caller, so every
level of calls costs a pass over the code below it. The small helpers stay compiled on their
own: inlined at every call site, they were no faster to compile.

Kernels that loop over the rank take a *rank token* (:func:`rank_token`): for ``r <= 64`` a
tuple of ``r`` zeros, whose Numba type ``UniTuple(float64, r)`` carries ``r``. Inside,
``r = len(token)`` is then a compile-time constant, so Numba compiles one version per rank in
which LLVM unrolls the ``r``-loops, and the ``r x r`` scratch arrays of :func:`scratch_matrix`
live on the stack (in registers for small ``r``) instead of the heap. This halved FedMC-ADMM's
round on MovieLens 1M (``benchmarks/README.md``); the price is one compilation per rank. Larger
ranks get an array token (one compiled version for all of them, scratch on the heap): such ranks
gain little from unrolling, and their scratch would crowd the stack.

Kernels that loop over many clients, rows or items run their outer loop on a pool of threads
(:func:`fedmc.core.parallel.parallel_for`: compiled serially with ``nogil=True`` over a range of
it, several times faster to compile than Numba's ``prange``).
"""

from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, overload

from fedmc.core.parallel import ordered_sum, parallel_for

SUM_BLOCKS = 64  # parallel sums over ratings: fixed blocks, so results do not depend on threads
MAX_UNROLLED_RANK = 64  # up to this rank the token is a tuple (r x r scratch <= 32 KiB)

RankToken = tuple[float, ...] | np.ndarray


_GENERIC_WIDTHS: set[int] = set()  # widths this process runs on the generic kernels


def rank_token(r: int) -> RankToken:
    """The argument that carries the rank ``r`` into the kernels: ``r`` zeros, as a tuple (its
    type holds ``r``) up to :data:`MAX_UNROLLED_RANK`, as an array above (or when
    :func:`use_generic_kernels` asked for the generic kernels at this ``r``)."""
    if r <= MAX_UNROLLED_RANK and r not in _GENERIC_WIDTHS:
        return (0.0,) * r
    return np.zeros(r)


def use_generic_kernels(r: int, generic: bool = True) -> None:
    """Run rank ``r`` on the generic kernels (array token: compiled once for every rank) instead
    of the ones specialized for ``r`` (compiled per rank, faster). The command line does this
    for a rank whose specialized kernels are not compiled yet (:mod:`fedmc.run.precompile`). The
    two agree to rounding (the compiler may order a sum differently)."""
    if generic:
        _GENERIC_WIDTHS.add(r)
    else:
        _GENERIC_WIDTHS.discard(r)


def _stack_array_intrinsic(nd: int):
    """An intrinsic ``f(token)``: a C-contiguous ``float64`` array of shape ``(r,) * nd`` on the
    calling frame's stack. It has no owner, so it must not outlive the kernel that made it
    (never return or store it); that is why :func:`scratch_vector` and :func:`scratch_matrix`
    are inlined into their caller (``tests/test_kernels.py`` checks it with LLVM's
    optimizations off, where a call that was not inlined would read a dead frame)."""

    def typer(typingctx, token):
        r = token.count
        arrty = types.Array(types.float64, nd, "C")

        def codegen(context, builder, sig, args):
            def intp(v):
                return context.get_constant(types.intp, v)

            data = cgutils.alloca_once(
                builder, context.get_value_type(types.float64), size=r**nd
            )
            ary = context.make_array(arrty)(context, builder)
            context.populate_array(
                ary,
                data=data,
                shape=[intp(r)] * nd,
                strides=[intp(8 * r ** (nd - 1 - k)) for k in range(nd)],
                itemsize=intp(8),
                meminfo=None,
            )
            return ary._getvalue()

        return arrty(token), codegen

    return intrinsic(typer)


_stack_vector = _stack_array_intrinsic(1)
_stack_matrix = _stack_array_intrinsic(2)


def scratch_vector(token: RankToken) -> np.ndarray:
    """An uninitialized length-``r`` ``float64`` work array, on the stack inside kernels."""
    return np.empty(len(token))


def scratch_matrix(token: RankToken) -> np.ndarray:
    """An uninitialized ``r x r`` ``float64`` work array, on the stack inside kernels."""
    return np.empty((len(token), len(token)))


@overload(scratch_vector, inline="always")
def _scratch_vector(token):
    if isinstance(token, types.UniTuple):
        return lambda token: _stack_vector(token)
    return lambda token: np.empty(len(token))


@overload(scratch_matrix, inline="always")
def _scratch_matrix(token):
    if isinstance(token, types.UniTuple):
        return lambda token: _stack_matrix(token)
    return lambda token: np.empty((len(token), len(token)))


@numba.njit(nogil=True)
def heap_sort(a: np.ndarray) -> None:
    """Sort the 1-D array ``a`` in place, ascending (heapsort). Written out because Numba's
    ``ndarray.sort`` and ``np.sort`` take about 1.5 s to compile, which a first run would pay;
    for distinct values (item ids) the result is the same as theirs."""
    n = a.shape[0]
    for top in range(n // 2 - 1, -1, -1):
        _sift_down(a, top, n)
    for end in range(n - 1, 0, -1):
        a[0], a[end] = a[end], a[0]
        _sift_down(a, 0, end)


@numba.njit(nogil=True)
def _sift_down(a: np.ndarray, root: int, end: int) -> None:
    """Move ``a[root]`` down the max-heap ``a[:end]`` to its place."""
    while 2 * root + 1 < end:
        child = 2 * root + 1
        if child + 1 < end and a[child] < a[child + 1]:
            child += 1
        if a[root] >= a[child]:
            return
        a[root], a[child] = a[child], a[root]
        root = child


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def dot(a: np.ndarray, b: np.ndarray, token: RankToken) -> float:
    """Inner product of two length-``r`` arrays."""
    s = 0.0
    for k in range(len(token)):
        s += a[k] * b[k]
    return s


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def mirror_upper(A: np.ndarray, token: RankToken) -> None:
    """Copy the upper triangle of the ``r x r`` array ``A`` onto its lower triangle."""
    for a in range(len(token)):
        for c in range(a):
            A[a, c] = A[c, a]


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def normal_equations(
    ptr: np.ndarray,
    idx: np.ndarray,
    values: np.ndarray,
    g: int,
    X: np.ndarray,
    A: np.ndarray,
    b: np.ndarray,
    token: RankToken,
) -> None:
    """``A = sum_q x_q x_q^T`` and ``b = sum_q values[q] x_q``, ``x_q = X[idx[q]]``, q in group g.

    With the user CSR (``ptr, idx = indptr, indices``, group = user row ``t``, ``X = W``) this
    is row ``t``'s share of ``f_i = 1/2 ||P_Omega(M - U W)||^2``, quadratic in ``u_t`` with
    gradient ``A u_t - b`` (row ``t`` of ``P_Omega(U W - M) W^T`` in (14)). With a client's
    item-major layout (group = item ``j``, ``idx`` = user rows, ``X = U``) it is column ``j``:
    gradient ``A w_j - b`` of (15). Either way ``||A||_F`` is the block's Lipschitz constant.
    Building ``(A, b)`` once costs ``r^2`` per rating; each of the ``N`` steps then costs
    ``r^2`` instead of a pass over the ratings.
    """
    r = len(token)
    for a in range(r):
        b[a] = 0.0
        for c in range(a, r):
            A[a, c] = 0.0
    for q in range(ptr[g], ptr[g + 1]):
        x = X[idx[q]]
        m = values[q]
        for a in range(r):
            b[a] += m * x[a]
            for c in range(a, r):  # upper triangle; mirrored below
                A[a, c] += x[a] * x[c]
    mirror_upper(A, token)


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def gram_fro(X: np.ndarray, token: RankToken) -> float:
    """``|| X^T X ||_F`` of a ``(k, r)`` array, without forming anything larger than ``r x r``."""
    r = len(token)
    G = scratch_matrix(token)
    for a in range(r):
        for b in range(a, r):
            G[a, b] = 0.0
    for k in range(X.shape[0]):
        for a in range(r):
            xa = X[k, a]
            for b in range(a, r):  # upper triangle
                G[a, b] += xa * X[k, b]
    total = 0.0
    for a in range(r):
        total += G[a, a] * G[a, a]
        for b in range(a + 1, r):
            total += 2.0 * G[a, b] * G[a, b]
    return np.sqrt(total)


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def fro_norm(A: np.ndarray, token: RankToken) -> float:
    """Frobenius norm of an ``r x r`` array."""
    total = 0.0
    for a in range(len(token)):
        for c in range(len(token)):
            total += A[a, c] * A[a, c]
    return np.sqrt(total)


@numba.njit(nogil=True, fastmath=True, error_model="numpy")
def quad_gradient(
    A: np.ndarray, b: np.ndarray, x: np.ndarray, g: np.ndarray, token: RankToken
) -> None:
    """``g = A x - b`` for ``r x r`` ``A``."""
    r = len(token)
    for a in range(r):
        s = -b[a]
        for c in range(r):
            s += A[a, c] * x[c]
        g[a] = s


@numba.njit(nogil=True)
def cholesky_solve_upper(A: np.ndarray, b: np.ndarray) -> None:
    """Solve ``A x = b`` in place (``x`` into ``b``) for symmetric positive definite ``A``
    given by its upper triangle, which is overwritten by ``R`` with ``A = R^T R``."""
    k = b.shape[0]
    for j in range(k):
        s = A[j, j]
        for p in range(j):
            s -= A[p, j] * A[p, j]
        d = np.sqrt(s)
        A[j, j] = d
        for i in range(j + 1, k):
            s = A[j, i]
            for p in range(j):
                s -= A[p, j] * A[p, i]
            A[j, i] = s / d
    for i in range(k):  # R^T z = b
        s = b[i]
        for p in range(i):
            s -= A[p, i] * b[p]
        b[i] = s / A[i, i]
    for i in range(k - 1, -1, -1):  # R x = z
        s = b[i]
        for p in range(i + 1, k):
            s -= A[i, p] * b[p]
        b[i] = s / A[i, i]


def rating_blocks(indptr: np.ndarray) -> np.ndarray:
    """Row ranges ``ends[k]:ends[k+1]`` of ``SUM_BLOCKS`` blocks with about equal numbers of
    ratings (a row is never split): block ``k`` starts at the first row whose ratings start at
    or after ``k / SUM_BLOCKS`` of them. In NumPy: a compiled kernel would cost a first run
    about 0.4 s of compiling for a few microseconds of work."""
    m = indptr.shape[0] - 1
    starts = indptr[m] * np.arange(SUM_BLOCKS, dtype=np.int64) // SUM_BLOCKS
    return np.append(np.searchsorted(indptr[:m], starts, side="left"), m).astype(np.int64)


def residual_sums(
    indptr: np.ndarray,
    indices: np.ndarray,
    values: np.ndarray,
    U: np.ndarray,
    V: np.ndarray,
    mean: float,
    scale: float,
    lo: float,
    hi: float,
    token: RankToken,
) -> tuple[float, float, float]:
    """Sums over all ratings of the prediction ``U[t] . V[j]``.

    Returns ``(sum z-residual^2, sum residual^2, sum |residual|)``: the first on the normalized
    scale, the other two on the original scale after mapping the prediction back
    (``z * scale + mean``) and clipping it to ``[lo, hi]``. The rows are cut into
    ``SUM_BLOCKS`` blocks of about equal numbers of ratings, each summed in order and the
    blocks' sums added in order: the result does not depend on the number of threads or their
    scheduling.
    """
    ends = rating_blocks(indptr)
    part = np.zeros((SUM_BLOCKS, 3))
    parallel_for(_residual_block_sums, SUM_BLOCKS, ends, part, indptr, indices, values, U, V,
                 mean, scale, lo, hi, token)
    s0, s1, s2 = ordered_sum(part)
    return float(s0), float(s1), float(s2)


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _residual_block_sums(k0, k1, ends, part, indptr, indices, values, U, V, mean, scale, lo,
                         hi, token):
    """:func:`residual_sums` of the blocks ``k0:k1``, block ``k``'s into ``part[k]``."""
    for k in range(k0, k1):
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        for t in range(ends[k], ends[k + 1]):
            u = U[t]
            for q in range(indptr[t], indptr[t + 1]):
                z = dot(u, V[indices[q]], token)
                rz = z - values[q]
                s0 += rz * rz
                pred = min(max(z * scale + mean, lo), hi)
                e = pred - (values[q] * scale + mean)
                s1 += e * e
                s2 += abs(e)
        part[k, 0] = s0
        part[k, 1] = s1
        part[k, 2] = s2


def predict_pairs(
    users: np.ndarray, items: np.ndarray, U: np.ndarray, V: np.ndarray, token: RankToken
) -> np.ndarray:
    """``U[users[k]] . V[items[k]]`` for every pair ``k`` (rows of width ``r``), in parallel
    (:func:`fedmc.core.parallel.parallel_for`)."""
    out = np.empty(users.shape[0])
    parallel_for(_predict_pairs, users.shape[0], users, items, U, V, token, out)
    return out


@numba.njit(cache=True, nogil=True, fastmath=True, error_model="numpy")
def _predict_pairs(k0, k1, users, items, U, V, token, out):
    """:func:`predict_pairs` of the pairs ``k0:k1``."""
    for k in range(k0, k1):
        out[k] = dot(U[users[k]], V[items[k]], token)
