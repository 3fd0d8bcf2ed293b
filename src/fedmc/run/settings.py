"""What a run is, and the one place its defaults are chosen.

:class:`~fedmc.run.options.RunOptions` is what the user asked for: every option of ``fedmc run``
(the command line's names, ``None`` where the user gave nothing), the algorithm's parameters the
user gave, nothing filled in. :func:`resolve` turns it into a :class:`RunSpec`: the algorithm
and its parameters, the data settings, the federation's
:class:`~fedmc.federation.settings.Schedule` (user-level DP included), what follows training,
and the list of the options it chose. Every default of a run is chosen in :func:`resolve`, by
asking the algorithm's spec (:mod:`fedmc.algorithms.registry`: its paper settings, partition and
DP variants, the settings with which it fits interactions); the command line parses,
:func:`resolve` decides, the runner (:mod:`fedmc.run.runner`), the estimators and a federation
(:mod:`fedmc.flower.settings`) run a ``RunSpec``.

A new run option is one field of :class:`~fedmc.run.options.RunOptions` (and of :class:`RunSpec`
or one of its parts) and, where it has a default that depends on other settings, one line in
:func:`resolve`.
"""

from __future__ import annotations

import functools
import json
import math
from collections.abc import Callable
from typing import Any, cast

from pydantic import ValidationError

from fedmc.algorithms.registry import (
    CROSS_SILO,
    DP_OPTIONS,
    IMPLICIT,
    PAPER_OPTIONS,
    SAMPLE_OPTIONS,
    AlgorithmSpec,
    default_algorithm,
    dp_baseline,
    interactions_algorithms,
    spec,
    specs,
)
from fedmc.errors import ConfigError, marked_text
from fedmc.federation.settings import Backend, EarlyStopping, Schedule
from fedmc.privacy.accounting import UserDP
from fedmc.run.data_settings import DataSettings, is_boolean
from fedmc.run.options import IMPLICIT_RANKING_K, RunOptions
from fedmc.run.spec import RunSpec, check_normalizer

DEFAULT_ACTIVE = 10
"""Clients per round where neither the user nor the algorithm's paper settings say: at most
10 (every client with one user per client, where the algorithm's sampling decides)."""
DEFAULT_VALIDATION = 0.05
"""The validation cut of a run that stops early and named none: a twentieth of every client's
training ratings (without the refit the cut costs the model training data: on ML-100K, one
user per client, a tenth gave a test RMSE 0.5% above the best round of the run without a cut,
a twentieth 0.3%)."""
TUNE_VALIDATION = 0.2
"""The validation cut of a search that names none: a fifth of every client's training ratings.
A choice among many settings needs a score it can trust (on ML-100K a twentieth, about four
interactions a user, picked federated ALS settings that ranked 2.5% below the library's on the
test split), and the final run trains on every training rating anyway."""


