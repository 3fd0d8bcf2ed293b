"""The canary audit of everything a run publishes (``fedmc.audit.canary``; docs/privacy.md).

Runs ``fedmc run``'s pipeline ``--runs`` times on each of two neighbouring data sets (the
canary's ratings in or out, its client enrolled in both), reads back every published file of
each run, and prints the empirical 95% lower bound on epsilon of the best test chosen on a
calibration share of the runs. With ``--no-dp`` the same runs without DP show that the audit
finds the leaks of a run that is not private.

    FEDMC_DATA=../shared/data python benchmarks/canary_audit.py --dataset ml-100k --runs 200 \
        --epsilon 1
    FEDMC_DATA=../shared/data python benchmarks/canary_audit.py --dataset ml-100k --runs 200 \
        --no-dp

With ``--view server`` the audit reads what the server step is handed instead of the
published files (every exchange's noised cohort sum, the server's view under secure
aggregation and in a simulation; ``fedmc.audit.canary.server_view``), one test chosen on the
calibration runs:

    FEDMC_DATA=../shared/data python benchmarks/canary_audit.py --dataset ml-100k --runs 200 \
        --epsilon 1 --view server

With ``--search M`` each run is a whole private search instead (``fedmc tune --dp-epsilon E
--trials M`` with the algorithm's declared space named as its training settings, then the
fold-in choice; a validation cut of 0.05, :mod:`fedmc.tune.private`), and its ``best.json`` is
read back with the chosen run's files; with ``--search 0`` the search ``fedmc tune --dp-epsilon
E`` runs when no training setting is named (one run, then the fold-in choice).
"""

from __future__ import annotations

import argparse
import sys
import time

from rich.progress import Progress

from fedmc.audit.canary import (
    audit_runs,
    epsilon_lower_bound,
    neighbours,
    pick_canary,
    server_view_bound,
    server_views,
)
from fedmc.data.registry import load_dataset, rating_scale
from fedmc.run.options import RunOptions
from fedmc.run.runner import execute, write_outputs
from fedmc.run.settings import apply_paper_settings, resolve
from fedmc.run.spec import RunSpec
from fedmc.tune.private import PrivateSearch, run_private_search
from fedmc.tune.report import write_private_best
from fedmc.tune.space import private_space, search_space

SEARCH_CUT = 0.05
"""The validation cut of an audited private search."""


def settings(args: argparse.Namespace) -> RunSpec:
    """The run the audit repeats: the algorithm's paper settings for one user per client and,
    with a budget, its DP defaults (what ``fedmc run --partition user --dp-epsilon E`` runs),
    with ``--rounds`` if given (``--clip`` where the algorithm has no DP default)."""
    dp = {} if args.no_dp else {"dp_epsilon": args.epsilon, "dp_mechanism": args.dp_mechanism}
    options = RunOptions(algorithm=args.algorithm, dataset=args.dataset, partition="user",
                         rounds=args.rounds, seed=args.seed, **dp)
    if not args.no_dp and apply_paper_settings(
            args.algorithm, options.model_dump(exclude={"params", "algorithm"}), {}
            )[0]["dp_clip"] is None:
        options = options.model_copy(update={"dp_clip": args.clip})
    return resolve(options)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", default="ml-100k")
    ap.add_argument("--algorithm", default="fedmc-admm")
    ap.add_argument("--runs", type=int, default=200, help="runs on each data set")
    ap.add_argument("--epsilon", type=float, default=1.0)
    ap.add_argument("--clip", type=float, default=0.5, help="--dp-clip where no default")
    ap.add_argument("--rounds", type=int, default=None)
    ap.add_argument("--no-dp", action="store_true")
    ap.add_argument("--dp-mechanism", choices=("gaussian", "skellam"), default=None,
                    help="the noise (skellam: what a --secagg federation's members add)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--view", choices=("published", "server"), default="published",
                    help="what the audit reads: the published files, or what the server "
                         "step is handed")
    ap.add_argument("--search", type=float, default=None,
                    help="each run a private search of this mean number of trials "
                         "(0: one run and the fold-in choice)")
    args = ap.parse_args()
    run = settings(args)
    data_settings = run.data
    ratings = load_dataset(args.dataset)
    canary = pick_canary(ratings)
    scale = None if args.no_dp else rating_scale(args.dataset)
    cut = 0.0 if args.search is None else SEARCH_CUT
    inside, outside = neighbours(ratings, canary, data_settings.test_fraction, args.seed,
                                 data_settings.normalize, scale, validation_fraction=cut)

    if args.search is not None and args.no_dp:
        ap.error("--search is a private search: give --epsilon, not --no-dp")
    search = None
    if args.search is not None:
        fold_in = private_space(args.algorithm, {}, {})[1]
        search = PrivateSearch(RunOptions(
            algorithm=args.algorithm, dataset=args.dataset, partition="user",
            rounds=args.rounds, seed=args.seed, dp_epsilon=args.epsilon,
            dp_clip=None if run.schedule.dp is None else run.schedule.dp.clip,
            validation_fraction=cut),
            search_space(args.algorithm, False, {}, {}) if args.search else {},
            max(args.search, 1.0), fold_in=fold_in)

    def run_once(data, folder):
        if search is None:
            write_outputs(folder, execute(run, loaded=(data, {})))
            return
        chosen = run_private_search(search, loaded=(data, {}))
        write_outputs(folder, chosen.result)
        write_private_best(folder / "best.json", search, chosen, [])

    start = time.perf_counter()
    delta = 0.0 if args.no_dp else 1e-6
    with Progress(transient=True) as bar:
        task = bar.add_task("canary audit", total=args.runs)
        if args.view == "server":
            if search is not None:
                ap.error("--view server audits one run's exchanges: not with --search")
            bound = server_view_bound(*server_views(run, inside, outside, canary, args.runs,
                                                    lambda r: bar.update(task, completed=r)),
                                      delta=delta)
        else:
            runs_in, runs_out = audit_runs(run_once, inside, outside, canary, args.runs,
                                           lambda r: bar.update(task, completed=r))
            bound = epsilon_lower_bound(runs_in, runs_out, delta=delta)
    what = "no DP" if args.no_dp else f"DP epsilon {args.epsilon:g} (against the server)"
    if args.dp_mechanism == "skellam" and not args.no_dp:
        what += ", Skellam noise"
    what += ", the server's view" if args.view == "server" else ", the published files"
    if args.search is not None:
        what += (f", private searches of {args.search:g} trials on average" if args.search
                 else ", private searches of one run and the fold-in choice")
    print(f"{args.algorithm} on {args.dataset}, {what}, {args.runs} runs per data set "
          f"({time.perf_counter() - start:.0f} s): canary of {len(canary.items)} ratings; "
          f"best test: {bound.test}; TPR {bound.tpr:.3f}, FPR {bound.fpr:.3f} on {bound.runs} "
          f"evaluation runs each; 95% lower bound on epsilon: {bound.epsilon:.3f}",
          file=sys.stdout)


if __name__ == "__main__":
    main()
