"""The client side of federated ALS: private ratings (or interactions) and user factors; the
user step and the change of the client's item-step statistics.

A client in a round receives ``V^k``, solves each of its user rows (its ridge problem with
``V^k`` fixed, :func:`user_step`: exactly, or with ``solver="cg"`` by a few conjugate-gradient
steps from the client's own previous row, zeros at first), and uploads the *change* of its
contribution to the item step's sufficient statistics since its last upload: on every item
``j`` it rated, the change of ``sum_t w_tj x_t x_t^T`` and ``sum_t y_tj x_t`` over its users
``t`` who rated ``j`` (``x_t``: the user's columns that multiply ``V``'s solved ones), and with
implicit feedback the change of its share of the Gramian ``sum_t x_t x_t^T``. So the server's
running sums are always those of every client's latest user factors, and its item step
minimizes (CG: lowers) the objective against them exactly (``docs/fedals.md``). The client
keeps only its user rows: the previous ones, which the change needs, are the rows before the
step.

A client's rows start at zero factors (biases zero, the all-ones column set), whose
implicit statistics are zero; with biases they are not (the bias carrier is 1), and a set-up
exchange uploads them once.

For user-level DP (``docs/fedals.md``) a client may instead upload its whole statistics each
round it takes part in (``sums="fresh"``), and contribute at most ``max_items`` of each user's
ratings to them (:func:`contributed`), its packed Gram parts ``svec(S_j)`` times
``gram_scale``.

With ``item_step="exchanges"`` (:func:`exchange_uploads`) a client uploads no statistics: after
its user step its share of every rated item's residual, then in each ``cg`` exchange its share
of the item systems' products with the server's directions, ``d`` numbers per rated item.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from fedmc.algorithms.fedals.config import FedALSConfig
from fedmc.algorithms.fedals.kernels import (
    Terms,
    gram,
    group_counts,
    implicit_losses,
    item_terms,
    kept_entries,
    one_user_products,
    product_terms,
    user_solves,
)
from fedmc.core.biases import ranges
from fedmc.core.factors import error_sums
from fedmc.core.protocol import FederationInfo, InitialDraws, Message
from fedmc.core.prox import Regularizer
from fedmc.core.shard import CSR, ItemMajor, RatingsShard
from fedmc.core.uploads import OuterFactors, OuterRows, ScaledRows, Stacked, Uploads
from fedmc.errors import ConfigError

STATS = "stats"  # rows [svec(S_j) | b_j] of the rated items (and the Gramian's row)
PRODUCTS = "products"  # item_step="exchanges": per rated item a share of b_j - S_j v_j or S_j p_j
GRAM = "gram"  # item_step="exchanges", implicit: the one row of the Gramian's share


@dataclass
class ClientState:
    """The user rows ``U`` of a batch of clients, whether each client holds one user, and,
    with ``max_items``, the shard with only the ratings its users contribute to the item
    step (:func:`contributed`; None: all of them)."""

    U: np.ndarray
    one_user: bool
    contributed: RatingsShard | None = None


def init_clients(cfg: FedALSConfig, shard: RatingsShard, draws: InitialDraws,
                 info: FederationInfo) -> ClientState:
    """Zero user factors (biases zero, the all-ones column set) and, with ``max_items``,
    the ratings each user contributes (its own random key, ``draws.rows["key"]``);
    implicit feedback needs interaction strengths ``>= 0``."""
    if cfg.implicit and shard.train.nnz and shard.train.values.min() < 0:
        raise ConfigError("implicit feedback takes interaction strengths >= 0; these values "
                          "are negative (normalized ratings?): read ratings as interactions "
                          "(`implicit=true`)")
    one_user = bool(np.all(np.diff(shard.client_ptr) == 1))
    if cfg.upload == "factors" and not one_user:
        raise ConfigError("upload='factors' sends a client's user vectors, which tell the "
                          "server more than its rows when it holds several users: it needs "
                          "`partition='user'` (one user per client)")
    U = np.zeros((shard.n_users, cfg.layout.width))
    cfg.layout.project_u(U)
    subset = None if cfg.max_items is None else contributed(shard, draws.rows["key"],
                                                            cfg.max_items)
    return ClientState(U, one_user, subset)


def contributed(shard: RatingsShard, keys: np.ndarray, k: int) -> RatingsShard:
    """``shard`` with at most ``k`` training ratings per user: a uniform draw from the user's
    own ratings, made from its key alone (:func:`~fedmc.algorithms.fedals.kernels.
    kept_entries`), in their stored order."""
    tr = shard.train
    keep = np.zeros(tr.nnz, dtype=bool)
    kept_entries(tr.indptr, tr.indices, np.asarray(keys, dtype=np.int64), k, keep)
    indptr = np.concatenate(([0], np.cumsum(keep)))[tr.indptr].astype(np.int64)
    assert dataclasses.is_dataclass(shard) and not isinstance(shard, type)  # every shard is
    return dataclasses.replace(shard, train=CSR(indptr, tr.indices[keep], tr.values[keep]))


def user_step(cfg: FedALSConfig, R: CSR, rows: np.ndarray, U: np.ndarray,
              V: np.ndarray, steps: int = 0) -> None:
    """Solve the rows ``rows`` of ``U`` (the ratings ``R``) with ``V`` fixed, in place: the
    ridge problem of each row (explicit: ALS's user half-sweep; implicit: Hu et al.'s
    Eq. (4)), exactly (``steps = 0``) or by ``steps`` conjugate-gradient steps from the rows'
    current values (Takacs et al. 2011)."""
    free = cfg.free_u
    fixed = np.flatnonzero(~cfg.layout.free_mask_u())
    F = np.ascontiguousarray(V[:, free])
    G0 = gram(F) if cfg.implicit else np.zeros((0, 0))
    user_solves(rows, R.indptr, R.indices, R.values, U, F, free, fixed,
                np.ascontiguousarray(V[:, fixed]), G0, cfg.lam, cfg.alpha, cfg.implicit, steps)


def client_rows(client_ptr: np.ndarray, clients: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The user rows of ``clients`` in order, and where each client's start (``s + 1``)."""
    starts, stops = client_ptr[clients], client_ptr[clients + 1]
    row_start = np.concatenate(([0], np.cumsum(stops - starts))).astype(np.int64)
    return ranges(starts, stops), row_start


