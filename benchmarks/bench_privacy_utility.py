"""Privacy-utility on ML-1M with one user per client (issue 13): RMSE against the user-level DP
budget epsilon (delta 1e-6, whole run), Poisson sampling of the clients (10% per round unless
told otherwise).

``validate`` scores settings (clip norms, rounds, the algorithm's parameters) on the 90/10
validation cut of the seed-0 training ratings (``bench_cross_device.validation_data``), never on
the test ratings; ``test`` runs the chosen settings on the real 80/20 split and prints the
item-mean baseline. Every option takes comma-separated values and every combination runs; each
line is one JSON record: algorithm, epsilon, the settings, RMSE, the epsilon spent, the noise
multiplier, seconds; for RFRec with its own local DP (``--fixed delta=... --fixed s=...``) also
the epsilon that mechanism spends per user and upload and over the ``q * rounds`` uploads a
user makes on average (``LaplaceMechanism.user_epsilon``).

Examples::

    FEDMC_DATA=../shared/data python benchmarks/bench_privacy_utility.py validate \\
        --eps 8 --clip 0.15,0.2 --setup-clip 1 --rounds 60,90 --fixed consensus=rated \\
        --fixed dual_init=zeros --fixed weights=sqrt-items --fixed beta=0.3 --grid gamma=5,10
    FEDMC_DATA=../shared/data python benchmarks/bench_privacy_utility.py test \\
        --eps inf,16,8,4,2,1 --clip 0.15 --setup-clip 1 --rounds 90 --fixed ...

``--noise Z`` runs at noise multiplier ``Z`` instead of a budget (with ``--eps inf``).
``--normalize`` picks the normalizer (``public``, the default: from the rating scale 1..5, as
a DP run must; ``zscore`` fitted on the training ratings, as before issue 21). ``rmse`` is what
``fedmc evaluate`` measures: every held-out user folded in from its own training ratings
against the published model (:func:`fedmc.run.evaluation.evaluate_model`); ``run_rmse`` the
run's own last evaluation (each client's ``U`` as training left it; null for a private run,
which releases none).
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time

import numpy as np
from bench_cross_device import item_mean_rmse, test_data, validation_data
from sweep import parse_value

from fedmc.core.shard import CSR
from fedmc.estimators import estimator_class
from fedmc.model import FactorModel
from fedmc.privacy.accounting import UserDP
from fedmc.run.evaluation import HeldOut, evaluate_model


def fit(data, algorithm: str, rounds: int, eps: float, noise: float | None, q: float,
        dp_clip: float, setup_scale: float, setup_clip: float | None, against: str = "outsiders",
        **params) -> dict:
    """One run, Poisson sampling at rate ``q``, user-level DP at budget ``eps`` (inf: none;
    promised against ``against``) or at noise multiplier ``noise``; the final RMSE and the
    epsilon spent."""
    budget = {} if math.isinf(eps) else {"epsilon": eps}
    if noise is not None:
        budget["noise"] = noise
    dp = budget and {"dp": UserDP(**budget, clip=dp_clip, delta=1e-6, setup_scale=setup_scale,
                                  setup_clip=setup_clip, against=against)}
    model = estimator_class(algorithm)(**params, rounds=rounds, sampling="bernoulli",
                                     participation=q, random_state=0,
                                         eval_every=max(rounds, 1), **dp)
    start = time.perf_counter()
    try:
        model.fit(data)
    except np.linalg.LinAlgError as error:  # a step size that diverges: score it, go on
        return {"rmse": math.nan, "error": str(error)}
    last = model.history_.rows[-1]
    out = {"rmse": round(folded_in_rmse(model, data), 4),
           # a private run releases no evaluation of its own (docs/privacy.md)
           "run_rmse": round(float(last["test_rmse"]), 4) if "test_rmse" in last else None,
           "spent": round(float(last["epsilon"]), 3) if dp else math.inf,
           "noise": round(float(last.get("dp_noise", 0.0)), 3),
           "seconds": round(time.perf_counter() - start, 1)}
    ldp = model.config_.mechanism() if algorithm == "rfrec" else None
    if ldp is not None:  # RFRec's own local DP, Eq. (9): one dense d x m upload per visit
        per_upload = ldp.user_epsilon(model.config_.rank * data.n_items, 1)
        out.update(ldp_epsilon_per_upload=per_upload, ldp_epsilon_expected_run=per_upload * q
                   * rounds)
    return out


def folded_in_rmse(model, data) -> float:
    """Test RMSE of the published model (a fitted estimator's, or a run's ``FactorModel``),
    every held-out user folded in from its own training ratings (what ``fedmc evaluate``
    measures)."""
    inverse = data.normalizer.inverse
    held = HeldOut(*(CSR(m.indptr, m.indices, inverse(m.values)) for m in (data.train,
                                                                          data.test)),
                   user_ids=np.arange(data.n_users))
    published = model if isinstance(model, FactorModel) else FactorModel.from_estimator(model)
    return evaluate_model(published, held)["test_rmse"]


def values(text: str) -> list:
    """The comma-separated values of an option, parsed (``none`` is None)."""
    return [None if v.lower() == "none" else parse_value(v) for v in text.split(",")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", choices=("validate", "test"))
    ap.add_argument("--algorithm", default="fedmc-admm")
    ap.add_argument("--label", help="name of the curve in the plot (default: the algorithm)")
    ap.add_argument("--eps", default="8", help="budgets; inf: no DP")
    ap.add_argument("--noise", default="none", help="noise multipliers (instead of --eps inf)")
    ap.add_argument("--clip", default="1", help="clip norms of one upload")
    ap.add_argument("--rounds", default="100", help="round counts")
    ap.add_argument("--q", default="0.1", help="Poisson sampling rates")
    ap.add_argument("--setup-scale", default="1", help="set-up noise / round noise")
    ap.add_argument("--setup-clip", default="none", help="clip norms of a set-up upload")
    ap.add_argument("--normalize", default="public", help="public | zscore | center | none")
    ap.add_argument("--against", default="outsiders", choices=("outsiders", "server"),
                    help="whom the budget is promised against (outsiders: amplified by the "
                         "sampling, as these grids measured before issue 38; with --q 1 the "
                         "two are the same)")
    ap.add_argument("--fixed", action="append", default=[], help="KEY=VALUE")
    ap.add_argument("--grid", action="append", default=[], help="KEY=V1,V2,...")
    args = ap.parse_args()
    fixed = {k: parse_value(v) for k, v in (f.split("=", 1) for f in args.fixed)}
    grid = dict(g.split("=", 1) for g in args.grid)
    data = (validation_data(normalize=args.normalize) if args.what == "validate"
            else test_data(0, args.normalize))
    print(json.dumps({"item_mean": round(item_mean_rmse(data), 4), "data": args.what}),
          flush=True)
    options = {"rounds": args.rounds, "eps": args.eps, "noise": args.noise, "q": args.q,
               "dp_clip": args.clip,
               "setup_scale": args.setup_scale, "setup_clip": args.setup_clip, **grid}
    for combo in itertools.product(*map(values, options.values())):
        setting = dict(zip(options, combo, strict=True))
        params = {**fixed, **{k: setting.pop(k) for k in grid}}
        result = fit(data, args.algorithm, **setting, against=args.against, **params)
        print(json.dumps({"algorithm": args.algorithm, "label": args.label or args.algorithm,
                          **setting, **params, **result}),
              flush=True)


if __name__ == "__main__":
    main()
