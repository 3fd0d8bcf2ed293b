"""Import a module on first attribute access (for heavy imports on cold paths)."""

from __future__ import annotations

import importlib
from collections.abc import Callable
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


def lazy_exports(package: str, **exports: str) -> tuple[Callable[[str], Any], list[str]]:
    """The module ``__getattr__`` (PEP 562) and ``__all__`` of ``package``, whose names
    ``exports`` (``name=module``, the module relative to ``package`` with a leading dot) are
    imported on first access: importing the package (or a light module of it, such as an
    algorithm's ``spec``) loads none of them, so the command line answers ``--help`` without
    NumPy, Numba or SciPy.

    Use: ``__getattr__, __all__ = lazy_exports(__name__, ALGORITHM=".algorithm")``.
    """

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(module, package), name)

    return __getattr__, list(exports)
