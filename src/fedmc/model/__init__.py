"""The saved factor model: predict and recommend by raw ids, fold in a new user on the device,
save and load (``docs/model.md``).

>>> from fedmc import FedMCADMM, load_federated
>>> from fedmc.model import FactorModel
>>> data = load_federated("synthetic", clients=20)
>>> est = FedMCADMM(rank=5, rounds=5, active=5).fit(data)
>>> model = FactorModel.from_estimator(est)           # what the server publishes
>>> me = model.fold_in(items=[1, 2, 3], ratings=[5.0, 1.0, 4.0])
>>> len(model.recommend(me, n=10))
10
"""

from fedmc.model.factor_model import FactorModel, NewUser, SimilarItems, TopN, load_model

__all__ = ["FactorModel", "NewUser", "SimilarItems", "TopN", "load_model"]
