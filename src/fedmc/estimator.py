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
from fedmc.errors import ConfigError
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
}
"""Run parameters every estimator takes besides its algorithm's: rounds, clients per round
(None: all), ``uniform|bernoulli|replacement`` sampling, Bernoulli participation, dropout
share, evaluation period and the seed."""


class Estimator:
    """Keyword parameters stored as attributes, ``get_params``/``set_params``, a ``repr`` of
    the changed ones and an explicit ``__init__`` signature; a subclass sets ``Config`` (its
    hyper-parameters) and ``run_params`` (the run's)."""

    Config: ClassVar[type]
    run_params: ClassVar[dict[str, Any]] = {}
    data_kind: ClassVar[str] = "ratings"  # or "boolean": the data ``fit`` takes

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "algorithm" in cls.__dict__:
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
                       self.eval_every, callback)
        self.config_ = cfg
        self._learn(sim, data)
        return self

    def _learn(self, sim: Simulation, data: Any) -> None:
        """Set the learned attributes from a finished simulation."""
        self.history_: History = sim.history
        self.info_: FederationInfo = sim.info
        self.model_: dict[str, np.ndarray] = dict(self.algorithm.model(self.config_, sim.server))


class FactorPredictions:
    """``predict`` for fitted ``U V^T`` models: needs ``U_`` (rows), ``V_``, ``user_index_``
    (source user of every row), ``config_`` and ``info_``."""

    def predict(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Predicted ratings on the original scale for dense (user, item) indices of the
        source ``Ratings``."""
        row_of_user = np.empty(len(self.user_index_), dtype=np.int64)
        row_of_user[self.user_index_] = np.arange(len(self.user_index_))
        rows = row_of_user[np.asarray(users, dtype=np.int64)]
        clip = self.config_.clip_range(self.info_.value_range)
        return predict_factors(self.U_, self.V_, rows, items, self.info_, clip)


class FactorEstimator(FactorPredictions, FederatedEstimator):
    """Estimators of ``U V^T`` models (plus biases) on the normalized rating scale.

    Learned attributes: ``V_`` (items x width, item-major), ``U_`` (users in federated row
    order; in a real federation they stay on the clients), ``user_index_`` (source user of
    every row), ``layout_``, ``history_``.
    """

    def _learn(self, sim: Simulation, data: Any) -> None:
        super()._learn(sim, data)
        self.V_ = self.model_["V"]
        self.U_ = sim.clients.user_factors()
        self.user_index_ = np.asarray(data.user_index)
        self.layout_: FactorLayout = self.config_.layout