def resolve(options: RunOptions,
            enrolment: Callable[[DataSettings], int] | None = None) -> RunSpec:
    """The run ``options`` ask for, every default chosen.

    The algorithm's paper settings fill the options of
    :data:`~fedmc.algorithms.registry.PAPER_OPTIONS` the user left out
    (:func:`apply_paper_settings`, with its partition and DP variants), then: the normalizer
    (``none`` for interactions, ``public`` under DP, ``zscore`` otherwise), the clients per
    round (:data:`DEFAULT_ACTIVE` at most; every client with one user per client), uniform
    sampling, ranking at 10 for interactions (not in a private run: ``fedmc evaluate``
    ranks), the settings with which the algorithm fits interactions, and the set-up noise
    scale of DP (1). With a DP budget and no algorithm named, the DP baseline instead of the
    default algorithm where the data have too few users for that one to beat it at the
    budget (:func:`dp_default`); with a DP budget, the algorithm's DP settings for fewer
    users where the data have fewer than theirs (:func:`few_users_note` says so). Nothing
    else chooses a default.

    Parameters
    ----------
    options
        What the user asked for.
    enrolment
        ``enrolment(data)``: the number of users of the data ``data`` name (read only with a
        DP budget whose settings depend on it: the default algorithm's against the DP
        baseline, settings for fewer users; :func:`fedmc.run.data.enrolled_users`), a public
        size of a private run (``docs/privacy.md``); None: unknown, taken as enough for the
        default algorithm.

    Raises
    ------
    fedmc.errors.ConfigError
        Options that contradict each other, or settings the algorithm refuses; errors name
        the options (``dp_clip``, ``partition``, ...): the command line reports them by its
        flags.
    """
    defaulted: list[str] = []
    kind = "boolean" if is_boolean(options) else "ratings"
    algorithm = options.algorithm or default_algorithm(kind, options.implicit)
    if options.algorithm is None:
        defaulted.append("algorithm")
    given = options.model_dump(exclude={"params", "algorithm"})
    count = None if enrolment is None else functools.cache(
        lambda: enrolment(data_settings(given)))
    o, params, paper = apply_paper_settings(algorithm, given, dict(options.params), count)
    notes: tuple[str, ...] = ()
    if options.algorithm is None and options.dp_epsilon is not None:
        baseline, notes = dp_default(algorithm, kind, options, o["partition"], count)
        if baseline != algorithm:
            algorithm = baseline
            o, params, paper = apply_paper_settings(algorithm, given, dict(options.params),
                                                    count)
    if options.dp_epsilon is not None:
        notes += few_users_note(spec(algorithm), options, o["partition"], count)
    if options.algorithm is None and options.implicit and not notes:
        others = " or ".join(n for n in interactions_algorithms() if n != algorithm)
        notes = (f"fitting {algorithm} (--algorithm {algorithm}): the default algorithm for "
                 f"interactions (--implicit); --algorithm {others} fits them too",)
    check_rounds(algorithm, o["rounds"])
    defaulted += paper
    normalize = o["normalize"]
    if normalize is None:  # under DP (reproducible too: the same run but for the noise)
        normalize = "none" if o["implicit"] else "public" if options.dp else "zscore"
        defaulted.append("normalize")
    check_normalizer(options.dp, normalize)
    if options.early_stopping and options.validation_fraction is None:
        o["validation_fraction"] = DEFAULT_VALIDATION
        defaulted.append("validation_fraction")
    data = data_settings(o, normalize)
    active = o["active"]
    if active is None:
        active = "all" if o["partition"] == "user" else min(DEFAULT_ACTIVE, o["clients"])
    ranking_k = o["ranking_k"]
    if ranking_k is None and data.implicit and not options.private:
        # interactions are judged by ranking (a private run: by fedmc evaluate)
        ranking_k = IMPLICIT_RANKING_K
        defaulted.append("ranking_k")
    stopping = early_stopping(options, data, defaulted)
    schedule = Schedule(rounds=o["rounds"], active=None if active == "all" else active,
                        sampling=o["sampling"] or "uniform", participation=o["participation"],
                        dropout=o["dropout"], eval_every=o["eval_every"], seed=o["seed"],
                        dp=user_dp(o), early_stopping=stopping,
                        eval_k=ranking_k if data.validation_fraction > 0 and data.implicit
                        else None)
    if options.dp_epsilon is not None and options.dp_against == "outsiders":
        notes += (outsiders_note(options.dp_epsilon, schedule),)
    run = RunSpec(algorithm=algorithm, params=implicit_params(spec(algorithm), params, data),
                  data=data, schedule=schedule, ranking_k=ranking_k,
                  save_user_factors=o["save_user_factors"], backend=backend(options),
                  defaulted=tuple(sorted(set(defaulted))), notes=notes)
    run.config()  # the algorithm's parameters checked before anything starts
    return run


def backend(options: RunOptions) -> Backend:
    """Where the run's clients live: ``options.backend``, its ``workers`` (default 2) and
    ``ray_address``, which only the Ray backend takes."""
    if options.workers is not None and options.workers < 1:
        raise ConfigError(f"`workers={options.workers}`: the clients need at least one shard")
    if options.backend == "ray":
        return Backend(kind="ray", workers=options.workers or Backend().workers,
                       address=options.ray_address)
    for name in ("workers", "ray_address"):
        value = getattr(options, name)
        if value is not None:
            raise ConfigError(f"`{name}={value}` places the clients in Ray's workers: give "
                              f"`backend=ray`")
    return Backend(kind=options.backend)


