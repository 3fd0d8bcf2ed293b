"""What clients upload and the only thing the server is handed: the sum of the uploads.

A client step returns, for every uploading client of its batch, a set of named arrays (an
:data:`Uploads` mapping of name to :class:`Stacked`). The driver, and only the driver, adds
them up with :func:`sum_uploads`, which is the one place a :class:`Summed` is made. Server steps
take a :class:`Summed`; they never see a single client's upload. That is exactly what secure
aggregation reveals (the cohort's sum), and it is where central differential privacy adds its
noise (:meth:`Summed.with_arrays`).

A batch of ``s`` clients contributes to one named array of shape ``shape`` in one of three
forms, whichever is cheapest for the algorithm:

* ``dense``: an ``(s, *shape)`` array, row ``k`` is client ``k``'s upload. It may be a
  broadcast view (stride 0 along the first axis) when every client of the batch uploads the
  same array, e.g. the columns that all RFRec clients share; the sum is then one
  multiplication.
* ``rows``: a :class:`RowPatch`, sparse rows (client ``k`` adds ``values[q]`` to row
  ``index[q]``, ``q`` in ``ptr[k]:ptr[k+1]``), e.g. the rated items of a one-user client; or
  :class:`OuterRows`, sparse rows of packed symmetric statistics kept by their factors (the
  normal equations of least squares, e.g. federated ALS's item step), whose rows are formed
  only where they are summed, and which clients may send as those factors
  (:class:`OuterFactors`) rather than as rows; or :class:`~fedmc.core.gram_rows.GramRows`,
  the item-item Gram matrix of a client's users kept by their sparse rows (EASE's upload);
* both: the rows are added to the dense part.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field

import numba
import numpy as np

from fedmc.core.gram_rows import GramRows
from fedmc.core.parallel import parallel_for, threads
from fedmc.core.threads import one_blas_thread

BYTES_PER_NUMBER = 8  # payload accounting: float64 values, indices counted as one number each


@dataclass(frozen=True)
class RowPatch:
    """Sparse row additions of a batch: client ``k`` adds ``values[q]`` to row ``index[q]`` of
    its upload for ``q`` in ``ptr[k]:ptr[k+1]`` (rows distinct within a client)."""

    ptr: np.ndarray  # int64, s + 1
    index: np.ndarray  # int64, one per stored row
    values: np.ndarray  # (nnz, *row_shape)

    @property
    def n_clients(self) -> int:
        """Number of clients ``s`` in the batch."""
        return len(self.ptr) - 1

    @property
    def width(self) -> int:
        """Numbers in one stored row."""
        return int(np.prod(self.values.shape[1:], dtype=np.int64))

    def numbers(self) -> int:
        """Numbers the batch's clients send: each stored row and its index."""
        return len(self.index) * (self.width + 1)

    def squared_norms(self) -> np.ndarray:
        """The squared L2 norm of every stored row."""
        values = self.values.reshape(len(self.index), -1)
        return np.einsum("qe,qe->q", values, values)

    def add_to(self, flat: np.ndarray, weights: np.ndarray) -> None:
        """``flat[index[q]] += weights[k] values[q]`` for the rows ``q`` of every client ``k``
        (``flat``: the summed array as ``(rows, width)``)."""
        values = self.values.reshape(len(self.index), flat.shape[1])
        _scatter_rows(flat, self.ptr, self.index, values, weights.astype(np.float64))


@dataclass(frozen=True)
class TriangleRows(RowPatch):
    """:class:`RowPatch` rows of a symmetric upload that arrived as its packed upper triangle
    (a :class:`~fedmc.core.gram_rows.GramRows` client's, over Flower's wire): the rows
    themselves, counted as what was sent, per row its index and count of entries, and each of
    the ``entries`` with its column (:meth:`fedmc.core.gram_rows.GramRows.numbers`)."""

    entries: int = 0

    def numbers(self) -> int:
        """Numbers the client sent: its rows' indices and counts, its entries and columns."""
        return 2 * len(self.index) + 2 * self.entries


