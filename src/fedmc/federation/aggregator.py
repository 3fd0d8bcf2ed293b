"""The one owner of what crosses from the clients to the server.

Every upload of every driver passes through an :class:`Aggregator`, on both sides:

* client side, on each client's own upload: :meth:`Aggregator.prepare` (user-level DP: the
  whole upload clipped to the phase's bound), :meth:`Aggregator.local_noise` (the algorithm's
  own local DP noise, drawn by a client that adds it itself) and :meth:`Aggregator.dp_share`
  (a client's share of the user-level DP noise, under secure aggregation);
* server side: :meth:`Aggregator.sum` (the cohort sum of what arrived, the one place a plain
  sum is formed) and :meth:`Aggregator.release` (what the server step is handed: the sum with
  every noise its clients did not add themselves).

So what the server learns in each mode is read off this module and its accountant
(:mod:`fedmc.privacy.accounting`); ``docs/privacy.md`` has the argument:

================  ===============================  =====================================
mode              clients send                     the server step is handed
================  ===============================  =====================================
plain             their uploads                    the cohort sum
local noise       uploads + their own noise        the sum of the noised uploads
user DP, central  clipped uploads                  the sum + Gaussian noise (z C)
user DP, secure   clipped uploads + noise shares   the secure sum (+ shares of lost members)
================  ===============================  =====================================

Where the noise is drawn is the population's :class:`fedmc.federation.population.Placement`:
a simulation draws the cohort's noise on the sum from the server's stream (the same
distribution as the clients' draws, in a fixed order, so every driver gives the same history),
a real federation has its clients draw their own. The mechanisms themselves (clipping, the
Gaussian draws, the local mechanisms' distributions) live in :mod:`fedmc.privacy`; this module
is their only caller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from fedmc.core.protocol import Algorithm, FederationInfo, Message
from fedmc.core.uploads import Stacked, Summed, Uploads, sum_uploads
from fedmc.federation.population import SIMULATED, Exchange, Placement
from fedmc.privacy.accounting import Plan, Spent, UserDP
from fedmc.privacy.gaussian import add_noise, clip_uploads, noise_share

Batch = tuple[Uploads, np.ndarray]  # the uploads of a batch and each client's multiplicity
NEIGHBOURS = ("one unit's data present or absent (zero-out: its client stays enrolled); the "
              "enrolled clients, the item catalogue and the rating scale are public")
"""The neighbouring relation the guarantee is stated for."""
PUBLIC_COLUMNS = ("round", "clients", "bytes_down", "epsilon", "epsilon_server", "dp_noise")
"""The history columns of a private run: the round, the cohort's size and the bytes sent down
(functions of the secret sampling and the public sizes alone: every enrolled client is
sampled alike whatever its data), and the budget spent (against outsiders and the server).
Metrics (client sums), the bytes sent up (how many items a cohort rated) and the seconds (how
long the clients' data took) are not published."""


class Aggregator:
    """What a run's clients send and what its server step is handed (module docstring).

    Parameters
    ----------
    algorithm, cfg, info
        The run's algorithm, its settings and the federation's facts.
    dp
        User-level DP, or None.
    plan
        The exchanges the run releases (server side, with ``dp``): the noise multiplier is
        calibrated to it and the budget accounted over it. A client needs none.
    placement
        Who draws which noise (the population's).
    max_norm
        A bound on the L2 norm of a client's whole upload that its clients clip to as they
        clip to user-level DP's (a federation operator's ``max-upload-norm``; inf: none).
    """

    def __init__(self, algorithm: Algorithm, cfg: Any, info: FederationInfo, *,
                 dp: UserDP | None = None, plan: Plan | None = None,
                 placement: Placement = SIMULATED, max_norm: float = np.inf) -> None:
        self.shapes: Mapping[str, tuple[int, ...]] = algorithm.upload_shapes(cfg, info)
        self.local = algorithm.local_noise(cfg, info)
        self.dp = dp
        self.max_norm = max_norm
        self.placement = placement
        self.plan = plan
        self.noise: float | None = None
        self.spent: Spent | None = None
        self.spent_server: Spent | None = None  # None: the server sees every upload
        if dp is not None and plan is not None:
            self.noise = dp.multiplier(plan)
            self.spent = Spent(plan, self.noise, dp.delta)
            known = plan.known_cohorts()
            if not placement.uploads_seen:  # every client in every round: the same account
                self.spent_server = (self.spent if known == plan else
                                     Spent(known, self.noise, dp.delta))

    # --- the client side: what one client does to its own upload -------------------------

    def prepare(self, msg: Message, uploads: Uploads) -> Uploads:
        """A batch of clients' uploads as they leave the clients: each client's whole upload
        (all its arrays together) scaled to L2 norm at most :meth:`clip` of the exchange."""
        clip = self.clip(msg)
        if not np.isfinite(clip) or not uploads:
            return uploads
        return clip_uploads(uploads, clip)

    def clip(self, msg: Message) -> float:
        """The bound on the norm of a client's upload in ``msg``'s exchange: the smaller of
        user-level DP's bound of its phase (:meth:`fedmc.privacy.accounting.UserDP.clip_of`)
        and :attr:`max_norm` (inf: none)."""
        return min(self.max_norm, np.inf if self.dp is None else self.dp.clip_of(msg.phase))

    def local_noise(self, uploads: Uploads, rng: np.random.Generator) -> Uploads:
        """One client's uploads with the algorithm's local noise added by the client itself
        (a real federation's clients: :class:`Placement` ``local_noise="clients"``)."""
        if not self.local:
            return uploads
        ones = np.ones(1)
        out = {}
        for name, stacked in uploads.items():
            total = stacked.weighted_sum(ones)
            if name in self.local:
                total = self.local[name].perturb_sum(total, 1, rng)
            out[name] = Stacked(stacked.shape, dense=total[None])
        return out

    def dp_share(self, std: float, members: int, rng: np.random.Generator,
                 ) -> dict[str, np.ndarray]:
        """One member's share of the user-level DP noise ``std`` on a secure sum of
        ``members`` clients (distributed DP): variance ``std^2 / members`` on every entry."""
        return noise_share(self.shapes, std, members, rng)

    # --- the server side ------------------------------------------------------------------

    def std(self, msg: Message) -> float:
        """The standard deviation of the user-level DP noise on the sums of ``msg``'s
        exchange (``noise * clip``); none on a set-up exchange that nobody uploads in."""
        dp, plan, noise = self.dp, self.plan, self.noise
        if dp is None or plan is None or noise is None:  # noise: set when dp and plan are
            return 0.0
        if msg.phase != "setup":
            return noise * dp.clip
        if not plan.setup:
            return 0.0
        return noise * dp.clip_of("setup") * dp.setup_scale

    def sum(self, batches: Iterable[Batch]) -> Summed:
        """The cohort sum of the uploads of every batch, each client weighted by its
        multiplicity (:func:`fedmc.core.uploads.sum_uploads`)."""
        return sum_uploads(batches, self.shapes)

    def release(self, exchange: Exchange, msg: Message,
                rng: np.random.Generator) -> Summed:
        """What the server step of ``msg``'s exchange is handed: the sum that arrived plus,
        in this order, the local noise its clients did not add themselves (simulated on the
        sum) and the user-level DP noise they did not add (all of it, or the shares of
        members lost under distributed DP)."""
        summed = exchange.summed
        if self.local and self.placement.local_noise == "server":
            arrays = dict(summed.arrays)
            for name, mechanism in self.local.items():
                arrays[name] = mechanism.perturb_sum(arrays[name], summed.count, rng)
            summed = summed.with_arrays(arrays)
        std = self.std(msg)
        added = exchange.dp_share if self.placement.user_dp == "clients" else 0.0
        if std > 0 and added < 1.0:
            summed = add_noise(summed, std * np.sqrt(1.0 - added), rng)
        return summed

    # --- what the run publishes -----------------------------------------------------------

    @property
    def private(self) -> bool:
        """Whether the run carries a DP guarantee (user-level DP with secret noise): then the
        server takes no evaluation of the clients (their error sums are exact releases the
        budget does not cover) and the history holds only :data:`PUBLIC_COLUMNS`."""
        return self.dp is not None and self.dp.private

    def columns(self, rounds: int) -> dict[str, float]:
        """The history's privacy columns after ``rounds`` rounds: ``epsilon`` spent at the
        run's delta against outsiders, ``epsilon_server`` against the server (where it sees
        only sums) and the noise multiplier ``dp_noise`` (none without user-level DP)."""
        if self.spent is None or self.noise is None:  # set together
            return {}
        server = {} if self.spent_server is None else {
            "epsilon_server": self.spent_server(rounds)}
        return {"epsilon": self.spent(rounds), **server, "dp_noise": self.noise}

    def guarantee(self) -> dict[str, Any]:
        """What the run's DP guarantees, against whom (the threat model's numbers,
        ``docs/privacy.md``): ``epsilon`` at ``delta`` per party over the planned run, for
        neighbouring data sets that differ in one ``unit``'s data (:data:`NEIGHBOURS`).

        Outsiders (who read the run's folder and the published model) and clients (who
        receive every round's message) get the accounted budget, amplified by the secret
        Poisson sampling. The server samples the cohorts, so against it there is no
        amplification: where it is handed only noised sums (secure aggregation, whose clients
        add the noise in shares, and the simulation, which models it) the budget of a user in
        every round (:meth:`fedmc.privacy.accounting.Plan.known_cohorts`); where it sees each
        clipped upload (central noise in a plain federation) none (``None``).
        ``calibrated_against``: the party a budget (``dp.epsilon``) promises its epsilon to,
        which the noise was calibrated for (:attr:`fedmc.privacy.accounting.UserDP.against`;
        None: the noise was given)."""
        if self.dp is None:
            return {"private": False, "dp": None}
        plan, spent = self.plan, self.spent
        if plan is None or spent is None:
            raise ValueError("a guarantee needs the run's plan: only the server side has one")
        outsiders = spent(plan.rounds)
        server = None if self.spent_server is None else self.spent_server(plan.rounds)
        return {
            "private": self.dp.private,
            "unit": self.dp.unit,
            "neighbouring": NEIGHBOURS,
            "delta": self.dp.delta,
            "epsilon": {"outsiders": outsiders, "clients": outsiders, "server": server},
            "calibrated_against": None if self.dp.epsilon is None else self.dp.against,
            "noise_seed": "secret" if self.dp.private else "the run's seed (not private)",
        }

    def published(self, row: Mapping[str, float]) -> dict[str, float]:
        """What of a history row the run publishes: all of it, or, in a private run, the
        columns that depend on no client's data (:data:`PUBLIC_COLUMNS`)."""
        if not self.private:
            return dict(row)
        return {k: v for k, v in row.items() if k in PUBLIC_COLUMNS}
