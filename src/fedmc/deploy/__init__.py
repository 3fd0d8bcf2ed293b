"""Deployment tooling for a real federation: the processes and files that run
:mod:`fedmc.flower`'s apps, on one machine or across many.

* :mod:`~fedmc.deploy.split` (each client's ratings and the manifest) and
  :mod:`~fedmc.deploy.app` (the Flower app ``flwr run`` submits, with its run configuration);
* :mod:`~fedmc.deploy.certs` (keys, certificates, roster), :mod:`~fedmc.deploy.server` (a
  SuperLink that the network reaches only through its Fleet API);
* :mod:`~fedmc.deploy.node` (a SuperNode that keeps the ClientApp loaded) over
  :mod:`~fedmc.deploy.fleet` (its connection to the Fleet API);
* :mod:`~fedmc.deploy.local`: a whole deployment on this machine.
"""