def client_step(cfg: FedALSConfig, shard: RatingsShard, state: ClientState, msg: Message,
                compute: np.ndarray, upload: np.ndarray) -> tuple[ClientState, Uploads]:
    """A round: the user step against ``V^k`` (on all the users' ratings), then the change
    of the statistics (``sums="running"``) or the statistics themselves (``"fresh"``) of the
    contributed ratings; set-up: the statistics of the initial rows. Every client that
    computes uploads (``compute`` equals ``upload``)."""
    if cfg.item_step == "exchanges":
        return state, exchange_uploads(cfg, shard, state, msg, compute)
    V = msg.arrays["V"]
    setup = msg.phase == "setup"
    rows, row_start = client_rows(shard.client_ptr, compute)
    free_v = cfg.free_v
    fixed_v = np.flatnonzero(~cfg.layout.free_mask_v())
    old = state.U[rows]
    if not setup:
        user_step(cfg, shard.train, rows, state.U, V, cfg.solve_steps)
    new = state.U[rows]
    n_rows = len(rows)
    change = not setup and cfg.sums == "running"  # else the statistics of the new rows
    both = np.concatenate([new, old]) if change else new
    source = shard if state.contributed is None else state.contributed
    tr = source.train
    if state.one_user:  # the user CSR serves: no item-major layout is built
        none = np.zeros(0, dtype=np.int64)
        groups = ItemMajor(none, none.astype(np.int32), none, none.astype(np.int32),
                           np.zeros(0))
    else:
        groups = source.item_major
    gram_row = V.shape[0] if cfg.implicit else -1
    ptr, term_ptr = group_counts(compute, shard.client_ptr, tr.indptr, groups, state.one_user,
                                 2 if change else 1, gram_row >= 0)
    terms = Terms(ptr, np.empty(len(term_ptr) - 1, dtype=np.int64), term_ptr,
                  np.empty(term_ptr[-1], dtype=np.int64), np.empty(term_ptr[-1]),
                  np.empty(term_ptr[-1]))
    item_terms(compute, shard.client_ptr, row_start, tr, groups, state.one_user,
               np.ascontiguousarray(both[:, fixed_v]), np.ascontiguousarray(V[:, fixed_v]),
               n_rows, cfg.alpha, cfg.implicit, change, gram_row, terms)
    if cfg.gram_scale != 1.0:  # the svec part sent times gram_scale (the server divides)
        terms.a[:] *= cfg.gram_scale
    sent = OuterFactors if cfg.upload == "factors" else OuterRows
    stats = sent(*terms, np.ascontiguousarray(both[:, free_v]))
    return state, {STATS: Stacked(upload_shape(cfg, V.shape[0]), rows=stats)}


