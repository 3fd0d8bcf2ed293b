"""Benchmarks of Felb / Felb-MU against aggregated BMF (the Felb paper's Sec. 4 and Fig. 2-4).

Usage (one experiment per sub-command; every table is printed as Markdown and, with
``--out FILE``, written as JSON)::

    python benchmarks/bench_felb.py noise --trials 10 --noise 0.1
    python benchmarks/bench_felb.py noise --trials 3 --noise 0 0.1 0.2 0.3 0.4
    python benchmarks/bench_felb.py real          # retail: its 2,000 most frequent items
    python benchmarks/bench_felb.py real --sets retail --top-items 16470   # full width (slow)
    python benchmarks/bench_felb.py dp --trials 3
    python benchmarks/bench_felb.py scale
    python benchmarks/bench_felb.py noise --set rate_counter=local_step clamp=nonneg
    python benchmarks/bench_felb.py noise --set sharpen=0   # the paper's least squares

Set ``OPENBLAS_NUM_THREADS=1`` on a shared machine so that timings are per core.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from fedmc.algorithms.felb import ALGORITHM, ALGORITHM_MU, FelbConfig, FelbMUConfig
from fedmc.algorithms.felb.baselines import aggregated_bmf
from fedmc.data.boolean import BooleanFederatedData, load_boolean
from fedmc.federation.loop import Rounds
from fedmc.federation.sampling import UniformSampler
from fedmc.sim import simulate

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "data"
REAL_SETS = {
    "zoo": ("bmf-uci-binary/zoo.txt", 10),
    "heart": ("bmf-uci-binary/heart.txt", 10),
    "lymp": ("bmf-uci-binary/lymp.txt", 10),
    "apb": ("bmf-uci-binary/apb.txt", 10),
    "tumor": ("bmf-uci-binary/tumor.txt", 10),
    "hepatitis": ("bmf-uci-binary/hepatitis.txt", 10),
    "audio": ("bmf-uci-binary/audio.txt", 10),
    "votes": ("bmf-uci-binary/votes.txt", 10),
    "chess": ("fimi-binary/chess.dat", 20),
    "mushroom": ("fimi-binary/mushroom.dat", 20),
    "BMS1": ("fimi-binary/BMS1.dat", 20),
    "retail": ("fimi-binary/retail.dat", 20),
}
# Sets too wide for the dense (C, k, m) V blocks on a 2-core machine: only the most frequent
# items are kept (BooleanFederatedData.top_items); docs/felb.md states the subsample.
TOP_ITEMS = {"retail": 2000}
GRECOND_MAX_COLS = 200
METRICS = ("f1", "f1_signal", "rmsd", "rmsd_sum", "seconds")


def run_felb(cfg: FelbConfig, data: BooleanFederatedData, rounds: int,
             seed: int) -> dict[str, float]:
    """Train for ``rounds`` synchronizations with all clients, one random stream for the
    initial draws and the noise; final metrics and training seconds."""
    algorithm = ALGORITHM_MU if cfg.multiplicative else ALGORITHM
    sampler = UniformSampler(data.n_clients, data.n_clients)
    sim = simulate(algorithm, cfg, data, seed=np.random.default_rng(seed),
                   rounds=Rounds(sampler, rounds, eval_every=max(rounds, 1)))
    return {**sim.history.rows[-1]}


def run_baseline(
    data: BooleanFederatedData, k: int, method: str, seed: int, how: str = "majority"
) -> dict[str, float]:
    """Alg. 2 with one local method and one aggregation."""
    start = time.perf_counter()
    out = aggregated_bmf(data, k, method, (how,), np.random.default_rng(seed))[how]
    return {**out, "seconds": time.perf_counter() - start}


def methods(args: argparse.Namespace, k: int, m: int) -> dict[str, Callable]:
    """Every method of a comparison as ``name -> f(data, seed) -> metrics``."""
    felb = dict(rank=k, local_steps=args.b, **dict(kv.split("=", 1) for kv in args.set))
    out: dict[str, Callable] = {
        "Felb": lambda d, s: run_felb(FelbConfig(**felb), d, args.rounds, s),
        "Felb-MU": lambda d, s: run_felb(FelbMUConfig(**felb), d, args.rounds, s),
        "Elbmf^v": lambda d, s: run_baseline(d, k, "elbmf", s),
    }
    if m <= GRECOND_MAX_COLS or args.command == "noise":
        out["Grecond^v"] = lambda d, s: run_baseline(d, k, "grecond", s)
    return out


def summarize(rows: list[dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Mean and standard deviation of every metric over trials."""
    return {
        key: (float(np.mean([r[key] for r in rows])), float(np.std([r[key] for r in rows])))
        for key in METRICS
        if key in rows[0]
    }


