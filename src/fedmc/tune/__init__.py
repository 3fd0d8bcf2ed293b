"""``fedmc tune``: a search over an algorithm's settings on the clients' validation cut
(:mod:`fedmc.tune.space`: what is searched, :mod:`fedmc.tune.search`: the study,
:mod:`fedmc.tune.report`: its table and plots, :mod:`fedmc.tune.private`: the private search
of ``--dp-epsilon``)."""
