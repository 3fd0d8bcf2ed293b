"""The curious server's audit of one algorithm on one data set (``fedmc audit``).

:func:`run_audit` runs the algorithm once per server view with its boundary recorded
(:func:`fedmc.audit.boundary.record_boundary`), takes what the server holds in that view
(:func:`fedmc.audit.attacks.observations`) and scores two attacks against the truth:

* the rated-item-set attack (:func:`fedmc.audit.attacks.rated_sets`), from each client's first
  observation and from the intersection over every round it took part in;
* rating reconstruction of one-user clients, by the decoder of the algorithm's client step
  (:class:`Target`), scored as RMSE and like/dislike accuracy against predicting the mean;
  in the ``secagg`` view also from the cohort's sum split into its members
  (:meth:`Target.split`, ``split ratings``), and the rated-item-set attack of the split
  groups linked across cohorts, which names clients (``linked``,
  :func:`fedmc.audit.attacks.link_groups`).

Views: ``plain`` (each client's upload; ``active`` clients per round, uniform), ``secagg``
(the cohort's sum; same sampling) and ``dp`` (the sum of clipped uploads plus the Gaussian
noise of user-level DP, Poisson sampling at rate ``active / p``; ``docs/privacy.md``). On a sum
the decoders treat the cohort's mean upload as one client's, the best a server without the
individual uploads can do with the same closed form.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import stats

from fedmc.algorithms.fedals.client import STATS
from fedmc.algorithms.fedals.config import FedALSConfig
from fedmc.algorithms.fedmc_admm.config import FedMCADMMConfig
from fedmc.algorithms.fedmc_admm.rated.client import COUNT
from fedmc.algorithms.registry import SPECS, load
from fedmc.algorithms.rfrec.client import shared_uploads
from fedmc.algorithms.rfrec.config import RFRecConfig, RFRecFConfig
from fedmc.audit.attacks import (
    Group,
    Observation,
    decode_fedmavg,
    decode_rank_one,
    decode_statistics,
    equal_groups,
    first_gradients,
    guessed_rated,
    link_groups,
    observations,
    outer_factor,
    parallel_groups,
    rated_sets,
    rating_scores,
    reference_factor,
    set_scores,
)
from fedmc.audit.boundary import BoundaryRecord, record_boundary
from fedmc.data.federated import FederatedData
from fedmc.errors import ConfigError
from fedmc.federation.loop import RoundCallback, Rounds
from fedmc.federation.sampling import make_sampler
from fedmc.privacy.accounting import UserDP

VIEWS = ("plain", "secagg", "dp")
ALGORITHMS = tuple(name for name, entry in SPECS.items() if entry.audit is not None)
"""The algorithms with an audit target (their registry entries name it)."""
LIKE = 4.0  # a rating of 4 stars or more is a like
RECONSTRUCTIONS = ("ratings", "split ratings", "split ratings, rounds")  # they decode ratings
RANK_ONE = 1e-8  # a packed part whose second eigenvalue is below this share of the first


@dataclass(frozen=True)
class AuditSettings:
    """What :func:`run_audit` runs: ``algorithm`` with ``params`` for ``rounds`` rounds of
    ``active`` clients (all when None), in each of ``views``, with user-level DP ``dp`` in the
    ``dp`` view, from ``seed`` (the audit's DP noise comes from the seed too, ``reproducible``:
    its runs are experiments on the mechanism, repeatable seed by seed, not private runs)."""

    algorithm: str = "fedmc-admm"
    params: Mapping[str, Any] = field(default_factory=dict)
    rounds: int = 20
    active: int | None = 10
    views: Sequence[str] = VIEWS
    dp: UserDP = UserDP(clip=0.3, epsilon=8.0, delta=1e-6, reproducible=True)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ConfigError(f"the audit knows {', '.join(ALGORITHMS)}, not "
                              f"{self.algorithm!r}")
        unknown = set(self.views) - set(VIEWS)
        if unknown or not self.views:
            raise ConfigError(f"--view takes {', '.join(VIEWS)} or all, got "
                              f"{', '.join(sorted(unknown)) or 'nothing'}")
        if self.rounds < 1:
            raise ConfigError(f"--rounds must be >= 1, got {self.rounds}")

    def config(self) -> Any:
        """The algorithm's validated ``Config`` from ``params``."""
        return SPECS[self.algorithm].Config(**self.params)


