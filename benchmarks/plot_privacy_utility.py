"""Plot test RMSE against epsilon from the JSON lines of ``bench_privacy_utility.py test``.

One line per ``label`` with runs at finite epsilon; a label with only a no-DP run (epsilon inf)
is a dotted horizontal line, as is the no-DP run of each curve; the item mean is dashed.

Example::

    python benchmarks/plot_privacy_utility.py curve.jsonl docs/figures/privacy-utility-ml-1m.png
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
    runs = [r for r in rows if "rmse" in r and math.isfinite(r["rmse"])]
    finite = sorted({r["eps"] for r in runs if math.isfinite(r["eps"])})
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    extra = iter(["tab:purple", "tab:brown", "tab:gray", "tab:olive"])  # no-DP-only lines
    for label in dict.fromkeys(r.get("label", r["algorithm"]) for r in runs):
        mine = [r for r in runs if r.get("label", r["algorithm"]) == label]
        pts = sorted((r["eps"], r["rmse"]) for r in mine if math.isfinite(r["eps"]))
        if pts:
            line, = ax.plot(*zip(*pts, strict=True), marker="o", label=label)
            color, name = line.get_color(), None
        else:
            color, name = next(extra), f"{label}, no user-level DP"
        for r in mine:
            if math.isinf(r["eps"]):
                ax.axhline(r["rmse"], color=color, ls=":", lw=1.2, label=name)
    ax.axhline(baseline, color="k", ls="--", lw=1, label="item mean")
    ax.set_xscale("log", base=2)
    ax.set_xticks(finite, [f"{e:g}" for e in finite])
    ax.set_xlabel("user-level epsilon (delta 1e-6, whole run); dotted: no DP")
    ax.set_ylabel("test RMSE")
    ax.set_title("ML-1M, one user per client, 10% Poisson sampling, 90 rounds", fontsize=10)
    ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.2))
    fig.tight_layout()
    fig.savefig(target, dpi=120, bbox_inches="tight")


if __name__ == "__main__":
    main(*sys.argv[1:3])