def svec_pairs(d: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The packing ``svec`` of a symmetric ``d x d`` matrix ``A`` into ``d (d + 1) / 2``
    numbers: entry ``e`` is ``coef[e] * A[row[e], col[e]]`` over the upper triangle, row by
    row, with ``coef = 1`` on the diagonal and ``sqrt(2)`` off it, so that
    ``||svec(A)||_2 = ||A||_F`` (the isometric packing of semidefinite programming)."""
    row, col = np.triu_indices(d)
    coef = np.where(row == col, 1.0, np.sqrt(2.0))
    return row.astype(np.int64), col.astype(np.int64), coef


@dataclass(frozen=True)
class OuterRows:
    """Sparse rows of packed normal-equation statistics, kept by their factors.

    Client ``k`` of the batch adds to row ``index[g]`` of its upload, for every group ``g`` in
    ``ptr[k]:ptr[k+1]`` (rows distinct within a client), the row

        [ svec(sum_q a[q] x_q x_q^T) | sum_q b[q] x_q ],       x_q = vectors[vec[q]],

    over the group's terms ``q`` in ``term_ptr[g]:term_ptr[g+1]`` (``svec``:
    :func:`svec_pairs`; ``d`` = the vectors' length, ``width = d (d + 1) / 2 + d``), or with
    ``gram=False`` only its last part, ``sum_q b[q] x_q`` (``width = d``; ``a`` unused). A row is
    what a client holding those terms sends (:attr:`values` forms the rows;
    :meth:`squared_norms` gives their true norms without forming them); the batch keeps a
    term as three numbers and a reference to a shared vector instead of a row of ``width``
    numbers, and :meth:`add_to` adds the terms straight into the sum, so a cohort's uploads
    cost memory by their terms, not their rows.
    """

    ptr: np.ndarray  # int64, s + 1: groups of each client
    index: np.ndarray  # int64, one per group: the row it adds to
    term_ptr: np.ndarray  # int64, groups + 1
    vec: np.ndarray  # int64, one per term: its vector
    a: np.ndarray  # float64, one per term: weight of x x^T
    b: np.ndarray  # float64, one per term: weight of x
    vectors: np.ndarray  # (vectors, d)
    gram: bool = True  # False: rows of sum_q b[q] x_q alone

    @property
    def n_clients(self) -> int:
        """Number of clients ``s`` in the batch."""
        return len(self.ptr) - 1

    @property
    def width(self) -> int:
        """Numbers in one row: ``d (d + 1) / 2 + d`` (``d`` without the Gram part)."""
        d = self.vectors.shape[1]
        return d * (d + 1) // 2 + d if self.gram else d

    def numbers(self) -> int:
        """Numbers the batch's clients send: each row and its index."""
        return len(self.index) * (self.width + 1)

    @property
    def values(self) -> np.ndarray:
        """The rows themselves, ``(groups, width)``: what the clients send (formed anew on
        every access)."""
        out = np.zeros((len(self.index), self.width))
        _outer_rows(out, self.term_ptr, self.vec, self.a, self.b, self.vectors, self.gram)
        return out

    @property
    def _gram_weights(self) -> np.ndarray:
        """``a``, or zeros without the Gram part (its weights then weigh nothing)."""
        return self.a if self.gram else np.zeros(len(self.vec))

    def squared_norms(self) -> np.ndarray:
        """The squared L2 norm of every row, from the terms without forming the rows:
        ``||svec(sum_q a_q x_q x_q^T)||^2 + ||sum_q b_q x_q||^2 = sum_{q,p} (a_q a_p
        (x_q . x_p)^2 + b_q b_p (x_q . x_p))`` (``svec`` is an isometry; ``a = 0`` without
        the Gram part)."""
        out = np.empty(len(self.index))
        _outer_squared_norms(out, self.term_ptr, self.vec, self._gram_weights, self.b,
                             self.vectors)
        return out

    def add_to(self, flat: np.ndarray, weights: np.ndarray) -> None:
        """Add every client's rows, times ``weights[k]``, into ``flat`` (the summed
        ``(rows, width)`` array), row by row (:func:`_scatter_outer`), BLAS on one thread
        (the rows are the parallel loop: a BLAS that threads each row's small product too
        would run more threads than cores); without the Gram part, term by term
        (:func:`_scatter_linear`)."""
        vectors = np.ascontiguousarray(self.vectors, dtype=np.float64)
        if not self.gram:
            _scatter_linear(flat, self.ptr, self.index, self.term_ptr, self.vec, self.b,
                            vectors, weights.astype(np.float64), threads())
            return
        with one_blas_thread():
            _scatter_outer(flat, self.ptr, self.index, self.term_ptr, self.vec, self.a,
                           self.b, vectors, weights.astype(np.float64))


@dataclass(frozen=True)
class OuterFactors(OuterRows):
    """:class:`OuterRows` sent as their factors: a client sends its vectors, and per group the
    row it adds to and its terms (vector, ``a``, ``b``); the receiver forms the rows
    (:meth:`add_to`, the same sum). ``d (d + 1) / 2 + d`` numbers and an index per row become
    the index, a term count and three numbers per term, plus the vectors: the traffic of a
    client whose groups share a few vectors (a one-user client of federated ALS: two vectors,
    one or two terms per rated item) falls by about the width over eight. A client's factors
    tell its receiver no less than its rows, and where one vector serves many rows (several
    users in one client) more: it is for clients whose rows determine their factors."""

    def numbers(self) -> int:
        """Numbers the batch's clients send: the vectors, each group's row index and term
        count, and each term's vector, ``a`` (with the Gram part) and ``b``."""
        return self.vectors.size + 2 * len(self.index) + (3 if self.gram else 2) * len(self.vec)


@dataclass(frozen=True)
class ScaledRows:
    """Sparse rows that are multiples of one vector per client: client ``k`` of the batch adds
    ``b[q] * vectors[k]`` to row ``index[q]`` of its upload for ``q`` in ``ptr[k]:ptr[k+1]``
    (rows distinct within a client; ``width = d``, the vectors' length), e.g. what a one-user
    client of federated ALS's item-step exchanges sends, each rated item's share a multiple of
    its user vector. The batch keeps one number per row and a vector per client; a client
    sends the rows themselves (``d`` numbers and an index each) or, ``factored``, its vector
    and per row the index and ``b`` (its rows determine them: a multiple of one vector), which
    the receiver multiplies out (:meth:`add_to`)."""

    ptr: np.ndarray  # int64, s + 1
    index: np.ndarray  # integers (a view of a shard's int32 items, say), one per row
    b: np.ndarray  # float64, one per row
    vectors: np.ndarray  # (s, d): one per client
    factored: bool = False

    @property
    def n_clients(self) -> int:
        """Number of clients ``s`` in the batch."""
        return len(self.ptr) - 1

    @property
    def width(self) -> int:
        """Numbers in one row: ``d``."""
        return int(self.vectors.shape[1])

    def numbers(self) -> int:
        """Numbers the batch's clients send: each row and its index, or (``factored``) each
        client's vector and each row's index and ``b``."""
        if self.factored:
            return self.vectors.size + 2 * len(self.index)
        return len(self.index) * (self.width + 1)

    def _owner(self) -> np.ndarray:
        """The client of every row."""
        return np.repeat(np.arange(self.n_clients), np.diff(self.ptr))

    @property
    def values(self) -> np.ndarray:
        """The rows themselves, ``(rows, d)`` (formed anew on every access)."""
        return self.b[:, None] * self.vectors[self._owner()]

    def squared_norms(self) -> np.ndarray:
        """The squared L2 norm of every row, ``b_q^2 ||x_k||^2``."""
        return self.b**2 * np.einsum("kd,kd->k", self.vectors, self.vectors)[self._owner()]

    def add_to(self, flat: np.ndarray, weights: np.ndarray) -> None:
        """``flat[index[q]] += weights[k] b[q] vectors[k]`` for the rows of every client ``k``
        (:func:`_scatter_scaled`)."""
        _scatter_scaled(flat, self.ptr, self.index, self.b,
                        np.ascontiguousarray(self.vectors, dtype=np.float64),
                        weights.astype(np.float64), threads())


@dataclass(frozen=True)
class Stacked:
    """One named upload of each client of a batch, before summation (module docstring)."""

    shape: tuple[int, ...]
    dense: np.ndarray | None = None
    rows: RowPatch | OuterRows | ScaledRows | GramRows | None = None  # OuterFactors: OuterRows
    scale: np.ndarray | None = None  # a factor per client (clipping), applied when summed

    def __post_init__(self) -> None:
        if self.dense is None and self.rows is None:
            raise ValueError("an upload needs a dense part, rows, or both")
        if self.dense is not None and self.dense.shape[1:] != tuple(self.shape):
            raise ValueError(f"dense part {self.dense.shape} does not stack {self.shape}")
        if self.dense is not None and self.rows is not None:
            if self.rows.n_clients != self.dense.shape[0]:
                raise ValueError("dense part and rows cover different numbers of clients")

    @property
    def n_clients(self) -> int:
        """Number of clients ``s`` in the batch."""
        if self.dense is not None:
            return self.dense.shape[0]
        assert self.rows is not None  # __post_init__: a dense part, rows, or both
        return self.rows.n_clients

    def nbytes(self) -> int:
        """Bytes the batch's clients send for this array: each its dense array if there is one
        (the rows then only modify it), else its sparse rows and their indices (or their
        factors: :class:`OuterFactors`)."""
        if self.dense is not None:
            return self.n_clients * int(np.prod(self.shape, dtype=np.int64)) * BYTES_PER_NUMBER
        assert self.rows is not None  # __post_init__: a dense part, rows, or both
        return self.rows.numbers() * BYTES_PER_NUMBER

    def scaled(self, factors: np.ndarray) -> Stacked:
        """The uploads with client ``k``'s multiplied by ``factors[k]`` (kept as a factor, so
        an upload every client shares stays one array)."""
        scale = factors if self.scale is None else self.scale * factors
        return Stacked(self.shape, self.dense, self.rows, scale)

    def weighted_sum(self, weights: np.ndarray) -> np.ndarray:
        """``sum_k weights[k] * upload_k`` as one ``shape`` array."""
        total = np.zeros(self.shape)
        self._add(total, weights)
        return total

    def each_client(self, block: int = 256) -> Iterator[np.ndarray]:
        """Every client's upload whole, ``block`` clients at a time (``(b, *shape)`` arrays),
        formed as the client itself forms it (its scaled dense part, then its scaled rows
        added): for a mechanism that treats every client's upload entry by entry (the
        integer secure sum, :mod:`fedmc.privacy.skellam`)."""
        s, rows = self.n_clients, self.rows
        scale = np.ones(s) if self.scale is None else self.scale
        values = (None if rows is None or not len(rows.index) else
                  rows.values.reshape(len(rows.index), -1))
        for lo in range(0, s, block):
            hi = min(lo + block, s)
            out = np.zeros((hi - lo, *self.shape))
            if self.dense is not None:
                out += scale[lo:hi].reshape(-1, *[1] * len(self.shape)) * self.dense[lo:hi]
            if rows is not None and values is not None:
                q0, q1 = rows.ptr[lo], rows.ptr[hi]
                owner = np.repeat(np.arange(hi - lo), np.diff(rows.ptr[lo:hi + 1]))
                flat = out.reshape(hi - lo, self.shape[0], -1)
                flat[owner, rows.index[q0:q1]] += scale[lo:hi][owner, None] * values[q0:q1]
            yield out

    def rounded_sum(self, gamma: float) -> np.ndarray:
        """``sum_k rint(gamma * upload_k)``: every client's whole upload (:meth:`each_client`)
        scaled and rounded to integers, then added up (as floats). Rows alone (no dense part)
        are rounded where they are stored, the rest of a client's upload being zero: the
        work of the rows, not of the clients times the shape."""
        total = np.zeros(self.shape)
        rows = self.rows
        if self.dense is None and rows is not None and len(rows.index):
            scale = np.ones(self.n_clients) if self.scale is None else self.scale
            owner = np.repeat(np.arange(self.n_clients), np.diff(rows.ptr))
            values = rows.values.reshape(len(rows.index), -1)
            np.add.at(total.reshape(self.shape[0], -1), rows.index,
                      np.rint(gamma * (scale[owner, None] * values)))
        elif self.dense is not None:
            for block in self.each_client():
                total += np.rint(gamma * block).sum(axis=0)
        return total

    def add_weighted(self, total: np.ndarray, weights: np.ndarray) -> None:
        """``total += sum_k weights[k] * upload_k`` (``total``: a ``shape`` array). Rows alone
        are added in place; rows on a dense part are first added to that part, so the batch's
        sum enters ``total`` whole (the rounding of a sum of batches does not depend on how
        each batch is stored)."""
        if self.dense is not None and self.rows is not None:
            total += self.weighted_sum(weights)
        else:
            self._add(total, weights)

    def _add(self, total: np.ndarray, weights: np.ndarray) -> None:
        """``total += sum_k weights[k] * upload_k``, part by part."""
        if self.scale is not None:
            weights = weights * self.scale
        if self.dense is not None:
            if self.dense.strides[0] == 0:  # every client uploads the same array
                total += weights.sum() * self.dense[0]
            else:
                total += np.tensordot(weights, self.dense, axes=1)
        if self.rows is not None:
            self.rows.add_to(total.reshape(self.shape[0], -1), weights)


Uploads = Mapping[str, Stacked]
"""The uploads of a batch of clients: named arrays, each stacked over the batch."""


@numba.njit(nogil=True, cache=True)
def _scatter_rows(total, ptr, index, values, weights):
    """``total[index[q]] += weights[k] values[q]`` for the rows ``q`` of every client ``k``."""
    width = total.shape[1]
    for k in range(ptr.shape[0] - 1):
        w = weights[k]
        for q in range(ptr[k], ptr[k + 1]):
            row = index[q]
            for e in range(width):
                total[row, e] += w * values[q, e]


@numba.njit(nogil=True, cache=True, inline="always")
def _add_terms(row, q0, q1, vec, a, b, vectors, w, gram):
    """``row += w * (the row of the terms q0:q1)`` (:class:`OuterRows`; the packing of
    :func:`svec_pairs`: the upper triangle row by row, off the diagonal times sqrt(2))."""
    d = vectors.shape[1]
    root2 = np.sqrt(2.0)
    for q in range(q0, q1):
        x = vectors[vec[q]]
        e = 0
        for i in range(d if gram else 0):
            xi = w * a[q] * x[i]
            row[e] += xi * x[i]
            e += 1
            xi *= root2
            for c in range(i + 1, d):
                row[e] += xi * x[c]
                e += 1
        wb = w * b[q]
        for i in range(d):
            row[e + i] += wb * x[i]


def _outer_rows(out, term_ptr, vec, a, b, vectors, gram):
    """Row ``g`` of ``out`` (zeros) becomes the row of group ``g``'s terms (:class:`OuterRows`),
    in parallel over groups."""
    parallel_for(_outer_rows_range, out.shape[0], out, term_ptr, vec, a, b, vectors, gram)


@numba.njit(cache=True, nogil=True)
def _outer_rows_range(g0, g1, out, term_ptr, vec, a, b, vectors, gram):
    """:func:`_outer_rows` of the groups ``g0:g1``."""
    for g in range(g0, g1):
        _add_terms(out[g], term_ptr[g], term_ptr[g + 1], vec, a, b, vectors, 1.0, gram)


def _outer_squared_norms(out, term_ptr, vec, a, b, vectors):
    """``out[g]``: the squared norm of group ``g``'s row (:meth:`OuterRows.squared_norms`),
    in parallel over groups."""
    parallel_for(_outer_squared_norms_range, out.shape[0], out, term_ptr, vec, a, b, vectors)


@numba.njit(cache=True, nogil=True)
def _outer_squared_norms_range(g0, g1, out, term_ptr, vec, a, b, vectors):
    """:func:`_outer_squared_norms` of the groups ``g0:g1``."""
    d = vectors.shape[1]
    for g in range(g0, g1):
        total = 0.0
        for q in range(term_ptr[g], term_ptr[g + 1]):
            xq = vectors[vec[q]]
            for p in range(term_ptr[g], term_ptr[g + 1]):
                xp = vectors[vec[p]]
                dot = 0.0
                for i in range(d):
                    dot += xq[i] * xp[i]
                total += a[q] * a[p] * dot * dot + b[q] * b[p] * dot
        out[g] = total


@numba.njit(nogil=True, cache=True)
def _groups_by_row(index, n_rows):
    """The groups in order of the row they add to (stable: a row's groups stay in group
    order), and where each row's start: row ``j``'s groups are ``order[start[j]:start[j+1]]``
    (a counting sort)."""
    start = np.zeros(n_rows + 1, dtype=np.int64)
    for g in range(index.shape[0]):
        start[index[g] + 1] += 1
    for j in range(n_rows):
        start[j + 1] += start[j]
    fill = start[:-1].copy()
    order = np.empty(index.shape[0], dtype=np.int64)
    for g in range(index.shape[0]):
        order[fill[index[g]]] = g
        fill[index[g]] += 1
    return order, start


def _scatter_outer(total, ptr, index, term_ptr, vec, a, b, vectors, weights):
    """``total[index[g]] += weights[k] * row of group g`` for every group ``g`` of every client
    ``k`` (:class:`OuterRows`), in parallel over the rows of ``total``. Row ``j`` gathers the
    vectors of its groups' terms (in group order, whatever the threads: the same result every
    run) into ``G`` and ``(w a) G^T``, forms ``sum_q w_q a_q x_q x_q^T`` as one matrix product
    (BLAS ``dgemm`` through ``np.dot``: :meth:`OuterRows.add_to` holds the library to one
    thread, the rows running in parallel) and ``sum_q w_q b_q x_q`` alongside, then adds the
    packed upper triangle to the row once: no row is touched per term, no outer product formed
    per term."""
    group_weight = np.repeat(weights, np.diff(ptr))
    order, start = _groups_by_row(index, total.shape[0])
    parallel_for(_scatter_outer_range, total.shape[0], total, order, start, term_ptr, vec, a, b,
                 vectors, group_weight)


@numba.njit(cache=True, nogil=True)
def _scatter_outer_range(j0, j1, total, order, start, term_ptr, vec, a, b, vectors, group_weight):
    """:func:`_scatter_outer` of the rows ``j0:j1`` (``order``, ``start``: the groups by row,
    :func:`_groups_by_row`; ``group_weight``: each group's client's weight)."""
    d = vectors.shape[1]
    root2 = np.sqrt(2.0)
    for j in range(j0, j1):
        n_terms = 0
        for o in range(start[j], start[j + 1]):
            n_terms += term_ptr[order[o] + 1] - term_ptr[order[o]]
        if n_terms == 0:
            continue
        G = np.empty((n_terms, d))
        Gw = np.empty((d, n_terms))
        y = np.zeros(d)
        t = 0
        for o in range(start[j], start[j + 1]):
            g = order[o]
            for q in range(term_ptr[g], term_ptr[g + 1]):
                x = vectors[vec[q]]
                wa = group_weight[g] * a[q]
                wb = group_weight[g] * b[q]
                for i in range(d):
                    G[t, i] = x[i]
                    Gw[i, t] = wa * x[i]
                    y[i] += wb * x[i]
                t += 1
        S = np.dot(Gw, G)
        row = total[j]
        e = 0
        for i in range(d):
            row[e] += S[i, i]
            e += 1
            for c in range(i + 1, d):
                row[e] += root2 * S[i, c]
                e += 1
        for i in range(d):
            row[e + i] += y[i]


def _scatter_linear(total, ptr, index, term_ptr, vec, b, vectors, weights, blocks):
    """``total[index[g]] += weights[k] sum_q b_q x_q`` for every group ``g`` of every client
    ``k`` (:class:`OuterRows` without the Gram part): the rows of ``total`` cut into
    ``blocks`` ranges, in parallel, each block reading every group and adding those of its
    rows, in group order (the same result whatever the blocks), indexed in place (no view
    made per group)."""
    group_weight = np.repeat(weights, np.diff(ptr))
    parallel_for(_scatter_linear_range, blocks, blocks, total, index, term_ptr, vec, b, vectors,
                 group_weight)


@numba.njit(cache=True, nogil=True)
def _scatter_linear_range(blk0, blk1, blocks, total, index, term_ptr, vec, b, vectors,
                          group_weight):
    """:func:`_scatter_linear` of the blocks ``blk0:blk1`` (``group_weight``: each group's
    client's weight)."""
    d = vectors.shape[1]
    n_rows = total.shape[0]
    for blk in range(blk0, blk1):
        lo, hi = blk * n_rows // blocks, (blk + 1) * n_rows // blocks
        for g in range(index.shape[0]):
            j = index[g]
            if j < lo or j >= hi:
                continue
            w = group_weight[g]
            for q in range(term_ptr[g], term_ptr[g + 1]):
                v = vec[q]
                wb = w * b[q]
                for i in range(d):
                    total[j, i] += wb * vectors[v, i]


def _scatter_scaled(total, ptr, index, b, vectors, weights, blocks):
    """``total[index[q]] += weights[k] b[q] vectors[k]`` for the rows ``q`` of every client
    ``k`` (:class:`ScaledRows`), as :func:`_scatter_linear` adds: ``blocks`` ranges of rows in
    parallel, each row's additions in order (the same result whatever the blocks)."""
    parallel_for(_scatter_scaled_range, blocks, blocks, total, ptr, index, b, vectors, weights)


@numba.njit(cache=True, nogil=True)
def _scatter_scaled_range(blk0, blk1, blocks, total, ptr, index, b, vectors, weights):
    """:func:`_scatter_scaled` of the blocks ``blk0:blk1``."""
    d = vectors.shape[1]
    n_rows = total.shape[0]
    for blk in range(blk0, blk1):
        lo, hi = blk * n_rows // blocks, (blk + 1) * n_rows // blocks
        for k in range(ptr.shape[0] - 1):
            w = weights[k]
            for q in range(ptr[k], ptr[k + 1]):
                j = index[q]
                if j < lo or j >= hi:
                    continue
                wb = w * b[q]
                for i in range(d):
                    total[j, i] += wb * vectors[k, i]


_SUMMED_BY_DRIVER = object()


@dataclass(frozen=True)
class Summed:
    """The sum over a cohort of clients of each named upload, and the cohort's size.

    Only :func:`sum_uploads` makes one (from clients' uploads), or :func:`secure_sum` (from
    what a secure aggregation protocol returns), and only :meth:`with_arrays` derives one (e.g.
    to add central noise): a server step that takes a ``Summed`` is handed a cohort sum by
    construction.
    """

    arrays: Mapping[str, np.ndarray]
    count: int
    _origin: object = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self._origin is not _SUMMED_BY_DRIVER:
            raise TypeError("a Summed is made only by fedmc.core.uploads.sum_uploads")

    def __getitem__(self, name: str) -> np.ndarray:
        return self.arrays[name]

    def with_arrays(self, arrays: Mapping[str, np.ndarray]) -> Summed:
        """The same cohort with post-processed sums (noise added, say)."""
        return Summed(dict(arrays), self.count, _SUMMED_BY_DRIVER)


def sum_uploads(
    batches: Iterable[tuple[Uploads, np.ndarray]], shapes: Mapping[str, tuple[int, ...]]
) -> Summed:
    """Add up the uploads of every batch, each client weighted by its multiplicity.

    Parameters
    ----------
    batches
        ``(uploads, weights)`` pairs: the uploads of a batch of ``s`` clients and how many times
        each counts (1, or more when a client was drawn more than once).
    shapes
        Name and shape of every upload the algorithm sends: a name no client sent sums to zero
        (a round in which no client uploaded).
    """
    total = {name: np.zeros(shape) for name, shape in shapes.items()}
    count = 0
    for uploads, weights in batches:
        if set(uploads) != set(shapes):
            raise ValueError(f"uploads {sorted(uploads)} differ from the declared {sorted(shapes)}")
        for name, stacked in uploads.items():
            stacked.add_weighted(total[name], weights)
        count += int(weights.sum())
    return Summed(total, count, _SUMMED_BY_DRIVER)


def add_sums(parts: Iterable[tuple[Mapping[str, np.ndarray], int]],
             shapes: Mapping[str, tuple[int, ...]]) -> Summed:
    """The cohort sum of a cohort summed in parts: ``(arrays, count)`` of each part, each
    made by :func:`sum_uploads` where its clients live (a shard of a sharded simulation,
    :mod:`fedmc.sim.sharded`), added in the order given."""
    total = {name: np.zeros(shape) for name, shape in shapes.items()}
    count = 0
    for arrays, part_count in parts:
        for name in total:
            total[name] += arrays[name]
        count += int(part_count)
    return Summed(total, count, _SUMMED_BY_DRIVER)


def secure_sum(arrays: Mapping[str, np.ndarray], count: int) -> Summed:
    """The cohort sum as a secure aggregation protocol returns it: the protocol, not the
    driver, added up the ``count`` uploads (``fedmc.flower.secagg``)."""
    return Summed(dict(arrays), count, _SUMMED_BY_DRIVER)


def upload_nbytes(uploads: Uploads) -> int:
    """Bytes sent by the clients of one batch (each client once, whatever its multiplicity)."""
    return sum(stacked.nbytes() for stacked in uploads.values())