class Target:
    """What the attacks need to know of one algorithm's uploads: the upload's name, the
    exchanges read, the reference (what an observation holds on items nobody in it rated,
    :func:`fedmc.audit.attacks.guessed_rated`) and the decoder of one user's ratings.

    ``records`` are the run's exchanges, ``grid`` the rating values on the normalized scale.
    ``sets``: the uploads the rated-item-set attack reads, side by side (the decoded upload
    alone unless a target says otherwise).
    """

    upload: str

    def __init__(self, cfg: Any, data: FederatedData, records: list[BoundaryRecord],
                 grid: np.ndarray) -> None:
        self.cfg, self.data, self.grid = cfg, data, grid
        self.sets: tuple[str, ...] = (self.upload,)
        self.records = records
        self.sent = {r.message.round: r.message.arrays.get("V") for r in records}

    def reference(self, o: Observation) -> np.ndarray | None:
        """What ``o`` holds on the items nobody in it rated, up to a factor."""
        return None

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The rows ``rows`` of ``array`` (the sum of ``members`` uploads of ``o``: one user's,
        a cohort's mean with 1, or the cohort's sum) as the client step's closed form makes
        them for one user: parallel to its ``u`` (:func:`fedmc.audit.attacks.decode_rank_one`);
        None where ``o`` has no such form."""
        return None

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """One user's ratings (normalized) of the items ``rows`` from its rank-one rows
        ``y``."""
        raise NotImplementedError

    def decode(self, o: Observation, noise_std: float,
               ) -> tuple[np.ndarray, np.ndarray] | None:
        """Items and their decoded ratings (normalized) from ``o``'s mean upload as one
        user's, or None."""
        array, rows = self._one(o, noise_std)
        y = self.rank_one(o, array, rows, 1) if len(rows) else None
        return None if y is None else (rows, self.decode_rows(o, rows, y))

    def split(self, o: Observation) -> list[Group]:
        """A cohort's sum split into its members (:func:`fedmc.audit.attacks.
        parallel_groups`): on an item only one member rated, the sum's row is that member's,
        parallel to its ``u``; each group of parallel rows decoded as one user's (empty where
        the target has no rank-one form for ``o``)."""
        rows = guessed_rated(o.array, self.reference(o))
        y = self.rank_one(o, o.array, rows, len(o.clients)) if len(rows) else None
        return [] if y is None else [Group(o.clients, rows[g], self.decode_rows(o, rows[g], y[g]))
                                     for g in parallel_groups(y)]

    def _one(self, o: Observation, noise_std: float) -> tuple[np.ndarray, np.ndarray]:
        """The mean upload of ``o``'s clients (one client's in plain view) and the rows
        guessed rated in it."""
        array = o.array / len(o.clients)
        return array, guessed_rated(array, self.reference(o), noise_std / len(o.clients))


