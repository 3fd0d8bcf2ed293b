"""Federated ALS's traffic: the bytes one client uploads in a round it takes part in.

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    FEDMC_DATA=../shared/data python benchmarks/bench_fedals_traffic.py [--dataset ml-1m]

For each mode (ratings; interactions, ``--implicit``), rank and upload form (``upload=rows``,
``upload=factors``) and for running sums and fresh sums (user-level DP's), every
one-user client of the seed-0 split takes a client step against ``V^0`` (what it sends does
not depend on ``V``: its rated items, its vectors and their terms), all in one batch, and the
bytes of each client's upload are read off the batch as ``bytes_up`` counts them (8 bytes a
number: rows and their indices, or the factors' vectors, index and term count per row and
three numbers per term); for a few clients, checked against
:meth:`fedmc.core.uploads.Stacked.nbytes` of their own client step. Prints a Markdown table:
the median and the 99th percentile over the clients, and the rows' median over this one (the
whole federation's traffic over a run is the sum over the cohorts of these). Under secure
aggregation a client sends, whatever the form, the dense vector of every item's row (the
last column: its numbers times 8, before SecAgg+'s quantization). Then the item step as
exchanges (``item_step="exchanges"``, the default on interactions): the bytes of a round, its
``round`` exchange and its ``cg_steps`` ``cg`` exchanges, each client's checked the same way;
"rows / this" is then the running sums' rows over this.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from fedmc.algorithms.fedals import ALGORITHM, FedALSConfig
from fedmc.api import load_federated
from fedmc.core.protocol import Message
from fedmc.core.uploads import Stacked


def per_client_bytes(data, cfg: FedALSConfig, checked: int = 5) -> np.ndarray:
    """The bytes every client uploads in one round (one client step over all of them)."""
    info = data.federation_info()
    draws = ALGORITHM.draws(cfg, info, np.random.default_rng(0))
    V = ALGORITHM.init_server(cfg, info, draws.server).V
    state = ALGORITHM.init_clients(cfg, data, draws, info)

    def step(clients: np.ndarray) -> Stacked:
        msg = Message(1, "round", clients, clients, {"V": V})
        return ALGORITHM.client_step(cfg, data, state, msg, clients, clients)[1]["stats"]

    everyone = np.arange(data.n_clients, dtype=np.int64)
    rows = step(everyone).rows
    groups = np.diff(rows.ptr)
    terms = np.diff(rows.term_ptr[rows.ptr])
    if cfg.upload == "factors":
        vectors = len(rows.vectors) // data.n_clients  # one user per client: new (and old)
        numbers = vectors * rows.vectors.shape[1] + 2 * groups + 3 * terms
    else:
        numbers = groups * (rows.width + 1)
    sent = 8 * numbers
    for c in np.linspace(0, data.n_clients - 1, checked).astype(np.int64):
        assert step(np.array([c])).nbytes() == sent[c]
    return sent


def per_client_exchange_bytes(data, cfg: FedALSConfig, checked: int = 5) -> np.ndarray:
    """The bytes every client uploads in one round of ``item_step="exchanges"``: its
    ``round`` exchange (the products' rows, and with interactions its Gramian share) and its
    ``cg_steps`` ``cg`` exchanges (the products' rows), one client step over all of them
    each."""
    info = data.federation_info()
    draws = ALGORITHM.draws(cfg, info, np.random.default_rng(0))
    V = ALGORITHM.init_server(cfg, info, draws.server).V
    state = ALGORITHM.init_clients(cfg, data, draws, info)
    P = np.ones((data.n_items, len(cfg.free_v)))  # a direction: the bytes do not depend on it

    def step(clients: np.ndarray, phase: str) -> dict[str, Stacked]:
        arrays = {"V": V} if phase == "round" else {"P": P}
        msg = Message(1, phase, clients, clients, arrays)
        fresh = dataclasses.replace(state, U=state.U.copy())  # a round's user step changes U
        return dict(ALGORITHM.client_step(cfg, data, fresh, msg, clients, clients)[1])

    everyone = np.arange(data.n_clients, dtype=np.int64)
    items = np.diff(step(everyone, "cg")["products"].rows.ptr)
    d = len(cfg.free_v)
    products = d + 2 * items if cfg.upload == "factors" else items * (d + 1)
    gram = 0
    if cfg.implicit:  # one row, one term: the user's vector
        width = d * (d + 1) // 2 + d
        gram = d + 2 + 3 if cfg.upload == "factors" else width + 1
    sent = 8 * ((cfg.cg_steps + 1) * products + gram)
    for c in np.linspace(0, data.n_clients - 1, checked).astype(np.int64):
        one = np.array([c])
        total = sum(s.nbytes() for s in step(one, "round").values())
        total += cfg.cg_steps * sum(s.nbytes() for s in step(one, "cg").values())
        assert total == sent[c], (c, total, sent[c])
    return sent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="ml-1m")
    parser.add_argument("--ranks", type=int, nargs="+", default=[10, 32, 128])
    args = parser.parse_args()
    print("| mode | rank | sums | upload | median bytes | 99th percentile | rows / this "
          "(median) | secure aggregation (dense) |")
    print("|---|---|---|---|---|---|---|---|")
    for implicit in (False, True):
        data = load_federated(args.dataset, partition="user", seed=0, implicit=implicit)
        mode = "interactions" if implicit else "ratings"
        for rank in args.ranks:
            for sums in ("running", "fresh"):
                base = None
                for upload in ("rows", "factors"):
                    cfg = FedALSConfig(implicit=implicit, rank=rank, sums=sums, upload=upload)
                    sent = per_client_bytes(data, cfg)
                    median, p99 = np.median(sent), np.percentile(sent, 99)
                    base = median if base is None else base
                    n, width = ALGORITHM.upload_shapes(cfg, data.federation_info())["stats"]
                    print(f"| {mode} | {rank} | {sums} | {upload} | {median:,.0f} | "
                          f"{p99:,.0f} | {base / median:.1f} | {8 * n * width:,} |", flush=True)
            for upload in ("rows", "factors"):  # a round of exchanges: 4 of them at 3 steps
                cfg = FedALSConfig(implicit=implicit, rank=rank, item_step="exchanges",
                                   upload=upload)
                sent = per_client_exchange_bytes(data, cfg)
                median, p99 = np.median(sent), np.percentile(sent, 99)
                dense = sum(8 * int(np.prod(shape)) for shape in
                            ALGORITHM.upload_shapes(cfg, data.federation_info()).values())
                print(f"| {mode} | {rank} | exchanges (a round) | {upload} | {median:,.0f} | "
                      f"{p99:,.0f} | {base / median:.1f} | {(cfg.cg_steps + 1) * dense:,} |",
                      flush=True)


if __name__ == "__main__":
    main()