def exchange_uploads(cfg: FedALSConfig, shard: RatingsShard, state: ClientState, msg: Message,
                     compute: np.ndarray) -> Uploads:
    """A client's exchange of ``item_step="exchanges"`` (``docs/fedals.md``): in a ``round``
    exchange (``V^k``) the user step, then per rated item ``j`` its share of the item step's
    residual ``b_j - S_j v_j``, ``sum_t x_t (y_tj - w_tj x_t . v_j)`` over its users ``t``
    who rated ``j``, and with implicit feedback its share of the Gramian ``sum_t x_t
    x_t^T``; in a ``cg`` exchange (the directions ``P``) its share of each ``S_j p_j``,
    ``sum_t w_tj x_t (x_t . p_j)``, the user rows unchanged. A one-user client's share on
    item ``j`` is a multiple of its vector (:class:`~fedmc.core.uploads.ScaledRows`, the
    multiples from :func:`~fedmc.algorithms.fedals.kernels.one_user_products`); a client of
    several users sends ``sum_q b_q x_q`` over their terms (:class:`~fedmc.core.uploads.
    OuterRows` without the Gram part, the weights from
    :func:`~fedmc.algorithms.fedals.kernels.product_terms`)."""
    rows, row_start = client_rows(shard.client_ptr, compute)
    if msg.phase == "round":
        user_step(cfg, shard.train, rows, state.U, msg.arrays["V"], cfg.solve_steps)
    return exchange_shares(cfg, shard, state, msg, compute, rows, row_start)


