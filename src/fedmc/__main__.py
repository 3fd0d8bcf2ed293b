"""``python -m fedmc``."""

from fedmc.cli import main

main()