def check_rounds(algorithm: str, rounds: int) -> None:
    """Refuse ``rounds=0`` for an algorithm that learns in rounds (its model before the first
    round is its initial one, which a run would publish as trained); an algorithm whose
    protocol is one set-up exchange (its paper settings: ``rounds=0``) takes it."""
    if rounds != 0 or spec(algorithm).paper_settings.get("rounds") == 0:
        return
    one_exchange = [name for name, entry in specs().items()
                    if entry.paper_settings.get("rounds") == 0]
    raise ConfigError(f"`rounds=0` trains nothing: {algorithm} learns in rounds and would "
                      f"publish its initial model; give `rounds=1` or more (`rounds=0` is the "
                      f"one-exchange protocol of {', '.join(one_exchange)})")


def early_stopping(options: RunOptions, data: DataSettings,
                   defaulted: list[str]) -> EarlyStopping | None:
    """The run's early stopping (None: off); its settings without it, a validation cut of
    Boolean data and a validation cut in a private run (whose validation sums would be
    releases no budget accounts) are refused."""
    if not options.early_stopping:
        for name in ("patience", "min_delta", "refit"):
            if (value := getattr(options, name)) is not None:
                raise ConfigError(f"`{name}={value}` needs `early_stopping=true`")
    if data.validation_fraction == 0 and not options.early_stopping:
        return None
    if is_boolean(data):
        raise ConfigError("`validation_fraction` keeps back ratings or interactions; Boolean "
                          "data have no validation cut")
    if options.private:
        raise ConfigError("`validation_fraction`: a private run would release its validation "
                          "metrics every round, which its budget does not account; tune "
                          "without DP or choose on a run without the cut")
    if not options.early_stopping:
        return None
    given = {k: v for k in ("patience", "min_delta", "refit")
             if (v := getattr(options, k)) is not None}
    defaulted += [k for k in ("patience", "min_delta", "refit") if k not in given]
    return EarlyStopping(**given)


def data_settings(options: dict[str, Any], normalize: str | None = None) -> DataSettings:
    """The data settings among the run's ``options`` by name (those set), with
    ``normalize``."""
    return DataSettings(**{name: options[name] for name in DataSettings.model_fields
                           if options.get(name) is not None and name != "normalize"},
                        normalize=normalize)


def dp_default(default: str, kind: str, options: RunOptions, partition: str,
               users: Callable[[], int] | None) -> tuple[str, tuple[str, ...]]:
    """The algorithm a run with a DP budget and no algorithm named fits under ``partition``:
    the ``default`` one, or, where the data have fewer users (``users()``, counted only where
    the default lists a least number; None: unknown, taken as enough; none is enough where
    the least number is infinite) than its DP settings need to beat the DP baseline's at the
    budget (:meth:`~fedmc.algorithms.registry.AlgorithmSpec.dp_least_users_at`), the DP
    baseline of ``kind`` data (:func:`~fedmc.algorithms.registry.dp_baseline`); and the line
    that says so (none for the default).

    Raises
    ------
    fedmc.errors.ConfigError
        An algorithm parameter the user gave that the baseline does not take (the user's
        settings are never dropped: naming the algorithm fits it).
    """
    epsilon = options.dp_epsilon
    least = 0 if epsilon is None else spec(default).dp_least_users_at(
        partition, epsilon, options.implicit, options.dp_against)
    if math.isinf(least):
        reason = (f"at --dp-epsilon {epsilon:g} {default}'s factors did not beat it with any "
                  "number of users measured")
    else:
        enrolled = users() if least and users is not None else None
        if enrolled is None or enrolled >= least:
            return default, ()
        reason = (f"at --dp-epsilon {epsilon:g} {default}'s factors need {least:,.0f} users or "
                  f"more to beat it, and the data have {enrolled:,}")
    baseline = dp_baseline(kind, options.implicit)
    foreign = sorted(options.params.keys() - spec(baseline).Config.model_fields.keys())
    if foreign:
        name = foreign[0]
        raise ConfigError(f"`params.{name}={options.params[name]}` is a setting of {default}, "
                          f"but {reason}: add --algorithm {default} to fit it anyway, or "
                          f"leave `params.{name}` out")
    return baseline, (f"fitting the DP baseline (--algorithm {baseline}): {reason} "
                      f"(--algorithm {default} fits factors anyway)",)


