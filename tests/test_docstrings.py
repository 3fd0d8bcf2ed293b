"""Every example in the package's docstrings runs and prints what it shows (the estimators',
the API's, the saved model's: what a new user copies first)."""

from __future__ import annotations

import doctest
import importlib
from pathlib import Path

import pytest

import fedmc

SRC = Path(fedmc.__file__).parent
WITH_EXAMPLES = sorted(
    ".".join(p.relative_to(SRC.parent).with_suffix("").parts).removesuffix(".__init__")
    for p in SRC.rglob("*.py") if ">>>" in p.read_text())


def test_the_examples_are_found():
    assert {"fedmc.api", "fedmc.estimators", "fedmc.model"} <= set(WITH_EXAMPLES)


@pytest.mark.parametrize("name", WITH_EXAMPLES)
def test_docstring_examples_run(name):
    module = importlib.import_module(name)
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.attempted > 0 and result.failed == 0, f"{result.failed} failed in {name}"
