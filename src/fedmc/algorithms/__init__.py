"""The algorithms, one package each on the shared protocol (:mod:`fedmc.core.protocol`; ALS, the
centralized reference, outside it), looked up by name in :mod:`fedmc.algorithms.registry`.

An algorithm package imports :mod:`fedmc.core` (its shards of data: :mod:`fedmc.core.shard`)
and the mechanisms of :mod:`fedmc.privacy` its paper defines, nothing that builds its data or
drives it.
"""
