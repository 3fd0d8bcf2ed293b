"""The privacy audit: what a curious server learns from what crosses the client/server boundary
(``fedmc audit``, ``docs/privacy.md``): the recording (:mod:`~fedmc.audit.boundary`), the
attacks (:mod:`~fedmc.audit.attacks`) and the audit that runs them on each algorithm's target
(:mod:`~fedmc.audit.run`)."""
