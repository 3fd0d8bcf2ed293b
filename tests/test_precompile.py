"""The first run's generic kernels, compiled by child processes beside the data's loading
(:mod:`fedmc.run.precompile`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from fedmc.algorithms.registry import spec
from fedmc.run import precompile


def _params(algorithm: str, **changed: object) -> dict:
    return spec(algorithm).Config(**changed).model_dump(mode="json")


@pytest.mark.parametrize(("algorithm", "changed", "cores", "part", "own"), [
    ("fedmc-admm", {}, 2, precompile.ROUND, precompile.SETUP),
    ("fedmc-admm", {}, 1, precompile.GENERIC, None),
    ("fedmc-admm", {"consensus": "rated"}, 2, precompile.GENERIC, None),
    ("fedmavg", {}, 2, precompile.GENERIC, None),
])
def test_fedmc_admm_compiles_its_round_in_a_child_of_its_own(monkeypatch, algorithm, changed,
                                                              cores, part, own):
    """An algorithm with a round warm-up (FedMC-ADMM, consensus on every item) has its round
    compiled by a child and its set-up by the run where the run may use two cores; any other,
    and any run on one core, has all its generic kernels compiled by the child."""
    monkeypatch.setenv("NUMBA_NUM_THREADS", str(cores))
    started = []

    class Child:
        def __init__(self, argv, **kwargs):
            started.append(argv)

    monkeypatch.setattr(subprocess, "Popen", Child)
    params = _params(algorithm, **changed)
    warming = precompile.compile_generic_alongside(algorithm, params)
    assert [argv[-3:] for argv in started] == [[algorithm, json.dumps(params), part]]
    assert warming.own_part == own


_COUNT_COMPILES = textwrap.dedent("""
    import json, sys
    from numba.core import event
    from fedmc.run import precompile

    compiled = []

    class Listener(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__module__)

        def on_end(self, ev):
            pass

    algorithm, params = sys.argv[1], json.loads(sys.argv[2])
    precompile.compile_now(algorithm, params, precompile.SETUP)  # the run's own part
    event.register("numba:compile", Listener())
    precompile.compile_now(algorithm, params, precompile.GENERIC)
    print(json.dumps(sorted({m for m in compiled if m.startswith("fedmc")})))
""")


def _compiled_after(parts: tuple[str, ...], folder) -> list[str]:
    """The fedmc modules whose kernels a tiny federation of FedMC-ADMM's defaults on the
    generic kernels compiles, after the process compiled :data:`SETUP`'s part itself (as a
    run does), on caches (under ``folder``) that children of ``parts`` filled."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(folder / "numba"),
           "XDG_CACHE_HOME": str(folder / "cache")}
    params = json.dumps(_params("fedmc-admm"))
    children = [subprocess.Popen([sys.executable, "-m", "fedmc.run.precompile", "fedmc-admm",
                                  params, part], env=env) for part in parts]
    assert [child.wait(timeout=600) for child in children] == [0] * len(parts)
    found = subprocess.run([sys.executable, "-c", _COUNT_COMPILES, "fedmc-admm", params],
                           env=env, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(found.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_the_round_child_and_the_run_leave_nothing_to_compile(tmp_path):
    """After the :data:`ROUND` child ran on empty caches and the run compiled :data:`SETUP`'s
    part itself, a tiny federation compiles no kernel of fedmc: the round warm-up builds the
    argument types a real client step passes. Without the child it compiles the round's
    kernels."""
    assert "fedmc.algorithms.fedmc_admm.kernels" in _compiled_after((), tmp_path / "setup")
    assert _compiled_after((precompile.ROUND,), tmp_path / "both") == []
