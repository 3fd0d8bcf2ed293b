"""A real federation on Flower (``pip install 'fedmc[flower]'``); see ``docs/federation.md``.

The same algorithms and server loop as the simulation, with the clients in other processes:

* :mod:`~fedmc.flower.split` and :mod:`~fedmc.flower.manifest`: the files a deployment hands
  out (each client's ratings, the public facts); :mod:`~fedmc.flower.shard` reads a client's
  own files back into the shard the simulation would give it;
* :mod:`~fedmc.flower.client_app` (with :mod:`~fedmc.flower.client_state`, the two-phase
  persisted state) and :mod:`~fedmc.flower.node` (a SuperNode that keeps it loaded);
* :mod:`~fedmc.flower.server_app` (the server loop over :mod:`~fedmc.flower.grid_clients`,
  through :mod:`~fedmc.flower.transport`), :mod:`~fedmc.flower.secagg` (SecAgg+);
* :mod:`~fedmc.flower.wire` (messages as Flower records), :mod:`~fedmc.flower.settings` and
  :mod:`~fedmc.flower.app` (the run configuration and the app ``flwr run`` submits);
* :mod:`~fedmc.flower.local`: a whole deployment on this machine.
"""
