"""scikit-learn style estimators, one per registered algorithm (:mod:`fedmc.algorithms.registry`).

``__init__`` stores keyword parameters only (the algorithm's hyper-parameters and the run's:
the fields of :class:`fedmc.federation.settings.Schedule`, its ``seed`` named
``random_state``); ``fit(data)`` validates them, runs the batched simulation
(:func:`fedmc.sim.simulate`) and returns ``self``; learned attributes end in ``_``.
``get_params``/``set_params`` make estimators cloneable (``sklearn.base.clone`` works). The
signature of every estimator lists its parameters explicitly (built from the algorithm's
pydantic ``Config``), so ``help()`` and introspection show them.

A fitted factor model keeps factors and index maps, never ratings.

Early stopping, as ``fedmc run --early-stopping`` does it: fit data with a validation cut
(``load_federated(..., validation_fraction=0.1)``) and pass ``early_stopping=EarlyStopping(
patience=20, min_delta=0.0, metric=None, refit=True)`` (:class:`fedmc.federation.settings.
EarlyStopping`, or the same fields as a dict). The rounds are evaluated on the cut every
``eval_every`` rounds and stop once ``metric`` (``validation_rmse`` for ratings,
``validation_ndcg@K`` with ``eval_k=K``) has not improved by more than ``min_delta`` for
``patience`` rounds; ``stopped_`` says which round was best, its value, and why the rounds
ended. With ``refit=True`` the estimator then trains again on every training rating (the cut
put back) for the best round's number of rounds (``stopped_["refit_rounds"]``; the first
pass's history is ``validation_history_``); with ``refit=False`` it keeps the best round's
model, trained without the cut.

>>> from fedmc import FedMCADMM, load_federated
>>> data = load_federated("synthetic", clients=20, validation_fraction=0.1)
>>> est = FedMCADMM(rank=5, rounds=10, active=5, early_stopping={"patience": 3}).fit(data)
>>> est.stopped_["metric"], est.stopped_["refit_rounds"] == est.stopped_["round"] <= 10
('validation_rmse', True)
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from fedmc.algorithms.felb.prox import binarize
from fedmc.algorithms.registry import AlgorithmSpec, spec, specs
from fedmc.core.factors import FactorLayout
from fedmc.core.factors import predict as predict_factors
from fedmc.core.protocol import FederationInfo
from fedmc.core.ranking import top_k_metrics
from fedmc.data.vocabulary import checked_indices
from fedmc.errors import DataError
from fedmc.federation.history import History
from fedmc.federation.loop import RoundCallback
from fedmc.federation.settings import Schedule
from fedmc.run.data_settings import DataSettings
from fedmc.run.spec import RunSpec
from fedmc.run.train import Trained, train
from fedmc.sim import PopulationFactory

if TYPE_CHECKING:
    from pydantic import BaseModel

SEED = "random_state"  # the scikit-learn name of Schedule.seed
RUN_PARAMS: dict[str, Any] = {(SEED if name == "seed" else name): field.default
                              for name, field in Schedule.model_fields.items()}
"""Run parameters every federated estimator takes besides its algorithm's: the fields of
:class:`fedmc.federation.settings.Schedule` with their defaults (rounds, clients per round
(None: all), sampling, participation, dropout, evaluation period, the seed as
``random_state``, the ranking cut-off of every evaluation as ``eval_k``, early stopping on the
validation cut as ``early_stopping=EarlyStopping(...)`` (module docstring), and user-level DP
as ``dp=UserDP(...)``,
:class:`fedmc.privacy.accounting.UserDP`, apart from Felb's own local DP parameters)."""


class Estimator:
    """Keyword parameters stored as attributes, ``get_params``/``set_params``, a ``repr`` of
    the changed ones and an explicit ``__init__`` signature; a subclass is the estimator its
    algorithm's spec names (``AlgorithmSpec.estimator``, which gives it ``name`` and ``spec``)
    and sets ``run_params`` (the run's parameters)."""

    name: ClassVar[str]  # the ``--algorithm`` value
    Config: ClassVar[type[BaseModel]]
    spec: ClassVar[AlgorithmSpec]
    run_params: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        mine = [s for s in specs().values() if s.estimator == cls.__name__]
        if not mine:  # a base class
            return
        cls.spec = mine[0]
        cls.name = cls.spec.name
        cls.Config = cls.spec.Config
        params = [
            inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
            for name, default in cls._defaults().items()
        ]
        self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)

        def __init__(self, **params: Any) -> None:  # noqa: N807
            Estimator.__init__(self, **params)

        setattr(__init__, "__signature__", inspect.Signature([self_param, *params]))  # noqa: B010
        __init__.__doc__ = Estimator.__init__.__doc__
        setattr(cls, "__init__", __init__)  # noqa: B010

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
        """:meth:`fit`, telling ``callback`` of every round: a function of ``(round, row or
        None)`` (progress), or a :class:`fedmc.federation.callbacks.Callback` (which may stop
        the run)."""
        raise NotImplementedError

    def schedule(self) -> Schedule:
        """The validated run parameters."""
        return Schedule(**{("seed" if name == SEED else name): getattr(self, name)
                           for name in self.run_params})

    def run_spec(self, data: Any = None) -> RunSpec:
        """The run these parameters describe on ``data`` (what :meth:`fit` is given): their
        normalizer is the run's (a DP run's spec refuses a fitted one,
        :func:`fedmc.run.spec.check_normalizer`)."""
        self.config_ = self.make_config()
        normalizer = getattr(data, "normalizer", None)
        settings = DataSettings() if normalizer is None else DataSettings(
            normalize=normalizer.kind)
        return RunSpec(algorithm=self.name, params=self.config_.model_dump(), data=settings,
                       schedule=self.schedule())


