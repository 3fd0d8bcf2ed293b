"""Import a module on first attribute access (for heavy imports on cold paths)."""

from __future__ import annotations

import importlib
from typing import Any


class LazyModule:
    """Stands in for module ``name`` and imports it when an attribute is first read."""

    def __init__(self, name: str) -> None:
        self._name = name

    def __getattr__(self, attr: str) -> Any:
        return getattr(importlib.import_module(self._name), attr)


def lazy_import(name: str) -> Any:
    """A :class:`LazyModule` for ``name``."""
    return LazyModule(name)