def exchange_shares(cfg: FedALSConfig, shard: RatingsShard, state: ClientState, msg: Message,
                    compute: np.ndarray, rows: np.ndarray, row_start: np.ndarray) -> Uploads:
    """:func:`exchange_uploads` once a ``round`` exchange's user step is done: the shares
    of the clients' current rows (``rows, row_start``: :func:`client_rows` of ``compute``)."""
    users = msg.phase == "round"
    fixed_v = np.flatnonzero(~cfg.layout.free_mask_v())
    if users:
        V = msg.arrays["V"]
        M, V_fixed = V[:, cfg.free_v], V[:, fixed_v]
    else:
        M = msg.arrays["P"]
        V_fixed = np.zeros((M.shape[0], len(fixed_v)))  # the targets y are not read
    U = state.U[rows]
    x = np.ascontiguousarray(U[:, cfg.free_v])
    x_fixed, V_fixed = np.ascontiguousarray(U[:, fixed_v]), np.ascontiguousarray(V_fixed)
    M = np.ascontiguousarray(M)
    tr = shard.train
    sent = OuterFactors if cfg.upload == "factors" else OuterRows
    if state.one_user:  # each row a multiple of the client's one vector
        lo, hi = tr.indptr[rows], tr.indptr[rows + 1]
        start = np.concatenate(([0], np.cumsum(hi - lo))).astype(np.int64)
        consecutive = len(rows) == 0 or rows[-1] - rows[0] == len(rows) - 1
        # the rated items as the shard holds them (a view for consecutive users)
        index = tr.indices[lo[0]:hi[-1]] if len(rows) and consecutive else tr.indices[
            ranges(lo, hi)]
        b = np.empty(start[-1])
        one_user_products(compute, shard.client_ptr, tr, x, x_fixed, V_fixed, M, cfg.alpha,
                          cfg.implicit, users, start, b)
        products: OuterRows | ScaledRows = ScaledRows(start, index, b, x,
                                                      cfg.upload == "factors")
    else:
        ptr, term_ptr = group_counts(compute, shard.client_ptr, tr.indptr, shard.item_major,
                                     False, 1, False)
        terms = Terms(ptr, np.empty(len(term_ptr) - 1, dtype=np.int64), term_ptr,
                      np.empty(term_ptr[-1], dtype=np.int64), np.empty(term_ptr[-1]),
                      np.empty(term_ptr[-1]))
        item_terms(compute, shard.client_ptr, row_start, tr, shard.item_major, False, x_fixed,
                   V_fixed, len(rows), cfg.alpha, cfg.implicit, False, -1, terms)
        product_terms(terms.row, term_ptr, terms.vec, terms.a, terms.b, x, M, users)
        products = sent(*terms, x, gram=False)
    uploads = {PRODUCTS: Stacked((M.shape[0], x.shape[1]), rows=products)}
    if cfg.implicit:  # one group per client on the Gramian's row: its users' x x^T (round)
        s = len(compute)
        ptr = np.arange(s + 1, dtype=np.int64) if users else np.zeros(s + 1, dtype=np.int64)
        count = len(rows) if users else 0
        share = sent(ptr, np.zeros(s if users else 0, dtype=np.int64),
                     row_start if users else np.zeros(1, dtype=np.int64),
                     np.arange(count, dtype=np.int64), np.ones(count), np.zeros(count),
                     x if users else x[:0])  # a cg exchange: nothing, no vector either
        uploads[GRAM] = Stacked(upload_shape(cfg, 0), rows=share)
    return uploads


def upload_shape(cfg: FedALSConfig, n_items: int) -> tuple[int, int]:
    """``(rows, width)`` of the statistics: a row per item (and the Gramian's with implicit
    feedback) of ``d (d + 1) / 2 + d`` numbers, ``d`` the columns the item step solves."""
    d = len(cfg.free_v)
    return (n_items + int(cfg.implicit), d * (d + 1) // 2 + d)


def evaluate(cfg: FedALSConfig, shard: RatingsShard, state: ClientState,
             model: Mapping[str, np.ndarray]) -> dict[str, float]:
    """Explicit: the error sums of :func:`fedmc.core.factors.error_sums`; implicit: the
    weighted loss over every (user, item) pair (``loss``), ``reg_u`` and the counts."""
    V = model["V"]
    reg_u = Regularizer("l2", cfg.lam)
    if not cfg.implicit:
        return error_sums(shard, state.U, V, cfg.clip_range(shard.value_range), reg_u,
                          cfg.layout)
    tr = shard.train
    V = np.ascontiguousarray(V)
    return {"loss": implicit_losses(tr.indptr, tr.indices, tr.values, state.U, V, gram(V),
                                    cfg.alpha),
            "reg_u": reg_u.value(state.U), "n_train": float(tr.nnz),
            "n_test": float(shard.test.nnz)}


def user_factors(cfg: FedALSConfig, shard: RatingsShard, state: ClientState) -> np.ndarray:
    """The batch's ``U`` rows (simulation only: they never leave a client)."""
    return state.U