def few_users_note(entry: AlgorithmSpec, options: RunOptions, partition: str,
                   users: Callable[[], int] | None) -> tuple[str, ...]:
    """The line that says a private run takes ``entry``'s DP settings for fewer users than
    its budget's (:attr:`~fedmc.algorithms.registry.AlgorithmSpec.dp_few_users`) and which,
    or none (none of them taken: the user gave them all)."""
    epsilon = cast(float, options.dp_epsilon)
    few = entry.dp_few_users_at(partition, epsilon, options.implicit, options.dp_against)
    if few is None or users is None or users() >= few.users:
        return ()
    taken = [f"{k}={v}" for k, v in few.settings.items() if k not in options.params
             and getattr(options, k, None) is None]  # the user's own settings win
    if not taken:
        return ()
    return (f"{entry.name}'s DP settings for fewer than {few.users:,} users at --dp-epsilon "
            f"{epsilon:g} (the data have {users():,}): {', '.join(taken)}",)


def outsiders_note(epsilon: float, schedule: Schedule) -> str:
    """The line that says a budget is promised against outsiders only (``--dp-against
    outsiders``), and what the server gets: more, unless no amplification by sampling is
    claimed (every client in every round, cyclic participation or the Skellam mechanism: then
    the two accountings are the same)."""
    every = (schedule.participation == 1.0 if schedule.sampling == "bernoulli"
             else schedule.active is None and schedule.sampling != "cyclic")
    head = f"--dp-epsilon {epsilon:g} is promised against outsiders only (--dp-against outsiders)"
    if every:
        return (f"{head}: every client takes part in every round, so the server, which samples "
                "the cohorts, gets the same epsilon")
    why = ("cyclic participation" if schedule.sampling == "cyclic" else "the Skellam mechanism"
           if schedule.dp is not None and schedule.dp.mechanism == "skellam" else None)
    if why is not None:
        return (f"{head}: no amplification by sampling is claimed ({why}), so the server gets "
                "the same epsilon")
    return (f"{head}: the server, which samples the cohorts, gets a larger epsilon (the "
            "summary's privacy.epsilon.server)")


def user_dp(options: dict[str, Any]) -> UserDP | None:
    """The run's user-level DP from its ``dp_*`` options, None when off (neither a budget nor
    a noise multiplier); a clip alone, or a budget without a clip, is refused."""
    if options["dp_epsilon"] is None and options["dp_noise"] is None:
        if options["dp_clip"] is not None:
            raise ConfigError("`dp_clip` needs `dp_epsilon` or `dp_noise`")
        return None
    if options["dp_clip"] is None:
        raise ConfigError("user-level DP needs `dp_clip` (the L2 bound of one upload)")
    if options["dp_epsilon"] is None and options["dp_against"] != "server":
        raise ConfigError(f"`dp_against={options['dp_against']}` says whom `dp_epsilon` is "
                          "promised against: give `dp_epsilon` (with `dp_noise` alone both "
                          "parties' epsilons are reported)")
    setup_scale = options["dp_setup_scale"]
    try:
        return UserDP(clip=options["dp_clip"], delta=options["dp_delta"],
                      epsilon=options["dp_epsilon"], noise=options["dp_noise"],
                      setup_scale=1.0 if setup_scale is None else setup_scale,
                      setup_clip=options["dp_setup_clip"], unit=options["dp_unit"],
                      against=options["dp_against"],
                      mechanism=options["dp_mechanism"],
                      reproducible=options["dp_reproducible"])
    except ValidationError as exc:
        first = exc.errors()[0]
        where = "".join(f"`dp.{x}`: " for x in first["loc"])
        raise ConfigError(where + marked_text(first)) from None


