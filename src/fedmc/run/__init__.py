"""One ``fedmc run``: what a run is (:mod:`~fedmc.run.spec`), the defaults chosen for it
(:mod:`~fedmc.run.settings`), its data
(:mod:`~fedmc.run.data`), the run itself (:mod:`~fedmc.run.runner`), its output folder
(:mod:`~fedmc.run.folder`) and the kernels it compiles in the background
(:mod:`~fedmc.run.precompile`)."""
