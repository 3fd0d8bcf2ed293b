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
from fedmc.sim.loop import Simulation, simulate
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


class FederatedEstimator:
    """Base of the estimators; a subclass sets ``algorithm`` (a
    :class:`fedmc.core.protocol.Algorithm`)."""

    algorithm: ClassVar[Algorithm]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "algorithm" not in cls.__dict__:
            return
        params = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
            for name, default in cls._defaults().items()
        ]
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)

        def __init__(self, **params: Any) -> None:  # noqa: N807
            FederatedEstimator.__init__(self, **params)

        __init__.__signature__ = inspect.Signature([self_param, *params])
        __init__.__doc__ = FederatedEstimator.__init__.__doc__
        cls.__init__ = __init__

    @classmethod
    def _defaults(cls) -> dict[str, Any]:
        fields = cls.algorithm.Config.model_fields
        return {**{name: f.default for name, f in fields.items()}, **RUN_PARAMS}

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

    def set_params(self, **params: Any) -> FederatedEstimator:
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
        """The algorithm's validated ``Config`` from the current parameters."""
        fields = self.algorithm.Config.model_fields
        return self.algorithm.Config(**{name: getattr(self, name) for name in fields})

    def fit(self, data: Any) -> FederatedEstimator:
        """Train on ``data`` (a :class:`fedmc.data.FederatedData`, or Boolean data for the
        Boolean algorithms) with the batched simulation; returns ``self``."""
        if self.algorithm.data_kind == "ratings" and not hasattr(data, "train"):
            raise ConfigError(f"{self.algorithm.name} needs rating data (fedmc.load_federated)")
        cfg = self.make_config()
        sampler = make_sampler(data.n_clients, self.active, self.sampling, self.participation,
                               self.dropout)
        sim = simulate(self.algorithm, cfg, data, sampler, self.rounds, self.random_state,
                       self.eval_every)
        self.config_ = cfg
        self._learn(sim, data)
        return self

    def _learn(self, sim: Simulation, data: Any) -> None:
        """Set the learned attributes from a finished simulation."""
        self.history_: History = sim.history
        self.info_: FederationInfo = sim.info
        self.model_: dict[str, np.ndarray] = dict(self.algorithm.model(self.config_, sim.server))


class FactorEstimator(FederatedEstimator):
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

    def predict(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Predicted ratings on the original scale for dense (user, item) indices of the
        source ``Ratings``."""
        row_of_user = np.empty(len(self.user_index_), dtype=np.int64)
        row_of_user[self.user_index_] = np.arange(len(self.user_index_))
        rows = row_of_user[np.asarray(users, dtype=np.int64)]
        clip = self.config_.clip_range(self.info_.value_range)
        return predict_factors(self.U_, self.V_, rows, items, self.info_, clip)
