"""The federation layer, shared by every driver (the simulation, :mod:`fedmc.sim`, and a real
federation on Flower, :mod:`fedmc.flower`): the round (:mod:`~fedmc.federation.loop`), the
client population it talks to (:mod:`~fedmc.federation.population`), the one owner of what
crosses from clients to the server (:mod:`~fedmc.federation.aggregator`), client sampling
(:mod:`~fedmc.federation.sampling`), the run's schedule (:mod:`~fedmc.federation.settings`) and
its history (:mod:`~fedmc.federation.history`)."""
