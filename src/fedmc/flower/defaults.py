"""The defaults of a real federation's settings that the command line's help shows too,
written once here (:class:`fedmc.flower.settings.FederatedRun` and ``fedmc federate`` read
them): light to import, so ``fedmc --help`` loads no NumPy."""

REPLY_TIMEOUT = 120.0
"""Seconds the server waits for the replies of one exchange."""

MAX_LOST_ROUNDS = 3
"""Exchanges in a row that may lose every client before a run stops."""

NODE_CPUS = 1.0
"""Ray's CPUs a virtual SuperNode of the simulation engine takes while it answers."""
