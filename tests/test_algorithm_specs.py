"""Every algorithm's facts are written once, in its package's spec: what is derived from them
(the ``Algorithm`` objects' names and data kinds, the estimators, the defaults by kind of data,
the audit's targets) agrees with them, and looking a name up stays cheap."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fedmc.algorithms.registry import (
    PACKAGES,
    audited_algorithms,
    default_algorithm,
    interactions_algorithms,
    specs,
)
from fedmc.errors import ConfigError


def test_every_package_has_a_spec_and_every_spec_a_package():
    modules = {s.config.split(":")[0].rsplit(".", 2)[1] for s in specs().values()}
    assert modules == set(PACKAGES)


@pytest.mark.parametrize("name", list(specs()))
def test_an_algorithm_takes_its_name_and_data_kind_from_its_spec(name):
    entry = specs()[name]
    for algorithm in entry.algorithms():
        assert algorithm.data_kind == entry.data_kind
        assert algorithm.name.startswith(name)
        assert algorithm.Config is entry.Config


@pytest.mark.parametrize("name", list(specs()))
def test_each_spec_names_its_estimator(name):
    import fedmc.estimators

    assert getattr(fedmc.estimators, specs()[name].estimator).name == name
    assert getattr(fedmc, specs()[name].estimator) is getattr(fedmc.estimators,
                                                              specs()[name].estimator)


def test_the_default_algorithm_of_each_kind_of_data_reads_that_kind():
    assert specs()[default_algorithm("ratings")].data_kind == "ratings"
    assert specs()[default_algorithm("boolean")].data_kind == "boolean"
    implicit = default_algorithm("ratings", implicit=True)
    assert implicit in interactions_algorithms()
    with pytest.raises(ConfigError, match="no default algorithm"):
        default_algorithm("images")


def test_every_audited_algorithm_has_its_target_module_and_no_other_has_one():
    from pathlib import Path

    from fedmc.audit import targets

    modules = {p.stem for p in Path(targets.__file__).parent.glob("*.py")} - {"__init__"}
    assert modules == {name.replace("-", "_") for name in audited_algorithms()}
    for name in audited_algorithms():
        assert issubclass(targets.target(name), targets.Target)


def test_importing_the_registry_loads_no_algorithm():
    code = ("import json, sys\nimport fedmc.algorithms.registry\n"
            "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('fedmc', 'numba')))))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True).stdout
    assert set(json.loads(out)) == {"fedmc", "fedmc.errors", "fedmc.algorithms",
                                    "fedmc.algorithms.registry", "fedmc.algorithms.spec"}
