"""Time the generation of a synthetic preset (by default the Netflix-size one).

Run from the repository root::

    python benchmarks/bench_synthetic.py [--name synthetic-netflix] [--seed 0]

Prints the seconds spent loading or compiling the Numba kernels (a tiny warm-up call), the
seconds spent generating the preset, the process's peak resident memory, and a few
statistics of the generated data.
"""

from __future__ import annotations

import argparse
import resource
import sys
import time

import numba
import numpy as np

from fedmc.data.synthetic import PRESETS, synthetic_dataset, synthetic_ratings


def peak_rss_gib() -> float:
    """Peak resident set size of this process in GiB (``ru_maxrss`` is in KiB on Linux)."""
    scale = 1 if sys.platform == "darwin" else 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * scale / 2**30


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="synthetic-netflix", choices=sorted(PRESETS))
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    start = time.perf_counter()
    synthetic_ratings(100, 50, 2_000)
    warmup = time.perf_counter() - start
    rss_before = peak_rss_gib()

    start = time.perf_counter()
    r = synthetic_dataset(args.name, seed=args.seed)
    seconds = time.perf_counter() - start

    print(f"preset          {r.name}: {r.n_users:,} users x {r.n_items:,} items")
    print(f"ratings         {r.n_ratings:,}")
    print(f"numba threads   {numba.get_num_threads()}")
    print(f"warm-up (JIT)   {warmup:.2f} s")
    print(f"generation      {seconds:.2f} s")
    print(f"peak RSS        {peak_rss_gib():.2f} GiB (before generation {rss_before:.2f} GiB)")
    arrays = r.users.nbytes + r.items.nbytes + r.values.nbytes
    print(f"output arrays   {arrays / 2**30:.2f} GiB")
    user_degrees = np.bincount(r.users, minlength=r.n_users)
    item_degrees = np.bincount(r.items, minlength=r.n_items)
    for label, d in (("user degrees", user_degrees), ("item degrees", item_degrees)):
        print(
            f"{label:15s} min {d.min()}, median {np.median(d):g}, mean {d.mean():.1f}, "
            f"max {d.max()}"
        )
    print(f"values          mean {r.values.mean():.3f}, std {r.values.std():.3f}")


if __name__ == "__main__":
    main()
