"""The audit's own defaults, written once here (:class:`fedmc.audit.run.AuditSettings` and
``fedmc audit``'s options read them): light to import, so ``fedmc audit --help`` loads no
NumPy."""

ROUNDS = 20
"""Rounds of each audited run."""

ACTIVE = 10
"""Clients per round (uniform; the rate of Poisson sampling in the dp view)."""

DP_EPSILON = 8.0
"""The dp view's budget (at the user-level DP's default delta)."""

DP_CLIP = 0.3
"""The dp view's L2 bound of one client's upload."""