class ADMMTarget(Target):
    """FedMC-ADMM: the change of ``beta W_i + Y_i`` (``delta``).

    Consensus on rated items: rows on rated items only (reference zero); one user's set-up
    upload ``beta V^0_j + Y_j^0`` with the paper's duals, or its first visit's
    ``2 (m_j - u . v_j) u / (1 + |u|^2 / beta) + beta (V^k_j - V^0_j)`` with zero duals
    (:meth:`decode`). The paper's consensus (``all``): the set-up upload is ``Y_i^0`` (zero off
    the rated items); a visit in round ``k`` changes an unrated row (per-row steps: ``W_j``
    becomes ``V^k_j``, ``Y_j`` stays zero) by ``beta (V^k_j - V^l_j)``, ``l`` the client's
    previous visit (the set-up: ``l = 0``), which the server knows: it sampled the cohorts.
    """

    upload = "delta"

    def __init__(self, cfg: FedMCADMMConfig, data: FederatedData,
                 records: list[BoundaryRecord], grid: np.ndarray) -> None:
        super().__init__(cfg, data, records, grid)
        self.rated = cfg.consensus == "rated"
        if self.rated:  # the set-up's counts are rows on the rated items too (with zero
            self.sets = (self.upload, COUNT)  # duals, the set-up uploads nothing else)
        self.counts = {r.message.round: r.summed[COUNT] for r in records
                       if r.message.phase == "setup" and self.rated}
        self.previous = previous_visits(records)

    def reference(self, o: Observation) -> np.ndarray | None:
        """Zero, but for the rounds of the paper's consensus (class docstring)."""
        if self.rated or o.round == 0:
            return None
        V = self.sent[o.round]
        return sum(self.cfg.beta * (V - self.sent[self.previous[o.round, c]])
                   for c in o.clients.tolist())

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The set-up dual (paper duals) less ``beta V^0_j`` per rater (consensus on rated
        items), or a first visit (zero duals, consensus on rated items) less
        ``beta (V^k_j - V^0_j)`` (of a cohort's sum: the rows of its first-visit members)."""
        cfg, V0 = self.cfg, self.sent[0]
        if o.round == 0 and cfg.dual_init == "paper":
            if not self.rated:
                return array[rows]
            # the set-up upload adds beta V^0_j once per rater (of a cohort's mean: per rater
            # over the cohort's size)
            count = (1.0 if len(o.clients) == 1 else
                     self.counts[0][rows] * members / len(o.clients))
            return array[rows] - cfg.beta * count * V0[rows]
        first = [self.previous[o.round, c] == 0 for c in o.clients.tolist()]
        # one user's upload, or a cohort's mean, needs every member on its first visit; a
        # split sum, one (its exclusive rows are its own, the others' rows join no group)
        if (self.rated and cfg.dual_init == "zeros" and o.round > 0
                and (all(first) if members == 1 else any(first))):
            return array[rows] - cfg.beta * (self.sent[o.round][rows] - V0[rows])
        return None

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:func:`fedmc.audit.attacks.decode_rank_one` of the set-up dual, or of the first
        visit's exact W-step (the user's bias, in the column of ``V`` the round uploads leave
        out, found too)."""
        cfg = self.cfg
        if o.round == 0:
            return decode_rank_one(y, self.sent[0][rows], 1.0 / self.data.n_items, self.grid)
        hidden = cfg.layout.ones_col_v
        return decode_rank_one(y, self.sent[o.round][rows], 2.0, self.grid, 1.0 / cfg.beta,
                               hidden=hidden if hidden >= 0 else None)


def previous_visits(records: Sequence[BoundaryRecord]) -> dict[tuple[int, int], int]:
    """``(round, client) -> `` the round of the client's previous upload (0: the set-up, or
    none before), for every upload of the run (the server sampled them: it knows)."""
    previous: dict[tuple[int, int], int] = {}
    last: dict[int, int] = {}
    for r in records:
        for c in np.unique(r.message.upload).tolist():
            previous[r.message.round, c] = last.get(c, 0)
            last[c] = r.message.round
    return previous


class FedALSTarget(Target):
    """Federated ALS (``docs/fedals.md``): on each rated item ``j`` a row
    ``[svec(S_j) | b_j]`` of the item step's statistics, nothing elsewhere (reference zero).
    One user's rows are built from its ``x = U[t, free]`` alone: ``svec(x x^T)`` (the same
    on every item) and ``(m_j - h) x``; decoder :func:`fedmc.audit.attacks.decode_statistics`.

    Running sums (the default) upload changes: the set-up's rows (with biases) are those of
    ``x_0 = e``, ``[svec(e e^T) | m_j e]``, the ratings themselves; a first visit's are its
    rows less those, decoded exactly; later visits less the previous visit's rows (the
    server could chain them; not decoded here). Fresh sums upload the rows themselves every
    visit: ``m_j - h`` exactly, and ``h`` from the user step's closed form (every rated item
    in the upload), or the grid (a split sum's exclusive items, ``max_items``'s subset). On
    a cohort's sum the rows of a member's exclusive items share their packed part: grouped by
    it, each group decodes as one user's (:meth:`split`).
    """

    upload = STATS

    def __init__(self, cfg: FedALSConfig, data: FederatedData, records: list[BoundaryRecord],
                 grid: np.ndarray) -> None:
        if cfg.implicit:
            raise ConfigError("the audit reads federated ALS on ratings (with implicit "
                              "feedback, too, its rows are exactly the items interacted with)")
        super().__init__(cfg, data, records, grid)
        d = len(cfg.free_v)
        self.packed = d * (d + 1) // 2
        self.carrier = d - 1 if cfg.layout.biases else None
        self.previous = previous_visits(records)

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The rows themselves, where they are one user's statistics less what the decoder
        knows: the set-up, a first visit (one user's upload, or a cohort's mean: every member
        on its first visit; a split sum: any), any visit with fresh sums; None otherwise."""
        if o.round == 0 or self.cfg.sums == "fresh":
            return array[rows]
        first = [self.previous[o.round, c] == 0 for c in o.clients.tolist()]
        return array[rows] if (all(first) if members == 1 else any(first)) else None

    def removed(self, o: Observation) -> np.ndarray | None:
        """What ``o``'s packed parts lack of ``x x^T``: the set-up rows' ``e e^T`` in a first
        visit with running sums and biases; None otherwise."""
        if o.round == 0 or self.cfg.sums == "fresh" or self.carrier is None:
            return None
        removed = np.zeros((len(self.cfg.free_v),) * 2)
        removed[self.carrier, self.carrier] = 1.0
        return removed

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:func:`fedmc.audit.attacks.decode_statistics` of the rows (class docstring)."""
        cfg, carrier = self.cfg, self.carrier
        if o.round == 0:  # the set-up: x_0 = e, h = 0
            return decode_statistics(y, self.grid, carrier, scale=cfg.gram_scale,
                                     shift=lambda x, d: 0.0)
        if cfg.sums == "running":
            return decode_statistics(y, self.grid, carrier, self.removed(o), cfg.gram_scale)
        shift = None
        if carrier is not None and cfg.max_items is None and len(o.clients) == 1:
            V = self.sent[o.round][rows]
            free = cfg.free_v

            def shift(x: np.ndarray, d: np.ndarray) -> float:
                """The user step's equation of the bias ``h``: ``lam h = sum_j (d_j - x .
                V[j, free])``, with ``x``'s carrier meeting the item bias."""
                return float(np.sum(d - V[:, free] @ x) / cfg.lam)

        return decode_statistics(y, self.grid, carrier, scale=cfg.gram_scale, shift=shift)

    def split(self, o: Observation) -> list[Group]:
        """The rows grouped by their packed part (equal on the items that one set of members
        rated, and only on those), each group of 3 rows or more whose packed part is one
        user's ``x x^T`` (rank one, :func:`fedmc.audit.attacks.outer_factor`: a member's
        exclusive items) decoded as that user's."""
        rows = guessed_rated(o.array)
        y = self.rank_one(o, o.array, rows, len(o.clients)) if len(rows) else None
        if y is None:
            return []
        groups = [g for g in equal_groups(y[:, : self.packed]) if self.one_user(o, y[g])]
        return [Group(o.clients, rows[g], self.decode_rows(o, rows[g], y[g])) for g in groups]

    def one_user(self, o: Observation, rows: np.ndarray) -> bool:
        """Whether rows that share their packed part are one user's: it (plus what
        :meth:`removed` says is missing) is rank one and, where the rows are a whole ``x x^T``
        with the carrier (the set-up, fresh sums with biases), its carrier entry is 1, not
        the number of raters (set-up rows are all ``e e^T``: rank one for any count)."""
        removed = self.removed(o)
        x, ratio = outer_factor(rows, removed, self.cfg.gram_scale)
        if ratio >= RANK_ONE:
            return False
        return removed is not None or self.carrier is None or abs(
            x[self.carrier] ** 2 - 1.0) < 1e-6


