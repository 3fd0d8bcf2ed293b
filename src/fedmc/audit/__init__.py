"""The privacy audit: what a curious server learns from what crosses the client/server boundary
(``fedmc audit``, ``docs/privacy.md``): the recording (:mod:`~fedmc.audit.boundary`), the
attacks (:mod:`~fedmc.audit.attacks`), each audited algorithm's target
(:mod:`~fedmc.audit.targets`, one module each) and the audit that runs the attacks on it
(:mod:`~fedmc.audit.run`)."""
