"""The settings of one ``fedmc run`` besides its data and its algorithm's parameters, and how
an algorithm's paper settings fill the options the user left out.

:class:`RunSettings` is the federation's :class:`fedmc.federation.settings.Schedule` plus the
algorithm and what the command does after training. ``fedmc run --algorithm X`` takes X's
paper settings (:attr:`fedmc.algorithms.registry.AlgorithmSpec.paper_settings`) for every
option of :data:`~fedmc.algorithms.registry.PAPER_OPTIONS` the user does not give, and the
settings X's registry entry has for the chosen partition; ``config.json`` lists the options
so defaulted (``run.defaulted``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from fedmc.algorithms.registry import CROSS_SILO, DP_OPTIONS, PAPER_OPTIONS, spec
from fedmc.errors import ConfigError
from fedmc.federation.settings import Schedule


class RunSettings(Schedule):
    """Everything that defines a run besides the data and the algorithm's own parameters."""

    algorithm: str = "fedmc-admm"
    active: int | None = Field(10, ge=1, description="clients per round (uniform sampling; "
                               "None: all); the command line's default is 10")
    ranking_k: int | None = Field(
        None, ge=1, description="cut-off K of the ranking metrics added after training"
    )
    save_user_factors: bool = Field(
        False, description="save U, raw user ids and rated items with the model (simulation)"
    )
    defaulted: list[str] = Field(
        default_factory=list,
        description="options taken from the algorithm's paper settings "
        "(fedmc.algorithms.registry)",
    )

    def schedule(self) -> Schedule:
        """The federation's part of the settings."""
        return Schedule(**{name: getattr(self, name) for name in Schedule.model_fields})


def apply_paper_settings(algorithm: str, options: dict[str, Any], params: dict[str, Any],
                   ) -> tuple[dict[str, Any], dict[str, Any], list[str]]:
    """Fill the options the user left unset (None) from ``algorithm``'s paper settings, the
    settings of its variant for the chosen partition and, with a DP budget (``dp_epsilon``),
    those tuned for that budget (:meth:`fedmc.algorithms.registry.AlgorithmSpec.dp_variant`).

    Parameters
    ----------
    algorithm
        The ``--algorithm`` name.
    options
        ``fedmc run``'s options by name; None marks one the user did not give
        (:data:`fedmc.algorithms.registry.PAPER_OPTIONS` among them).
    params
        The algorithm parameters the user gave.

    Returns
    -------
    options, params, defaulted
        Copies with the paper settings (and a variant's) filled in, and the names filled. A
        default never overrides what the user gave: ``--clients N`` under paper settings of one
        user per client (RFRec's) federates ``N`` clients, partitioned as the cross-silo
        settings do; a DP budget with neither ``--clients`` nor ``--partition`` (and a
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
            raise ConfigError(f"--clients {options['clients']} conflicts with --partition user "
                              "(one client per user): give one of them")
        options["partition"] = CROSS_SILO["partition"]  # N clients, as asked
    per_user = options.get("dp_unit", "user") == "user"
    if options.get("dp_epsilon") is not None and per_user and "partition" in defaulted \
            and "clients" in defaulted and options["partition"] != "user":
        options["partition"] = "user"  # a guarantee per user: one user per client
    given_active = options.get("active") is not None and "active" not in defaulted
    variants = [entry.variants.get(options["partition"], {})]
    if options.get("dp_epsilon") is not None:
        variants.append(entry.dp_variant(options["partition"], options["dp_epsilon"],
                                         bool(options.get("implicit"))))
    for variant in variants:
        for name, value in variant.items():
            if name == "participation" and given_active:
                continue  # --active N sets the rate (N / clients) of Bernoulli sampling
            if name in PAPER_OPTIONS or name in DP_OPTIONS:
                if name in defaulted or options.get(name) is None:
                    options[name] = value
                    defaulted.append(name)
            elif name not in params or name in defaulted:
                params[name] = value
                defaulted.append(name)
    return options, params, sorted(set(defaulted))
