"""Federated ALS's traffic: the bytes one client uploads in a round it takes part in.

Run from the repository root with the MovieLens files in ``$FEDMC_DATA``::

    FEDMC_DATA=../shared/data python benchmarks/bench_fedals_traffic.py [--dataset ml-1m]

For each mode (ratings; interactions, ``--implicit``), rank and upload form (``upload=rows``,
``upload=factors``) and for running sums (the default) and fresh sums (user-level DP's), every
one-user client of the seed-0 split takes a client step against ``V^0`` (what it sends does
not depend on ``V``: its rated items, its vectors and their terms), all in one batch, and the
bytes of each client's upload are read off the batch as ``bytes_up`` counts them (8 bytes a
number: rows and their indices, or the factors' vectors, index and term count per row and
three numbers per term); for a few clients, checked against
:meth:`fedmc.core.uploads.Stacked.nbytes` of their own client step. Prints a Markdown table:
the median and the 99th percentile over the clients, and the rows' median over this one (the
whole federation's traffic over a run is the sum over the cohorts of these). Under secure
aggregation a client sends, whatever the form, the dense vector of every item's row (the
last column: its numbers times 8, before SecAgg+'s quantization).
"""

from __future__ import annotations

import argparse

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


if __name__ == "__main__":
    main()
