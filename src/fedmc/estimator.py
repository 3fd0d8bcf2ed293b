"""scikit-learn style estimators over the protocol's algorithms.

``__init__`` stores keyword parameters only (the algorithm's hyper-parameters and the run's:
rounds, sampling, ``random_state``); ``fit(data)`` validates them, runs the batched simulation
(:func:`fedmc.sim.loop.simulate`) and returns ``self``; learned attributes end in ``_``.
``get_params``/``set_params`` make estimators cloneable (``sklearn.base.clone`` works). The
signature of every estimator lists its parameters explicitly (built from the algorithm's
pydantic ``Config``), so ``help()`` and introspection show them.

A fitted factor model keeps factors and index maps, never ratings.
"""

from __future__ import annotations

import inspect
from typing import Any, ClassVar

import numpy as np

from fedmc.core.factors import FactorLayout
from fedmc.core.factors import predict as predict_factors
from fedmc.core.protocol import Algorithm, FederationInfo
from fedmc.core.ranking import ranking_metrics, ranking_sums
from fedmc.data.vocabulary import checked_indices
from fedmc.errors import ConfigError, DataError
from fedmc.privacy.accounting import UserDP, user_dp
from fedmc.sim.history import History
from fedmc.sim.loop import RoundCallback, Simulation, simulate
from fedmc.sim.sampling import make_sampler

RUN_PARAMS: dict[str, Any] = {
    "rounds": 100,
    "active": None,
    "sampling": "uniform",
    "participation": None,
    "dropout": 0.0,
    "eval_every": 1,
    "random_state": 0,
    "user_dp_epsilon": None,
    "user_dp_delta": 1e-6,
    "user_dp_noise": None,
    "user_dp_clip": None,
    "user_dp_setup_scale": 1.0,
    "user_dp_setup_clip": None,
}
"""Run parameters every estimator takes besides its algorithm's: rounds, clients per round
(None: all), ``uniform|bernoulli|replacement`` sampling, Bernoulli participation, dropout
share, evaluation period, the seed, and user-level DP (``user_dp_epsilon`` or
``user_dp_noise``, with ``user_dp_clip``, ``user_dp_delta``, ``user_dp_setup_scale`` and
``user_dp_setup_clip``:
:class:`fedmc.privacy.accounting.UserDP`; ``user_`` keeps them apart from Felb's own local DP
parameters)."""


class Estimator:
    """Keyword parameters stored as attributes, ``get_params``/``set_params``, a ``repr`` of
    the changed ones and an explicit ``__init__`` signature; a subclass sets ``Config`` (its
    hyper-parameters) and ``run_params`` (the run's)."""

    name: ClassVar[str]  # the ``--algorithm`` value
    Config: ClassVar[type]
    run_params: ClassVar[dict[str, Any]] = {}
    data_kind: ClassVar[str] = "ratings"  # or "boolean": the data ``fit`` takes

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "algorithm" in cls.__dict__:
            cls.name = cls.algorithm.name
            cls.Config = cls.algorithm.Config
            cls.data_kind = cls.algorithm.data_kind
        if "Config" not in cls.__dict__ and "algorithm" not in cls.__dict__:
            return
        params = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
            for name, default in cls._defaults().items()
        ]
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)

        def __init__(self, **params: Any) -> None:  # noqa: N807
            Estimator.__init__(self, **params)

        __init__.__signature__ = inspect.Signature([self_param, *params])
        __init__.__doc__ = Estimator.__init__.__doc__
        cls.__init__ = __init__

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        fields = cls.Config.model_fields
        return {**{name: f.default for name, f in fields.items()}, **cls.run_params}

    def __init__(self, **params: Any) -> None:
        """Store the parameters (the algorithm's, then the run's); nothing is checked here."""
        defaults = self._defaults()
        unknown = sorted(set(params) - set(defaults))
        if unknown:
            raise TypeError(
                f"{type(self).__name__} got unknown parameter(s) {', '.join(unknown)}; "
                f"it takes {', '.join(defaults)}"
            )
        for name, default in defaults.items():
            setattr(self, name, params.get(name, default))

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """Every parameter, defaults included."""
        return {name: getattr(self, name) for name in self._defaults()}

    def set_params(self, **params: Any) -> Estimator:
        """Change parameters; returns ``self``."""
        defaults = self._defaults()
        for name, value in params.items():
            if name not in defaults:
                raise ValueError(f"{type(self).__name__} has no parameter {name!r}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = self._defaults()
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v != defaults[k]]
        return f"{type(self).__name__}({', '.join(changed)})"

    def make_config(self) -> Any:
        """The validated ``Config`` from the current parameters."""
        return self.Config(**{name: getattr(self, name) for name in self.Config.model_fields})

    def fit(self, data: Any) -> Estimator:
        """Train on ``data``; returns ``self``."""
        return self.fit_with_progress(data)

    def fit_with_progress(self, data: Any, callback: RoundCallback | None = None) -> Estimator:
        """:meth:`fit`, calling ``callback(round, row or None)`` after every round."""
        raise NotImplementedError