def cmd_noise(args: argparse.Namespace) -> dict:
    """Fig. 2 / acceptance 1: synthetic tiles, 10 clients, XOR noise levels."""
    result: dict = {}
    print("| noise | method | F1 | F1 signal | RMSD (mean per client) | s |")
    print("|---|---|---|---|---|---|")
    for noise in args.noise:
        per_method: dict[str, list] = {}
        for trial in range(args.trials):
            data = load_boolean(
                "synthetic-boolean",
                noise=noise,
                n_clients=args.clients,
                seed=trial,
                rows=args.rows_per_client * args.clients,
                cols=args.cols,
                tiles=args.rank,
            )
            for name, fn in methods(args, args.rank, args.cols).items():
                per_method.setdefault(name, []).append(fn(data, trial))
        result[str(noise)] = {}
        for name, rows in per_method.items():
            s = summarize(rows)
            result[str(noise)][name] = s
            print(
                f"| {noise:g} | {name} | {_pm(s['f1'])} | {_pm(s['f1_signal'])} "
                f"| {_pm(s['rmsd'], 4)} | {s['seconds'][0]:.1f} |"
            )
    return result


def cmd_real(args: argparse.Namespace) -> dict:
    """Acceptance 2: the real binary sets, 50 clients, b = 10."""
    result: dict = {}
    print("| data | n x m | k | method | F1 | RMSD mean | RMSD sum | s |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.sets:
        rel, k = REAL_SETS[name]
        path = SHARED / rel
        if not path.exists():
            print(f"| {name} | absent | | | | | | |")
            continue
        data = load_boolean(binary_file=path, n_clients=args.clients, seed=0)
        top = args.top_items if args.top_items is not None else TOP_ITEMS.get(name)
        if top is not None and top < data.shape[1]:
            data = data.top_items(top)
            name = f"{name} (top {top} items)"
        n, m = data.shape
        result[name] = {}
        for method, fn in methods(args, k, m).items():
            s = fn(data, 0)
            result[name][method] = s
            print(
                f"| {name} | {n} x {m} | {k} | {method} | {s['f1']:.3f} | {s['rmsd']:.4f} "
                f"| {s['rmsd_sum']:.3f} | {s['seconds']:.1f} |"
            )
    return result


def cmd_dp(args: argparse.Namespace) -> dict:
    """Acceptance 3: F1 of Felb-MU versus epsilon per upload (delta = 0.05)."""
    result: dict = {}
    print("| mechanism | clip | epsilon/upload | sigma or b | composed epsilon | F1 | F1 signal |")
    print("|---|---|---|---|---|---|---|")
    for mech, clip in (("gaussian", "frobenius"), ("gaussian", "none"), ("laplace", "none")):
        for eps in args.epsilon:
            rows = []
            for trial in range(args.trials):
                data = load_boolean(
                    "synthetic-boolean",
                    noise=0.1,
                    n_clients=args.clients,
                    seed=trial,
                    rows=args.rows_per_client * args.clients,
                    cols=args.cols,
                    tiles=args.rank,
                )
                cfg = FelbMUConfig(
                    rank=args.rank,
                    local_steps=args.b,
                    dp_mechanism=mech,
                    dp_epsilon=eps,
                    dp_delta=0.05,
                    dp_clip=clip,
                    dp_theta=args.theta if clip == "frobenius" else None,
                )
                rows.append(run_felb(cfg, data, args.rounds, trial))
            s = summarize(rows)
            scale = cfg.privacy(args.rank, args.cols).scale
            composed = rows[0]["dp_epsilon"]
            result[f"{mech}-{clip}-{eps:g}"] = {**s, "scale": scale, "composed": composed}
            print(
                f"| {mech} | {clip} | {eps:g} | {scale:.3g} | {composed:.3g} "
                f"| {_pm(s['f1'])} | {_pm(s['f1_signal'])} |"
            )
    return result


def cmd_scale(args: argparse.Namespace) -> dict:
    """Acceptance 4 / Fig. 3 (abundance): 500 rows per client, 4 to 512 clients."""
    result: dict = {}
    print("| clients | rows | method | s per round | s per round per client | F1 signal |")
    print("|---|---|---|---|---|---|")
    for C in args.client_counts:
        data = load_boolean(
            "synthetic-boolean",
            noise=0.1,
            n_clients=C,
            rows=500 * C,
            cols=args.cols,
            tiles=args.rank,
            seed=0,
        )
        for name, config in (("felb", FelbConfig), ("felb-mu", FelbMUConfig)):
            s = run_felb(config(rank=args.rank, local_steps=args.b), data, args.rounds, 0)
            per_round = s["seconds"] / args.rounds
            result[f"{name}-{C}"] = {**s, "per_round": per_round}
            print(
                f"| {C} | {500 * C} | {name} | {per_round:.3f} | {per_round / C * 1e3:.2f} ms "
                f"| {s['f1_signal']:.3f} |"
            )
    return result


def _pm(ms: tuple[float, float], digits: int = 3) -> str:
    return f"{ms[0]:.{digits}f} ± {ms[1]:.{digits}f}"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)
    for name in ("noise", "real", "dp", "scale"):
        q = sub.add_parser(name)
        q.add_argument("--rank", type=int, default=10)
        q.add_argument("--b", type=int, default=10, help="local steps per synchronization")
        q.add_argument("--rounds", type=int, default=50)
        q.add_argument("--cols", type=int, default=500)
        q.add_argument("--out", type=Path)
        q.add_argument(
            "--set", nargs="*", default=[], metavar="KEY=VALUE", help="Felb config overrides"
        )
        if name in ("noise", "dp"):
            q.add_argument("--trials", type=int, default=10)
            q.add_argument("--clients", type=int, default=10)
            q.add_argument("--rows-per-client", type=int, default=200)
        if name == "noise":
            q.add_argument("--noise", type=float, nargs="+", default=[0.0, 0.1, 0.2, 0.3, 0.4])
        if name == "real":
            q.add_argument("--clients", type=int, default=50)
            q.add_argument("--sets", nargs="+", default=list(REAL_SETS), choices=list(REAL_SETS))
            q.add_argument(
                "--top-items",
                type=int,
                help="keep only the N most frequent columns of every set (default: TOP_ITEMS)",
            )
        if name == "dp":
            q.add_argument("--epsilon", type=float, nargs="+", default=[0.1, 0.5, 1.0, 2.0, 1e3])
            q.add_argument("--theta", type=float, default=10.0, help="Frobenius clip threshold")
        if name == "scale":
            q.add_argument("--client-counts", type=int, nargs="+", default=[4, 16, 64, 256, 512])
    args = p.parse_args()
    result = {"noise": cmd_noise, "real": cmd_real, "dp": cmd_dp, "scale": cmd_scale}[args.command](
        args
    )
    if args.out:
        args.out.write_text(json.dumps({"args": vars(args), **result}, default=str))


if __name__ == "__main__":
    main()