class FedMAvgTarget(Target):
    """FedMAvg: ``W_i``, ``Q2`` gradient steps from the broadcast ``V^k`` (reference ``V^k``,
    decoder :func:`fedmc.audit.attacks.decode_fedmavg`, every round)."""

    upload = "W"

    def reference(self, o: Observation) -> np.ndarray | None:
        """The round's broadcast ``V^k`` (an unrated row is ``(1 - g_i)^Q2 V^k_j``)."""
        return self.sent[o.round]

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The rows less the multiple of ``V^k`` that the unrated rows share (of a cohort's
        sum: the members' total factor, which leaves a member's exclusive rows its own)."""
        V = self.sent[o.round]
        return array[rows] - reference_factor(array, V) * V[rows]

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:func:`fedmc.audit.attacks.decode_fedmavg` of a member's rows split from a sum
        (its own factor unknown, searched)."""
        return decode_fedmavg(y, self.sent[o.round][rows], None, self._steps(o), self.cfg,
                              self.data.n_clients, self.grid)[0]

    def _steps(self, o: Observation) -> int:
        """``Q2`` of ``o``'s round."""
        return int(next(r for r in self.records if r.message.round == o.round)
                   .message.flags["q2"])

    def decode(self, o: Observation, noise_std: float,
               ) -> tuple[np.ndarray, np.ndarray] | None:
        """:func:`fedmc.audit.attacks.decode_fedmavg` on the mean upload (its factor known:
        the multiple of ``V^k`` its unrated rows share)."""
        array, rows = self._one(o, noise_std)
        if not len(rows):
            return None
        V = self.sent[o.round]
        factor = reference_factor(array, V)
        out = decode_fedmavg(array[rows] - factor * V[rows], V[rows], factor, self._steps(o),
                             self.cfg, self.data.n_clients, self.grid)
        return None if out is None else (rows, out[0])