class FederatedEstimator(Estimator):
    """Base of the estimators of federated algorithms; a subclass sets ``algorithm`` (a
    :class:`fedmc.core.protocol.Algorithm`)."""

    algorithm: ClassVar[Algorithm]
    run_params = RUN_PARAMS

    def fit_with_progress(self, data: Any, callback: RoundCallback | None = None,
                          ) -> FederatedEstimator:
        """Train on ``data`` (a :class:`fedmc.data.FederatedData`, or Boolean data for the
        Boolean algorithms) with the batched simulation, calling ``callback(round, row or
        None)`` after every round; returns ``self``."""
        if self.algorithm.data_kind == "ratings" and not hasattr(data, "train"):
            raise ConfigError(f"{self.algorithm.name} needs rating data (fedmc.load_federated)")
        cfg = self.make_config()
        sampler = make_sampler(data.n_clients, self.active, self.sampling, self.participation,
                               self.dropout)
        sim = simulate(self.algorithm, cfg, data, sampler, self.rounds, self.random_state,
                       self.eval_every, callback, dp=self.privacy())
        self.config_ = cfg
        self._learn(sim, data)
        return self

    def privacy(self) -> UserDP | None:
        """The run's user-level DP settings, None when off."""
        return user_dp(self.user_dp_clip, self.user_dp_delta, self.user_dp_epsilon,
                       self.user_dp_noise, self.user_dp_setup_scale, self.user_dp_setup_clip)

    def _learn(self, sim: Simulation, data: Any) -> None:
        """Set the learned attributes from a finished simulation."""
        self.history_: History = sim.history
        self.info_: FederationInfo = sim.info
        self.model_: dict[str, np.ndarray] = dict(self.algorithm.model(self.config_, sim.server))


class FactorPredictions:
    """``predict`` and ranking metrics for fitted ``U V^T`` models: needs ``U_`` (rows),
    ``V_``, ``user_index_`` (source user of every row), ``config_`` and ``info_``; a subclass
    sets the index maps with :meth:`_keep_index_maps`.

    :class:`fedmc.model.FactorModel` turns a fitted estimator into the saved model, which
    predicts and recommends by raw ids.
    """

    def _keep_index_maps(self, data: Any) -> None:
        """Keep the index maps of the training data (never its ratings): ``user_index_``,
        ``user_ids_`` (raw id of every row of ``U_``), ``item_ids_`` (of every row of ``V_``)
        and the data's name, ``data_name_``."""
        self.user_index_ = np.asarray(data.user_index)
        self.data_name_: str = data.name
        self.user_ids_ = np.asarray(data.user_ids)
        self.item_ids_ = np.asarray(data.item_ids)

    def predict(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Predicted ratings on the original scale for dense (user, item) indices of the
        source ``Ratings``.

        Raises
        ------
        fedmc.errors.DataError
            An index that is not an integer or lies outside the data's users or items.
        """
        n_users, n_items = len(self.user_index_), len(self.V_)
        users = checked_indices(users, n_users, "user")
        items = checked_indices(items, n_items, "item")
        if len(users) != len(items):
            raise DataError(f"{len(users)} users but {len(items)} items: give one per pair")
        row_of_user = np.empty(n_users, dtype=np.int64)
        row_of_user[self.user_index_] = np.arange(n_users)
        clip = self.config_.clip_range(self.info_.value_range)
        return predict_factors(self.U_, self.V_, row_of_user[users], items, self.info_, clip)

    def ranking_metrics(self, data: Any, k: int) -> dict[str, float]:
        """Precision, recall, NDCG, MAP, hit rate and coverage at ``k`` of every user's top-k
        list (training items excluded) against the test ratings of ``data``, the data the
        model was fitted on (:mod:`fedmc.core.ranking`)."""
        return ranking_metrics(ranking_sums(data, self.U_, self.V_, k), k)


class FactorEstimator(FactorPredictions, FederatedEstimator):
    """Estimators of ``U V^T`` models (plus biases) on the normalized rating scale.

    Learned attributes: ``V_`` (items x width, item-major), ``U_`` (users in federated row
    order; in a real federation they stay on the clients), ``user_index_`` (source user of
    every row), ``user_ids_`` and ``item_ids_`` (raw ids of the rows of ``U_`` and ``V_``),
    ``layout_``, ``history_``.
    """

    def _learn(self, sim: Simulation, data: Any) -> None:
        super()._learn(sim, data)
        self.V_ = self.model_["V"]
        self.U_ = sim.clients.user_factors()
        self._keep_index_maps(data)
        self.layout_: FactorLayout = self.config_.layout