class FederatedEstimator(Estimator):
    """Base of the estimators of federated algorithms (on the protocol)."""

    run_params = RUN_PARAMS
    rounds: int  # one of the run parameters (set as attributes, as every parameter)
    stopped_: dict[str, Any] | None

    def fit_with_progress(self, data: Any, callback: RoundCallback | None = None,
                          population: PopulationFactory | None = None) -> FederatedEstimator:
        """Train on ``data`` (a :class:`fedmc.data.FederatedData`, or Boolean data for the
        Boolean algorithms) with the batched simulation, telling ``callback`` of every round
        (:meth:`Estimator.fit_with_progress`); returns ``self``.

        With ``early_stopping`` (module docstring) the rounds stop on the validation cut of
        ``data``; with its ``refit`` (the default) a second pass then trains on every training
        rating, the cut put back (:meth:`fedmc.data.FederatedData.every_training_rating`), for
        the best round's number of rounds, and its model is the result (the callback hears
        both passes, the second counting from round 1 again). ``population``: where the
        clients live (:func:`fedmc.sim.simulate`'s ``driver``; None: stacked in this
        process)."""
        self._learn(train(self.run_spec(data), data, population=population, callbacks=callback))
        return self

    def _learn(self, trained: Trained) -> None:
        """Set the learned attributes from what training left."""
        self.history_: History = trained.history
        self.info_: FederationInfo = trained.info
        self.privacy_: dict[str, Any] = trained.privacy
        self.stopped_ = trained.stopped
        self.model_: dict[str, np.ndarray] = trained.model
        if trained.validation_history is not None:
            self.validation_history_: History = trained.validation_history