class RFRecTarget(Target):
    """RFRec (Algorithm 1): ``Clip(V_(i))``; reference the shared columns every client uploads
    on the items it did not rate (:func:`fedmc.algorithms.rfrec.client.shared_uploads`), which
    the server computes from the ``V̄`` it sent; decoder: the first round's step
    (:func:`fedmc.audit.attacks.first_gradients`, then
    :func:`fedmc.audit.attacks.decode_rank_one`)."""

    upload = "V"

    def __init__(self, cfg: RFRecConfig, data: FederatedData, records: list[BoundaryRecord],
                 grid: np.ndarray) -> None:
        if isinstance(cfg, RFRecFConfig):
            raise ConfigError("the audit reads RFRec (Algorithm 1), not RFRecF")
        super().__init__(cfg, data, records, grid)
        rounds = sorted(k for k in self.sent if k > 0)
        self.shared = dict(zip(rounds, shared_uploads(cfg, [self.sent[k] for k in rounds]),
                               strict=True))

    def reference(self, o: Observation) -> np.ndarray | None:
        """``Clip(Z)`` of the round."""
        return self.shared[o.round]

    def rank_one(self, o: Observation, array: np.ndarray, rows: np.ndarray, members: int,
                 ) -> np.ndarray | None:
        """The first round's step from ``V_(i) = V̄^0``: its gradients
        (:func:`fedmc.audit.attacks.first_gradients`), off the shared columns. Of a sum under
        Adam, a row with an entry of at least ``alpha`` (no single first step reaches it) is
        several members' and is zeroed (their gradients do not follow from it)."""
        if o.round != 1:
            return None
        ref = self.shared[1]
        y = array[rows] - reference_factor(array, ref) * ref[rows]
        adam = self.cfg.optimizer == "adam"
        G = first_gradients(y, self.cfg.alpha, adam)
        if adam and members > 1:
            G[(np.abs(y) >= self.cfg.alpha).any(axis=1)] = 0.0
        return G

    def decode_rows(self, o: Observation, rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        """:func:`fedmc.audit.attacks.decode_rank_one` of the first gradients."""
        return decode_rank_one(y, self.sent[1][rows], 2.0, self.grid)


def rated_items(data: FederatedData) -> dict[int, np.ndarray]:
    """Every client's training items."""
    tr, ptr = data.train, data.client_ptr
    return {c: np.unique(tr.indices[tr.indptr[ptr[c]]:tr.indptr[ptr[c + 1]]])
            for c in range(data.n_clients)}


def reconstruction(target: Target, obs: Sequence[Observation],
                   decode: Callable[[Observation], tuple[np.ndarray, np.ndarray] | None],
                   ) -> dict[str, float]:
    """Decode every observation ``decode`` can (items and ratings); score each client once
    (its first decoded observation), on its training ratings of the items decoded for it
    (of a cohort's observation: every member's), on the original scale, against predicting
    the mean training rating."""
    data = target.data
    tr, ptr, norm = data.train, data.client_ptr, data.normalizer
    predicted, true, done = [], [], set()
    for o in obs:
        fresh = [c for c in o.clients.tolist() if c not in done]
        if not fresh:
            continue
        decoded = decode(o)
        if decoded is None:
            continue
        lookup = dict(zip(*(x.tolist() for x in decoded), strict=True))
        for c in fresh:
            done.add(c)
            for q in range(tr.indptr[ptr[c]], tr.indptr[ptr[c + 1]]):
                if tr.indices[q] in lookup:
                    predicted.append(lookup[tr.indices[q]])
                    true.append(tr.values[q])
    mean = float(norm.inverse(tr.values).mean())
    if not true:
        return {"rmse": np.nan, "accuracy": np.nan, "rmse_mean": np.nan,
                "accuracy_mean": np.nan, "accuracy_constant": np.nan, "ratings": 0, "clients": 0}
    scores = rating_scores(norm.inverse(np.array(predicted)), norm.inverse(np.array(true)),
                           mean, LIKE)
    return {**scores, "ratings": len(true), "clients": len(done)}


def run_audit(data: FederatedData, settings: AuditSettings,
              progress: Callable[[str], RoundCallback | None] | None = None,
              ) -> list[dict[str, Any]]:
    """The audit's rows (module docstring): per view, the rated-set attack from the first
    observation (``first``), intersected over rounds (``intersect``) and, when there is a
    set-up upload, from the first round's observation (``first-round``), and the
    reconstruction (``ratings``); in the ``secagg`` view also ``split ratings`` (with a
    set-up sum, which covers every client first, also from the rounds alone: ``split
    ratings, rounds``) and ``linked``;
    each row names the algorithm, the view, and in the ``dp`` view the noise multiplier and
    the epsilon spent."""
    entry = SPECS[settings.algorithm]
    cfg = settings.config()
    algorithm = entry.algorithm_for(cfg)
    items = rated_items(data)
    norm, tr = data.normalizer, data.train
    grid = norm.transform(np.unique(norm.inverse(tr.values)))
    out: list[dict[str, Any]] = []
    for view in settings.views:
        callback = None if progress is None else progress(view)
        dp = settings.dp if view == "dp" else None
        kind = "bernoulli" if dp is not None else "uniform"
        records, sim = record_boundary(
            algorithm, cfg, data, seed=settings.seed, callback=callback, rounds=Rounds(
                make_sampler(data.n_clients, settings.active, kind), settings.rounds, dp=dp))
        head: dict[str, Any] = {"algorithm": settings.algorithm, "view": view}
        std = 0.0
        if dp is not None:
            noise = float(sim.history.column("dp_noise")[-1])
            std = noise * dp.clip
            head.update(dp_noise=noise, epsilon=float(sim.history.column("epsilon")[-1]))
        target = load(entry.audit)(cfg, data, records, grid)
        mode = "plain" if view == "plain" else "sum"
        obs = list(observations(records, mode, target.upload))
        shown = obs if target.sets == (target.upload,) else list(
            observations(records, mode, target.sets))
        attacks = [("first", shown, False), ("intersect", shown, True)]
        if any(o.round == 0 for o in shown):  # a set-up upload: the rounds' on their own too
            attacks.append(("first-round", [o for o in shown if o.round > 0], False))
        for attack, seen, intersect in attacks:
            out.append({**head, "attack": attack, **_set_row(
                rated_sets(seen, target.reference, std, intersect), items, data.n_items)})
        out.append({**head, "attack": "ratings",
                    **reconstruction(target, obs, functools.partial(target.decode,
                                                                    noise_std=std))})
        if view == "secagg":
            splits = {id(o): target.split(o) for o in obs}
            split_of = functools.partial(_split_of, splits)
            out.append({**head, "attack": "split ratings",
                        **reconstruction(target, obs, split_of)})
            if any(o.round == 0 for o in obs):  # a set-up sum scores every client first
                out.append({**head, "attack": "split ratings, rounds", **reconstruction(
                    target, [o for o in obs if o.round > 0], split_of)})
            out.append({**head, "attack": "linked", **_set_row(
                link_groups([g for o in obs for g in splits[id(o)]]), items, data.n_items)})
    return out


def _set_row(guesses: dict[int, np.ndarray], truth: dict[int, np.ndarray],
             n_items: int) -> dict[str, Any]:
    """:func:`fedmc.audit.attacks.set_scores` with the lift (precision over base rate)."""
    scores = set_scores(guesses, truth, n_items)
    return {**scores, "ratio": scores["precision"] / scores["base_rate"]}


def _split_of(splits: Mapping[int, Sequence[Group]], o: Observation,
              ) -> tuple[np.ndarray, np.ndarray] | None:
    """The items and ratings of the groups split from ``o`` (``splits``, by the observation's
    ``id``), together; None for none."""
    groups = splits[id(o)]
    if not groups:
        return None
    return (np.concatenate([g.items for g in groups]),
            np.concatenate([g.ratings for g in groups]))


def pool_runs(runs: Sequence[Sequence[Mapping[str, Any]]], level: float = 0.95,
              ) -> list[dict[str, Any]]:
    """One row per (view, attack) over ``runs``, the rows of :func:`run_audit` for several
    seeds (``fedmc audit --repeat``): one run's precision rests on a few dozen cohorts' guesses,
    so under DP it varies from run to run by about a third of the base rate.

    Rated sets: precision over every guessed client of every run, recall and base rate over
    every scored client, ``ratio`` the pooled precision over the pooled base rate, and
    ``ratio_low``/``ratio_high`` its ``level`` interval from the spread of the runs' own ratios
    (Student's t over the runs with a guess; runs are independent, a run's clients are not).
    Ratings: every decoded rating of every run (RMSE and accuracies pooled by their counts)."""
    pooled: list[dict[str, Any]] = []
    keys = list(dict.fromkeys((r["view"], r["attack"]) for run in runs for r in run))
    for view, attack in keys:
        rows = [r for run in runs for r in run if (r["view"], r["attack"]) == (view, attack)]
        row = dict(rows[0])
        if attack in RECONSTRUCTIONS:
            for key in ("rmse", "rmse_mean"):
                row[key] = float(np.sqrt(_weighted(rows, key, "ratings", power=2)))
            for key in ("accuracy", "accuracy_mean", "accuracy_constant"):
                row[key] = _weighted(rows, key, "ratings")
            row.update(ratings=sum(r["ratings"] for r in rows),
                       clients=sum(r["clients"] for r in rows))
            pooled.append(row)
            continue
        row.update(precision=_weighted(rows, "precision", "guessed"),
                   recall=_weighted(rows, "recall", "clients"),
                   base_rate=_weighted(rows, "base_rate", "clients"),
                   guessed=sum(r["guessed"] for r in rows),
                   clients=sum(r["clients"] for r in rows))
        row["ratio"] = row["precision"] / row["base_rate"]
        ratios = np.array([r["ratio"] for r in rows if r["guessed"]])
        if len(ratios) > 1:
            half = (stats.t.ppf(0.5 + level / 2, len(ratios) - 1)
                    * ratios.std(ddof=1) / np.sqrt(len(ratios)))
            row.update(ratio_low=row["ratio"] - half, ratio_high=row["ratio"] + half)
        pooled.append(row)
    return pooled


def _weighted(rows: Sequence[Mapping[str, Any]], key: str, weight: str,
              power: int = 1) -> float:
    """The mean of ``rows[key] ** power`` weighted by ``rows[weight]`` (NaN when no row has
    weight: nothing scored)."""
    kept = [r for r in rows if r[weight]]
    if not kept:
        return np.nan
    w = np.array([r[weight] for r in kept], dtype=float)
    return float(w @ np.array([r[key] for r in kept]) ** power / w.sum())
