"""Snapshot the histories a refactoring must keep, and compare two snapshots.

A restructuring of the run or the federation layer promises "the same history as before":
this script records, before and after, every conformance case under both simulated drivers
(and the DP cases), plus ``fedmc run`` on the README's small commands, and then compares the
two snapshots bit for bit (``seconds``, timings, versions and time stamps aside).

    python benchmarks/history_snapshot.py record before.json      # on the old code
    python benchmarks/history_snapshot.py record after.json       # on the new code
    python benchmarks/history_snapshot.py compare before.json after.json

Run it with one Numba thread (``NUMBA_NUM_THREADS=1``): multi-thread reductions may differ in
the last digit from run to run (docs/architecture.md). So may a multi-threaded BLAS (two
recordings of the same code differed in FedMC-ADMM's last digits): the script runs BLAS on one
thread unless ``OPENBLAS_NUM_THREADS``/``OMP_NUM_THREADS``/``MKL_NUM_THREADS`` say otherwise.
The CLI runs use the licensed MovieLens 100K where ``FEDMC_DATA`` (or ``../shared/data``) has
it and skip it otherwise.

Each recording compiles every kernel afresh into its own Numba cache (``NUMBA_CACHE_DIR``, a
temporary folder unless set): kernels a checkout's cache kept from other processes may differ
in the last digit from freshly compiled ones (measured: ALS's and the default run's histories
of one commit, one with the checkout's cache and one with an empty one), which would show as a
difference between two recordings of the same code.
"""

from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
# as the tests run (tests/conftest.py): every rank on its specialized kernels, compiled in the
# foreground; the CLI runs inherit it
os.environ.setdefault("FEDMC_KERNELS", "specialized")
for _threads in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")  # before numpy loads (module docstring)
os.environ.setdefault("NUMBA_CACHE_DIR", tempfile.mkdtemp(prefix="fedmc-snapshot-"))  # before
# numba loads, for the CLI runs too (module docstring)

CLI_RUNS = {
    "default": [],
    "rfrec": ["--algorithm", "rfrec", "--rounds", "15"],
    "fedmavg": ["--algorithm", "fedmavg", "--rounds", "15"],
    "l1": ["--reg-u", "l1", "--lam", "0.3", "--reg-v", "l1", "--gamma", "0.1", "--steps",
           "per-row", "--sampling", "bernoulli", "--participation", "0.2", "--rounds", "15"],
    "user": ["--partition", "user", "--rounds", "15"],
    "fedals-implicit": ["--algorithm", "fedals", "--implicit", "--rounds", "10"],
    "fedals": ["--algorithm", "fedals", "--rounds", "10"],
    "item-bias": ["--algorithm", "item-bias"],
    "als": ["--algorithm", "als"],
    "dp": ["--dp-epsilon", "8", "--dp-reproducible"],
    "dp-fedals": ["--algorithm", "fedals", "--dp-epsilon", "4", "--dp-reproducible"],
    "felb": ["--algorithm", "felb", "--dataset", "synthetic-boolean", "--rounds", "15"],
    "ml100k-user": ["--dataset", "ml-100k", "--partition", "user", "--rounds", "10"],
    "ml100k-fedals": ["--dataset", "ml-100k", "--algorithm", "fedals", "--implicit",
                      "--rounds", "5"],
}
VOLATILE = {"seconds", "data_seconds", "train_seconds", "compile_seconds", "total_seconds",
            "peak_memory_mb", "versions", "time", "started", "finished", "pid", "kernels"}


def _case(case: Any) -> tuple[Any, dict, dict, str]:
    """(algorithm, params, run options, data label) of a conformance case, whether a tuple
    (before the change) or a dataclass (after)."""
    if isinstance(case, tuple):
        return case[0], case[1], case[2], "-".join(case[3:])
    return case.algorithm, case.params, case.run, case.data or ""


def _history(outcome: Any) -> list[dict]:
    return [{k: v for k, v in row.items() if k != "seconds"} for row in outcome.history.rows]


