"""A run's data loaded by the shards of its population (``--backend ray``): each shard
generates its own clients' ratings, so no process holds the whole set.

The driver (the ``fedmc run`` process) reads what the whole set's split and partition need and
nothing more: the synthetic set's plan (users' degrees, no ratings), the split's masks (they
read the ratings' number, and the users for the user holdout), the partition. It cuts the
clients into shards of about equal numbers of training ratings, sends each shard its users
and their part of the masks (:class:`fedmc.data.shard_source.ShardSource`), fits the
normalizer and the rating range on the moments the shards report, and keeps the data's outline
(:class:`fedmc.sim.sharded.ShardedData`). Each shard's data equal the whole set's
:meth:`~fedmc.data.FederatedData.clients_shard` (tests), so the run's history is the batched
run's up to the order of the floating-point additions.

Where the shards cannot load their own (:func:`loads_on_shards`: a data set that is not a
synthetic one, ``--implicit``, a validation cut, ranking metrics or saved user factors, which
read the ratings in the driver), the driver loads the data and sends each shard its part.
"""

from __future__ import annotations

from itertools import pairwise

import numpy as np

from fedmc.core.scale import Moments, Normalizer
from fedmc.data import partition_users
from fedmc.data.catalog import SYNTHETIC_NAMES
from fedmc.data.federated import FederatedRows
from fedmc.data.shard_source import ShardSource, ValueFacts, balanced_bounds, positions
from fedmc.data.synthetic import synthetic_plan
from fedmc.run.data import check_split, cut_mask, held_out_mask
from fedmc.run.data_settings import DEFAULT_DATASET
from fedmc.run.spec import RunSpec
from fedmc.sim.sharded import ShardedData, ShardedPopulation


def loads_on_shards(run: RunSpec) -> bool:
    """Whether the shards of ``run``'s population generate their own data: a synthetic rating
    set read as it is, no validation cut, neither ranking metrics nor saved user factors."""
    d = run.data
    return (d.ratings is None and d.train is None and d.test is None
            and (d.dataset or DEFAULT_DATASET) in SYNTHETIC_NAMES and not d.implicit
            and d.validation_fraction == 0 and run.ranking_k is None
            and not run.save_user_factors)


def load_on_shards(run: RunSpec, population: ShardedPopulation) -> ShardedData:
    """The data of ``run``, each shard of ``population`` holding its clients' part."""
    settings = run.data
    name = settings.dataset or DEFAULT_DATASET
    plan = synthetic_plan(name, settings.seed)
    n_users, offsets = plan.n_users, plan.offsets
    degrees = np.diff(offsets)

    def users() -> np.ndarray:
        return np.repeat(np.arange(n_users, dtype=np.int32), degrees)

    is_test = held_out_mask(plan.n_ratings, users, n_users, settings)
    check_split(settings, n_users, is_test)
    is_validation = cut_mask(is_test, users, n_users, settings)
    held = is_test if is_validation is None else is_test | is_validation
    client_of_user = partition_users(n_users, settings.clients, settings.partition,
                                     settings.seed)
    rows = FederatedRows(client_of_user, n_users)
    # every synthetic user has a rating (min_user_ratings >= 1): reduceat's ranges are whole
    kept = degrees - np.add.reduceat(held.view(np.uint8), offsets[:-1], dtype=np.int64)
    cumulative = np.concatenate(([0], np.cumsum(kept[rows.user_index])))[rows.client_ptr]
    bounds = balanced_bounds(cumulative, population.shards)
    declared = settings.normalize == "public" or settings.rating_scale is not None
    scale = settings.public_scale() if declared else None
    sources = []
    for a, b in pairwise(bounds):
        members = np.sort(rows.user_index[rows.client_ptr[a]:rows.client_ptr[b]])
        at = positions(offsets, members)
        sources.append(ShardSource(
            name, settings.seed, members, client_of_user[members] - a,
            np.packbits(is_test[at]),
            None if is_validation is None else np.packbits(is_validation[at]), scale))
    workers = population.workers
    hosts = [workers.host() for _ in sources]
    facts: list[ValueFacts] = workers.call(hosts, "load", [(s,) for s in sources])
    normalizer = Normalizer.fitted(settings.normalizer_kind, scale,
                                   lambda: Moments.combine(f.moments for f in facts))
    value_range = scale if scale is not None else ValueFacts.value_range(facts)
    workers.call(hosts, "settle", [(normalizer, value_range)] * len(hosts))
    n_test = int(np.count_nonzero(is_test))
    return ShardedData(
        client_ptr=rows.client_ptr, n_items=plan.n_items, user_index=rows.user_index,
        user_ids=plan.user_ids[rows.user_index], item_ids=plan.item_ids,
        normalizer=normalizer, value_range=value_range, name=name,
        n_train_ratings=plan.n_ratings - int(np.count_nonzero(held)), n_test_ratings=n_test,
        hosts=tuple(hosts), bounds=bounds)
