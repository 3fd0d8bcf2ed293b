"""The federation protocol on Flower (``pip install 'fedmc[flower]'``): the apps, the clients
they reach and the records they exchange; see ``docs/federation.md``.

* :mod:`~fedmc.flower.server_app` (the round loop over :mod:`~fedmc.flower.grid_clients`,
  through :mod:`~fedmc.flower.transport`), :mod:`~fedmc.flower.secagg` (SecAgg+),
  :mod:`~fedmc.flower.roster` (which key speaks for which client);
* :mod:`~fedmc.flower.client_app` (with :mod:`~fedmc.flower.client_state`, the two-phase
  persisted state, and :mod:`~fedmc.flower.shard`, the client's own files read back);
* :mod:`~fedmc.flower.wire` and :mod:`~fedmc.flower.compact` (messages as Flower records),
  :mod:`~fedmc.flower.settings` (the run configuration), :mod:`~fedmc.flower.manifest` (the
  public facts);
* :mod:`~fedmc.flower.compat`: the only module that imports Flower's non-public modules.

Running it (certificates, SuperLink, SuperNodes, the files handed out) is :mod:`fedmc.deploy`.
"""
