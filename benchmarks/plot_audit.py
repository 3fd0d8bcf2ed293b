"""Plot the audit's rated-item-set attack from the JSON lines of ``audit_leakage.py``.

One bar per (algorithm or mode, what the server holds) for the first-observation attack:
precision as a multiple of the base rate (guessing at random is 1) and recall.

Example::

    FEDMC_DATA=../shared/data python benchmarks/audit_leakage.py > audit.jsonl
    python benchmarks/plot_audit.py audit.jsonl docs/figures/privacy-audit.png
"""

from __future__ import annotations

import json
import math
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {"rated": "FedMC-ADMM (rated)", "all": "FedMC-ADMM (paper)", "fedmavg": "FedMAvg",
         "rfrec": "RFRec"}


def bars(rows: list[dict]) -> list[tuple[str, float, float]]:
    """(label, precision / base rate, recall) of each (mode, view): its best first-round
    attack."""
    best: dict[tuple[str, str], dict] = {}
    for r in rows:
        if r.get("attack") not in ("first", "broadcast", "cohort") or r.get("intersect"):
            continue
        if not math.isfinite(r.get("precision", math.nan)):
            continue
        key = (r["mode"], r["view"])
        if key not in best or r["precision"] > best[key]["precision"]:
            best[key] = r
    return [(f"{NAMES.get(mode, mode)}\n{view}", r["precision"] / r["base_rate"], r["recall"])
            for (mode, view), r in best.items()]


def main(source: str, target: str) -> None:
    with open(source) as fh:
        data = bars([json.loads(line) for line in fh if line.strip()])
    labels, lift, recall = zip(*data, strict=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    y = range(len(labels))
    left.barh(y, lift, color="tab:red")
    left.axvline(1.0, color="k", lw=0.8, ls="--")
    left.axvline(1.5, color="grey", lw=0.8, ls=":")
    left.set_xscale("log")
    left.set_xlabel("precision / base rate (log; 1 = guessing)")
    left.set_yticks(list(y), labels, fontsize=8)
    left.invert_yaxis()
    right.barh(y, recall, color="tab:blue")
    right.set_xlim(0, 1.05)
    right.set_xlabel("recall")
    fig.suptitle("What a curious server learns of each client's rated items (ML-100K)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(target, dpi=130)


if __name__ == "__main__":
    main(*sys.argv[1:3])