class FactorPredictions:
    """``predict_indices`` and ranking metrics for fitted ``U V^T`` models: needs ``U_``
    (rows), ``V_``, ``user_index_`` (source user of every row), ``config_`` and ``info_``; a
    subclass sets the index maps with :meth:`_keep_index_maps`.

    :class:`fedmc.model.FactorModel` turns a fitted estimator into the saved model, which
    predicts and recommends by raw ids.
    """

    U_: np.ndarray
    V_: np.ndarray
    config_: Any
    info_: FederationInfo

    def _keep_index_maps(self, data: Any) -> None:
        """Keep the index maps of the training data (never its ratings): ``user_index_``,
        ``user_ids_`` (raw id of every row of ``U_``), ``item_ids_`` (of every row of ``V_``)
        and the data's name, ``data_name_``."""
        self.user_index_ = np.asarray(data.user_index)
        self.data_name_: str = data.name
        self.user_ids_ = np.asarray(data.user_ids)
        self.item_ids_ = np.asarray(data.item_ids)

    def predict_indices(self, users: np.ndarray, items: np.ndarray) -> np.ndarray:
        """Predicted ratings on the original scale for dense (user, item) *indices* of the
        source ``Ratings`` (positions in its vocabularies, not raw ids:
        :meth:`fedmc.model.FactorModel.predict` takes raw ids).

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
        normalizer = self.info_.normalizer
        assert normalizer is not None  # rating data (a factor model's) has one
        return predict_factors(self.U_, self.V_, row_of_user[users], items, normalizer, clip)

    def ranking_metrics(self, data: Any, k: int) -> dict[str, float]:
        """Precision, recall, NDCG, MAP, hit rate and coverage at ``k`` of every user's top-k
        list (training items excluded) against the test ratings of ``data``, the data the
        model was fitted on (:mod:`fedmc.core.ranking`)."""
        return top_k_metrics(data, self.U_, self.V_, k)


class FactorEstimator(FactorPredictions, FederatedEstimator):
    """Estimators of ``U V^T`` models (plus biases) on the normalized rating scale.

    Learned attributes: ``V_`` (items x width, item-major), ``U_`` (users in federated row
    order; in a real federation they stay on the clients), ``user_index_`` (source user of
    every row), ``user_ids_`` and ``item_ids_`` (raw ids of the rows of ``U_`` and ``V_``),
    ``layout_``, ``history_``.
    """

    def _learn(self, trained: Trained) -> None:
        super()._learn(trained)
        self.V_ = self.model_["V"]
        self.U_ = trained.user_factors
        self._keep_index_maps(trained.data)
        self.layout_: FactorLayout = self.config_.layout


class FedMCADMM(FactorEstimator):
    """FedMC-ADMM (Algorithm 1 of ``fedmc-admm.md``; :mod:`fedmc.algorithms.fedmc_admm`) on
    the batched simulation; ``consensus="rated"`` runs the cross-device mode.

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = FedMCADMM(rank=5, rounds=20, active=5).fit(data)
    >>> bool(model.history_.last("test_rmse") < 1.2)
    True
    """


class FedMAvg(FactorEstimator):
    """FedMAvg with the hyper-parameters of section 5.2 of ``fedmc-admm.md``
    (:mod:`fedmc.algorithms.fedmavg`) on the batched simulation.

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = FedMAvg(rank=5, rounds=5, active=5).fit(data)
    >>> len(model.history_)
    6
    """


class FedMAvgPoster(FactorEstimator):
    """The original FedMAvg (Algorithm 1 of the poster, :mod:`fedmc.algorithms.fedmavg`) on
    the batched simulation.

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = FedMAvgPoster(rank=5, rounds=5, active=5, sampling="replacement").fit(data)
    >>> model.history_.last("q2")
    3.0
    """


class RFRec(FactorEstimator):
    """RFRec (Algorithm 1 of ``rfrec.md``, :mod:`fedmc.algorithms.rfrec`): local gradient
    steps on ``f_i + lambda psi_i``, server averaging.

    One round is one iteration ``k``. History extras: ``comm_rounds`` (cumulative
    communication rounds, Definition 3.8) and ``epsilon`` (``2 delta / s``) when LDP is on.

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = RFRec(rank=5, rounds=20).fit(data)
    >>> model.history_.last("comm_rounds")
    40.0
    """


class RFRecF(FactorEstimator):
    """RFRecF (Algorithm 2 of ``rfrec.md``): Bernoulli(p) switching between local steps and
    aggregation.

    The coin ``zeta_k`` is drawn from the server's stream; ``zeta_{-1} = 0``, so the first
    iteration communicates with probability ``p`` and every later one with ``2 p (1-p)``.
    """


class FedALS(FactorEstimator):
    """Federated ALS on summed sufficient statistics (:mod:`fedmc.algorithms.fedals`) on the
    batched simulation (``implicit=True`` for interactions).

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = FedALS(rounds=10, active=5).fit(data)
    >>> bool(model.history_.last("test_rmse") < 1.0)
    True
    """


class ItemBias(FactorEstimator):
    """The DP item-bias baseline (:mod:`fedmc.algorithms.item_bias`) on the batched simulation.

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = ItemBias(rounds=0).fit(data)
    >>> bool(model.history_.last("test_rmse") < 1.0)
    True
    """


class Ease(FactorEstimator):
    """Federated EASE (:mod:`fedmc.algorithms.ease`) on the batched simulation, on
    interactions (``implicit=True``).

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20, implicit=True)
    >>> model = Ease(implicit=True, lam=50.0, rounds=0).fit(data)
    >>> model.V_.shape == (data.n_items, data.n_items)
    True
    """


class Felb(FederatedEstimator):
    """Felb: federated Elbmf with Lipschitz (iPALM) steps (Alg. 1, Eq. 8;
    :mod:`fedmc.algorithms.felb`).

    Learned attributes: ``U_`` ``(n, k)`` the relaxed client factors in federated row order
    (in a federation they stay on the clients), ``V_hat_`` ``(k, m)`` the server's model,
    ``history_``.

    Examples
    --------
    >>> from fedmc.data.boolean import load_boolean
    >>> data = load_boolean("synthetic-boolean", n_clients=4, rows=200, cols=60, tiles=3)
    >>> model = Felb(rank=3, rounds=5).fit(data)
    >>> model.binary_factors()[1].shape
    (3, 60)
    """


    def _learn(self, trained: Trained) -> None:
        super()._learn(trained)
        self.U_ = trained.user_factors
        self.V_hat_ = self.model_["V_hat"]

    def factors(self) -> tuple[np.ndarray, np.ndarray]:
        """Relaxed factors: ``U`` ``(n, k)`` in federated row order and ``V_hat`` ``(k, m)``."""
        return self.U_, self.V_hat_

    def binary_factors(self) -> tuple[np.ndarray, np.ndarray]:
        """The final binarization of ``U`` and ``V_hat`` (spec 2.6), as ``uint8``."""
        return binarize(self.U_), binarize(self.V_hat_)


class FelbMU(Felb):
    """Felb-MU: Felb with the multiplicative-update step matrices of Lee and Seung (Sec. 3.2).

    Per-entry steps ``eta_U = U~ / (U~ V V^T + eps)`` and ``eta_V = V~ / (U^T U V~ + eps)``;
    the prox parameters become per-entry too (``kappa eta``, ``lambda_t eta``, ``gamma eta``).
    The extrapolated point is clamped at 0 first, so that every step is nonnegative. As in
    MU, an entry that reaches exactly 0 stays 0 (zero-locking).
    """


class ALS(FactorPredictions, Estimator):
    """Centralized biased matrix factorization by alternating least squares
    (:mod:`fedmc.algorithms.als`).

    Learned attributes: ``U_`` (users in federated row order), ``V_`` (items), ``user_index_``,
    ``user_ids_``, ``item_ids_`` (raw ids of the rows of ``U_`` and ``V_``), ``history_`` (one
    row per sweep; ``round`` counts sweeps).

    Examples
    --------
    >>> from fedmc import load_federated
    >>> data = load_federated("synthetic", clients=20)
    >>> model = ALS(sweeps=10).fit(data)
    >>> bool(model.history_.last("test_rmse") < 1.0)
    True
    """

    run_params = {"eval_every": 1, SEED: 0}

    def fit_with_progress(self, data: Any, callback: RoundCallback | None = None) -> ALS:
        """Run the sweeps on all training ratings (:func:`fedmc.algorithms.als.run_sweeps`),
        telling ``callback`` of every sweep as of a round."""
        trained = train(self.run_spec(data), data, callbacks=callback)
        self.info_, self.U_, self.V_ = trained.info, trained.user_factors, trained.model["V"]
        self.history_ = trained.history
        self._keep_index_maps(data)
        return self


def estimator_run_params(schedule: Schedule, cls: type[Estimator]) -> dict[str, Any]:
    """The run parameters of estimator ``cls`` that ``schedule`` sets (its ``seed`` as
    ``random_state``)."""
    values = {(SEED if name == "seed" else name): getattr(schedule, name)
              for name in Schedule.model_fields}
    return {name: value for name, value in values.items() if name in cls.run_params}


def estimator_class(name: str) -> type[Estimator]:
    """The estimator of the registered algorithm ``name``."""
    spec(name)  # an unknown name is refused with the list of names
    return next(cls for cls in _estimators() if cls.__dict__.get("spec") is spec(name))


def _estimators() -> list[type[Estimator]]:
    found, todo = [], [Estimator]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo.extend(cls.__subclasses__())
    return found
