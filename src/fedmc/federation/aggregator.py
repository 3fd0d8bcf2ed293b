"""The one owner of what crosses from the clients to the server.

Every upload of every driver passes through an :class:`Aggregator`, on both sides:

* client side, on each client's own upload: :meth:`Aggregator.prepare` (user-level DP: the
  whole upload clipped to the phase's bound), :meth:`Aggregator.local_noise` (the algorithm's
  own local DP noise, drawn by a client that adds it itself) and
  :meth:`Aggregator.member_integers` (under secure aggregation, a member's upload as the
  integers it adds to the secure sum, with its share of the user-level DP noise);
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
user DP, secure   integers + Skellam noise shares  the secure sum (+ shares of lost members)
================  ===============================  =====================================

User-level DP's noise is Gaussian on the sum, or the Skellam mechanism
(:mod:`fedmc.privacy.skellam`): every member rounds its scaled upload to integers and adds an
integer share of the noise inside the secure sum, the mechanism a secure aggregation runs (its
default there, ``UserDP.mechanism``). A simulation of it forms each client's integers as the
client would and the same integer sum; its noise is drawn on the sum (one Skellam draw: the
distribution of the members' shares), or, in a reproducible run, as every member's share from
the stream a real federation's member draws it from (:func:`fedmc.privacy.skellam.
member_stream` with the run's secret, from its seed): then the released integers equal a
federation's.

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
from fedmc.core.uploads import Stacked, Summed, Uploads, secure_sum, sum_uploads
from fedmc.errors import ConfigError
from fedmc.federation.population import SIMULATED, Exchange, Placement
from fedmc.privacy.accounting import ORDERS, Plan, Spent, UserDP
from fedmc.privacy.gaussian import add_noise, clip_uploads
from fedmc.privacy.skellam import SkellamSum, member_stream

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
    rng
        The server's stream, from which a reproducible run under the Skellam mechanism takes
        the secret its members' noise streams are seeded with (module docstring).

    Raises
    ------
    ConfigError
        The Gaussian mechanism asked for where the members add the noise inside a secure sum.
    """

    def __init__(self, algorithm: Algorithm, cfg: Any, info: FederationInfo, *,
                 dp: UserDP | None = None, plan: Plan | None = None,
                 placement: Placement = SIMULATED, max_norm: float = np.inf,
                 rng: np.random.Generator | None = None) -> None:
        self.shapes: Mapping[str, tuple[int, ...]] = algorithm.upload_shapes(cfg, info)
        self.local = algorithm.local_noise(cfg, info)
        self.dp = dp
        self.max_norm = max_norm
        self.placement = placement
        self.plan = plan
        self.members = info.n_clients  # the most members a sum can have: public
        self.dim = sum(int(np.prod(shape)) for shape in self.shapes.values())
        self.noise: float | None = None
        self.spent: Spent | None = None
        self.spent_server: Spent | None = None  # None: the server sees every upload
        secure = placement.user_dp == "clients"
        if dp is not None and secure and dp.mechanism == "gaussian":
            raise ConfigError("`dp.mechanism=gaussian`: under secure aggregation the members add "
                              "the DP noise as integers inside the secure sum (skellam); a "
                              "Gaussian share is not what its proof covers")
        self.discrete = dp is not None and (dp.mechanism or
                                            ("skellam" if secure else "gaussian")) == "skellam"
        rdp = self._rdp if self.discrete else None
        self.secret = (int(rng.integers(2**63)) if self.discrete and rng is not None and
                       dp is not None and dp.reproducible else None)
        if dp is not None and plan is not None:
            self.noise = dp.multiplier(plan, rdp)
            self.spent = Spent(plan, self.noise, dp.delta, rdp)
            known = plan.known_cohorts()
            if not placement.uploads_seen:  # the same account where no sampling is credited
                self.spent_server = (self.spent if known == plan or rdp is not None else
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

    def integer_form(self, phase: str, noise: float) -> SkellamSum:
        """The Skellam mechanism of an exchange of ``phase`` at noise multiplier ``noise``:
        its scale and noise from public settings alone (the phase's clip, the upload's size,
        the enrolled clients), the same for every party."""
        if self.dp is None:
            raise ValueError("the integer form of a sum needs user-level DP")
        return SkellamSum.of(self.dp.clip_of(phase), noise, self.dim, self.members)

    def _rdp(self, phase: str, noise: float) -> np.ndarray:
        return self.integer_form(phase, noise).rdp(ORDERS)

    def member_integers(self, values: Mapping[str, np.ndarray], client: int, msg: Message,
                        settings: Mapping[str, Any], secret: int) -> dict[str, np.ndarray]:
        """What a member adds to a secure sum under the Skellam mechanism: its upload
        ``values`` (zeros if it uploads nothing) in integer units plus its share of the noise,
        drawn from its stream (``secret``: its own, or the run's in a reproducible run),
        modulo the field. ``settings``: the exchange's (:meth:`secure_settings`)."""
        code = self.integer_form(msg.phase, float(settings["dp_noise"]))
        shares = code.shares(self.shapes, int(settings["dp_members"]),
                             member_stream(secret, client, msg.round, msg.phase))
        return {name: code.wrap(code.integers(values[name]) + shares[name])
                for name in self.shapes}

    # --- the server side ------------------------------------------------------------------

    def multiplier(self, msg: Message) -> float:
        """The noise multiplier of ``msg``'s exchange (0: no user-level DP noise; none on a
        set-up exchange that nobody uploads in)."""
        dp, plan, noise = self.dp, self.plan, self.noise
        if dp is None or plan is None or noise is None:  # noise: set when dp and plan are
            return 0.0
        if msg.phase != "setup":
            return noise
        return noise * dp.setup_scale if plan.setup else 0.0

    def std(self, msg: Message) -> float:
        """The standard deviation of the Gaussian user-level DP noise on the sums of
        ``msg``'s exchange (``noise * clip``)."""
        z = self.multiplier(msg)
        return 0.0 if self.dp is None or z == 0 else z * self.dp.clip_of(msg.phase)

    def secure_settings(self, msg: Message) -> dict[str, Any]:
        """What the members of a secure sum of ``msg``'s exchange are told of the DP noise
        they add (none without it): the noise multiplier, the number of members and, in a
        reproducible run, the run's secret their streams are seeded with."""
        z = self.multiplier(msg)
        if z == 0:
            return {}
        settings: dict[str, Any] = {"dp_noise": z, "dp_members": len(msg.compute)}
        if self.secret is not None:
            settings["dp_secret"] = self.secret
        return settings

    def sum(self, batches: Iterable[Batch], msg: Message | None = None) -> Summed:
        """The cohort sum of the uploads of every batch, each client weighted by its
        multiplicity (:func:`fedmc.core.uploads.sum_uploads`); under the Skellam mechanism,
        of ``msg``'s exchange, the sum of every client's upload in integer units, as its
        members would add them (:meth:`release` adds the noise and decodes it)."""
        z = 0.0 if msg is None or not self.discrete else self.multiplier(msg)
        if z == 0 or msg is None:
            return sum_uploads(batches, self.shapes)
        code = self.integer_form(msg.phase, z)
        total = {name: np.zeros(shape) for name, shape in self.shapes.items()}
        count = 0
        for uploads, weights in batches:
            if np.any(weights != 1):  # user-level DP refuses sampling with replacement
                raise ValueError("an integer sum counts every member once")
            for name, stacked in uploads.items():
                total[name] += stacked.rounded_sum(code.scale)
            count += len(weights)
        return secure_sum(total, count)

    def release(self, exchange: Exchange, msg: Message,
                rng: np.random.Generator) -> Summed:
        """What the server step of ``msg``'s exchange is handed: the sum that arrived plus,
        in this order, the local noise its clients did not add themselves (simulated on the
        sum) and the user-level DP noise they did not add (all of it, or the shares of
        members lost under distributed DP)."""
        summed = exchange.summed
        z = self.multiplier(msg) if self.discrete else 0.0
        if z > 0:
            summed = self._decoded(exchange, msg, self.integer_form(msg.phase, z), rng)
        if self.local and self.placement.local_noise == "server":
            arrays = dict(summed.arrays)
            for name, mechanism in self.local.items():
                arrays[name] = mechanism.perturb_sum(arrays[name], summed.count, rng)
            summed = summed.with_arrays(arrays)
        std = 0.0 if self.discrete else self.std(msg)
        added = exchange.dp_share if self.placement.user_dp == "clients" else 0.0
        if std > 0 and added < 1.0:
            summed = add_noise(summed, std * np.sqrt(1.0 - added), rng)
        return summed

    def _decoded(self, exchange: Exchange, msg: Message, code: SkellamSum,
                 rng: np.random.Generator) -> Summed:
        """An integer sum (:meth:`sum`, or a secure sum's) with the Skellam noise its members
        did not add (all of it in a simulation, the shares of lost members in a federation),
        decoded (:meth:`fedmc.privacy.skellam.SkellamSum.decode`)."""
        summed = exchange.summed
        if self.placement.user_dp == "clients":
            missing = 1.0 - exchange.dp_share
            noise = {name: code.noise(shape, missing, rng) if missing > 0 else 0.0
                     for name, shape in self.shapes.items()}
        elif self.secret is not None:  # reproducible: every member's share from its stream
            noise = {name: np.zeros(shape) for name, shape in self.shapes.items()}
            for client in msg.compute.tolist():
                stream = member_stream(self.secret, client, msg.round, msg.phase)
                for name, share in code.shares(self.shapes, len(msg.compute), stream).items():
                    noise[name] += share
        else:
            noise = {name: code.noise(shape, 1.0, rng) for name, shape in self.shapes.items()}
        return summed.with_arrays({name: code.decode(summed[name] + noise[name])
                                   for name in self.shapes})

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
        None: the noise was given); ``mechanism``: the noise's (Gaussian, or Skellam: no
        credit for sampling, the same epsilon for every party)."""
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
            "mechanism": "skellam" if self.discrete else "gaussian",
            "noise_seed": "secret" if self.dp.private else "the run's seed (not private)",
        }

    def published(self, row: Mapping[str, float]) -> dict[str, float]:
        """What of a history row the run publishes: all of it, or, in a private run, the
        columns that depend on no client's data (:data:`PUBLIC_COLUMNS`)."""
        if not self.private:
            return dict(row)
        return {k: v for k, v in row.items() if k in PUBLIC_COLUMNS}
