"""Plot the rated-item-set attack of ``fedmc audit`` runs (their ``--out`` folders).

One bar per (audited algorithm, what the server holds) for the best first-observation
attack: precision as a multiple of the base rate (guessing at random is 1) and recall.

Example (the runs of ``docs/privacy.md``)::

    python benchmarks/plot_audit.py docs/figures/privacy-audit.png runs/audit-*
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

NAMES = {"fedmc-admm": "FedMC-ADMM", "fedmavg": "FedMAvg", "rfrec": "RFRec"}
VIEWS = {"plain": "plain uploads", "secagg": "SecAgg sums", "dp": "SecAgg + DP (eps 8)"}


def bars(folder: Path) -> list[tuple[tuple[str, str], int, tuple]]:
    """Each view of one audit as ``((algorithm, view), seeds pooled, bar)``, the bar ``(label,
    precision / base rate, recall, the ratio's interval)`` of its best first-observation
    attack (pooled over the seeds of ``--repeat``, if any; for one seed the interval is the
    ratio itself)."""
    config = json.loads((folder / "config.json").read_text())
    name = NAMES.get(config["algorithm"], config["algorithm"])
    if "consensus" in config["params"]:
        name += f" ({config['params']['consensus']})"
    runs = config.get("repeat", 1)
    best: dict[str, dict] = {}
    for r in json.loads((folder / "audit.json").read_text()):
        if r.get("seeds", config.get("seeds")) != config.get("seeds"):
            continue  # one seed's row of a pooled audit
        if r["attack"] not in ("first", "first-round") or r["precision"] is None:
            continue
        if not math.isfinite(r["precision"]):
            continue
        if r["view"] not in best or r["precision"] > best[r["view"]]["precision"]:
            best[r["view"]] = r
    out = []
    for view, r in best.items():
        ratio = r["precision"] / r["base_rate"]
        label = f"{name}\n{VIEWS[view]}" + (f", {runs} seeds" if runs > 1 else "")
        out.append(((name, view), runs, (label, ratio, r["recall"], (
            ratio - r.get("ratio_low", ratio), r.get("ratio_high", ratio) - ratio))))
    return out


def main(target: str, folders: list[str]) -> None:
    """Plot the audits in ``folders`` to ``target``: one bar per (algorithm, view), in the
    order first seen; of two audits of the same view, the one pooling more seeds."""
    chosen: dict[tuple[str, str], tuple[int, tuple]] = {}
    for folder in folders:
        for key, runs, bar in bars(Path(folder)):
            if key not in chosen or runs > chosen[key][0]:
                chosen[key] = (runs, bar)
    data = [bar for _, bar in chosen.values()]
    labels, lift, recall, interval = zip(*data, strict=True)
    fig, (left, right) = plt.subplots(1, 2, figsize=(9, 0.45 * len(labels) + 1.2), sharey=True)
    y = range(len(labels))
    left.barh(y, lift, color="tab:red", xerr=list(zip(*interval, strict=True)), capsize=2)
    left.axvline(1.0, color="k", lw=0.8, ls="--")
    left.axvline(1.5, color="grey", lw=0.8, ls=":")
    left.set_xscale("log")
    left.set_xlabel("precision / base rate (log; 1 = guessing)")
    left.set_yticks(list(y), labels, fontsize=7)
    left.invert_yaxis()
    right.barh(y, recall, color="tab:blue")
    right.set_xlim(0, 1.05)
    right.set_xlabel("recall")
    fig.suptitle("What a curious server learns of each client's rated items (ML-100K)",
                 fontsize=10)
    fig.tight_layout()
    fig.savefig(target, dpi=130)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
