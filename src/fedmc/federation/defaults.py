"""The defaults of the federation layer that the command line's help shows too, written once
here: light to import, so ``fedmc --help`` loads no NumPy."""

GROWTH = 100.0
"""Under the default bound on plain uploads (``max-upload-norm = "auto"``,
:class:`fedmc.federation.bounds.NormReference`), how many times the reference norm of its phase
an upload may reach."""
