"""Plot test RMSE against epsilon from the JSON lines of ``bench_privacy_utility.py test``.

Example::

    python benchmarks/plot_privacy_utility.py curve.jsonl docs/figures/privacy_utility.png
"""

from __future__ import annotations

import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def main(source: str, target: str) -> None:
    rows = [json.loads(line) for line in open(source)]
    baseline = next(r["item_mean"] for r in rows if "item_mean" in r)
    runs = [r for r in rows if "rmse" in r]
    finite = sorted({r["eps"] for r in runs if math.isfinite(r["eps"])})
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for name in dict.fromkeys(r["algorithm"] for r in runs):
        mine = [r for r in runs if r["algorithm"] == name]
        pts = sorted((r["eps"], r["rmse"]) for r in mine if math.isfinite(r["eps"]))
        line, = ax.plot(*zip(*pts, strict=True), marker="o", label=name)
        for r in mine:
            if math.isinf(r["eps"]):
                ax.axhline(r["rmse"], color=line.get_color(), ls=":", lw=1)
    ax.axhline(baseline, color="k", ls="--", lw=1, label="item mean")
    ax.set_xscale("log", base=2)
    ax.set_xticks(finite, [f"{e:g}" for e in finite])
    ax.set_xlabel("epsilon (delta 1e-6, whole run); dotted: no DP")
    ax.set_ylabel("test RMSE")
    ax.set_title("ML-1M, one user per client, 10% Poisson sampling")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(target, dpi=120)


if __name__ == "__main__":
    main(*sys.argv[1:3])