def record_simulations() -> dict[str, Any]:
    import numpy as np

    import tests.test_conformance as tc
    from fedmc.data.boolean import BooleanFederatedData
    from fedmc.federation.sampling import make_sampler
    from fedmc.privacy.accounting import UserDP
    from fedmc.testing import run_driver, tiny_federated, tiny_interactions

    data = {"": tiny_federated(m=15, n=8, p=5, density=0.45, seed=4)[0],
            "one-user": tiny_federated(m=15, n=8, p=15, density=0.45, seed=4)[0],
            "implicit": tiny_interactions(m=15, n=8, p=5, density=0.45, seed=4),
            "implicit-one-user": tiny_interactions(m=15, n=8, p=15, density=0.45, seed=4)}
    A = (np.random.default_rng(0).random((23, 12)) < 0.3).astype(np.uint8)
    data["boolean"] = BooleanFederatedData.build(A, 5, seed=1)
    out: dict[str, Any] = {}
    for label, cases, dp in (("case", tc.CASES, None), ("dp", tc.DP_CASES, True)):
        for i, case in enumerate(cases):
            algorithm, params, run, kind = _case(case)
            d = data["boolean" if algorithm.data_kind == "boolean" else kind]
            cfg = algorithm.Config(**params)
            for driver in ("batched", "per-client"):
                if dp:
                    privacy = UserDP(clip=0.5, noise=0.7, delta=1e-5, setup_clip=0.8,
                                     unit="client", reproducible=True)
                    sampler = lambda d=d: make_sampler(d.n_clients, sampling="bernoulli",  # noqa: E731
                                                       participation=0.5)
                    outcome = run_driver(algorithm, cfg, d, sampler, 4, 0, driver, privacy)
                else:
                    sampler = lambda d=d, run=run: make_sampler(  # noqa: E731
                        d.n_clients, **{"active": 4, **run})
                    outcome = run_driver(algorithm, cfg, d, sampler, 6, 0, driver)
                out[f"{label}{i}-{algorithm.name}-{driver}"] = _history(outcome)
    return out


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in VOLATILE}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


def record_cli() -> dict[str, Any]:
    out: dict[str, Any] = {}
    data = Path(os.environ.get("FEDMC_DATA", ROOT.parent / "shared" / "data"))
    env = {**os.environ, "FEDMC_DATA": str(data)}
    with tempfile.TemporaryDirectory() as tmp:
        for name, args in CLI_RUNS.items():
            if "ml-100k" in args and not (data / "ml-100k").exists():
                continue
            folder = Path(tmp) / name
            cmd = [str(Path(sys.executable).parent / "fedmc"), "run", "--quiet", "--out",
                   str(folder), *args]
            done = subprocess.run(cmd, env=env, capture_output=True, text=True)
            if done.returncode != 0:
                out[name] = {"exit": done.returncode, "stderr": done.stderr[-500:]}
                continue
            with open(folder / "history.csv", newline="") as f:
                rows = [{k: v for k, v in row.items() if k != "seconds"}
                        for row in csv.DictReader(f)]
            out[name] = {
                "history": rows,
                "config": _strip(json.loads((folder / "config.json").read_text())),
                "summary": _strip(json.loads((folder / "summary.json").read_text())),
            }
    return out


def compare(before: dict, after: dict, path: str = "") -> list[str]:
    """Every place where ``after`` differs from ``before``."""
    if isinstance(before, dict) and isinstance(after, dict):
        diffs = []
        for key in sorted(set(before) | set(after)):
            where = f"{path}/{key}"
            if key not in after:
                diffs.append(f"{where}: missing after")
            elif key not in before:
                diffs.append(f"{where}: new after")
            else:
                diffs += compare(before[key], after[key], where)
        return diffs
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        return [d for i, (b, a) in enumerate(zip(before, after, strict=True))
                for d in compare(b, a, f"{path}[{i}]")]
    both_nan = isinstance(before, float) and isinstance(after, float) and math.isnan(before) \
        and math.isnan(after)
    return [] if before == after or both_nan else [f"{path}: {before!r} -> {after!r}"]


def main() -> None:
    command = sys.argv[1] if len(sys.argv) > 1 else ""
    if command == "record" and len(sys.argv) == 3:
        snapshot = {"simulation": record_simulations(), "cli": record_cli()}
        Path(sys.argv[2]).write_text(json.dumps(snapshot, indent=1, sort_keys=True))
        print(f"recorded {len(snapshot['simulation'])} simulations and "
              f"{len(snapshot['cli'])} CLI runs in {sys.argv[2]}")
    elif command == "compare" and len(sys.argv) == 4:
        before, after = (json.loads(Path(p).read_text()) for p in sys.argv[2:4])
        diffs = compare(before, after)
        print("\n".join(diffs[:200]) or "identical")
        print(f"{len(diffs)} differences")
        sys.exit(1 if diffs else 0)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