def apply_paper_settings(algorithm: str, options: dict[str, Any], params: dict[str, Any],
                         users: Callable[[], int] | None = None,
                         ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Fill the options the user left unset (None) from ``algorithm``'s paper settings, the
    settings of its variant for the chosen partition and, with a DP budget (``dp_epsilon``),
    those tuned for that budget (:meth:`fedmc.algorithms.registry.AlgorithmSpec.dp_variant`).

    Parameters
    ----------
    algorithm
        The algorithm's name.
    options
        The run's options by name (:class:`RunOptions`' fields); None marks one the user did
        not give (:data:`fedmc.algorithms.registry.PAPER_OPTIONS` among them).
    params
        The algorithm parameters the user gave.
    users
        ``users()``: the number of users of the data, called only with a DP budget whose
        settings have a version for fewer users
        (:attr:`~fedmc.algorithms.registry.AlgorithmSpec.dp_few_users`); None: unknown,
        taken as enough.

    Returns
    -------
    options, params, defaulted
        Copies with the paper settings (and a variant's) filled in, and the names filled. A
        default never overrides what the user gave: ``clients`` given under paper settings of
        one user per client (RFRec's) federates that many clients, partitioned as the
        cross-silo settings do; a DP budget with neither ``clients`` nor ``partition`` (and a
        guarantee per user) takes one user per client, the unit the guarantee protects.

    Raises
    ------
    fedmc.errors.ConfigError
        ``clients`` and ``partition="user"`` both given.
    """
    options, params = dict(options), dict(params)
    entry = spec(algorithm)
    defaulted = []
    for name, value in entry.paper_settings.items():
        if options.get(name) is None:
            options[name] = value
            defaulted.append(name)
    if options.get("partition") == "user" and "clients" not in defaulted \
            and options.get("clients") is not None:
        if "partition" not in defaulted:
            raise ConfigError(f"`clients={options['clients']}` conflicts with `partition='user'` "
                              "(one client per user): give one of them")
        options["partition"] = CROSS_SILO["partition"]  # N clients, as asked
    per_user = options.get("dp_unit", "user") == "user"
    if options.get("dp_epsilon") is not None and per_user and "partition" in defaulted \
            and "clients" in defaulted and options["partition"] != "user":
        options["partition"] = "user"  # a guarantee per user: one user per client
    given_active = options.get("active") is not None and "active" not in defaulted
    variants = [entry.variants.get(options["partition"], {})]
    protocol = entry.variants.get(options["partition"] + IMPLICIT, {})
    sample = any(options.get(name) not in (None, 0.0, "all") and name not in defaulted
                 for name in SAMPLE_OPTIONS)  # dropout: 0 unless given; active all: everyone
    if options.get("implicit") and options.get("dp_epsilon") is None and not sample and all(
            params.get(name, value) == value for name, value in protocol.items()):
        variants.append(protocol)  # interactions' protocol, whole (AlgorithmSpec.variants)
    if options.get("dp_epsilon") is not None:
        variants.append(entry.dp_variant(options["partition"], options["dp_epsilon"],
                                         bool(options.get("implicit")), users,
                                         options.get("dp_against", "server")))
    for variant in variants:
        for name, value in variant.items():
            if name == "participation" and given_active:
                continue  # an explicit active N sets the rate (N / clients) of Bernoulli
            if name in PAPER_OPTIONS or name in DP_OPTIONS:
                if name in defaulted or options.get(name) is None:
                    options[name] = value
                    defaulted.append(name)
            elif name not in params or name in defaulted:
                params[name] = value
                defaulted.append(name)
    return options, params, sorted(set(defaulted))


def implicit_params(entry: AlgorithmSpec, params: dict[str, Any],
                    settings: DataSettings) -> dict[str, Any]:
    """The algorithm parameters ``params`` with the settings by which ``entry`` fits
    interactions (its registry entry's ``interactions``: fedals's implicit mode, item-bias's
    counts) when the data are interactions (``settings.implicit``); an algorithm without
    them, a setting the user gave that contradicts them, and an implicit mode without
    interaction data are refused."""
    config = entry.Config
    if settings.implicit:
        if not entry.interactions:
            names = ", ".join(interactions_algorithms())
            raise ConfigError(f"`implicit=true` reads interactions, which need an algorithm for "
                              f"implicit feedback ({names})")
        given = config(**params)
        for key, value in entry.interactions.items():
            if params.get(key) is not None and getattr(given, key) != value:
                raise ConfigError(f"`implicit=true` contradicts `{key}={params[key]}`")
        return {**params, **entry.interactions}
    if entry.needs_interactions is not None and entry.needs_interactions(config(**params)):
        mode = ", ".join(f"{k}={json.dumps(v)}" for k, v in entry.interactions.items())
        raise ConfigError(f"the algorithm's {mode} needs interaction data: add `implicit=true`")
    return params
