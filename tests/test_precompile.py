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


@pytest.mark.parametrize(("algorithm", "changed", "cores", "parts"), [
    ("fedmc-admm", {}, 2, [precompile.SETUP, precompile.ROUND]),
    ("fedmc-admm", {}, 1, [precompile.GENERIC]),
    ("fedmc-admm", {"consensus": "rated"}, 2, [precompile.GENERIC]),
    ("fedmavg", {}, 2, [precompile.GENERIC]),
])
def test_fedmc_admm_compiles_its_round_in_a_child_of_its_own(monkeypatch, algorithm, changed,
                                                              cores, parts):
    """An algorithm with a round warm-up (FedMC-ADMM, consensus on every item) has its generic
    kernels compiled by two children at once where the run may use two cores; any other, and
    any run on one core, by one."""
    monkeypatch.setenv("NUMBA_NUM_THREADS", str(cores))
    started, lowered = [], []

    class Child:
        def __init__(self, argv, **kwargs):
            started.append(argv)
            self.pid = 1000 + len(started)

    monkeypatch.setattr(subprocess, "Popen", Child)
    monkeypatch.setattr(os, "setpriority", lambda which, pid, nice: lowered.append((pid, nice)))
    params = _params(algorithm, **changed)
    children = precompile.compile_generic_alongside(algorithm, params)
    assert len(children) == len(parts)
    assert [argv[-3:] for argv in started] == [[algorithm, json.dumps(params), p]
                                               for p in parts]
    # the set-up's child yields to the round's and to the run's loading
    assert lowered == ([(children[0].pid, 10)] if precompile.SETUP in parts else [])


_COUNT_COMPILES = textwrap.dedent("""
    import json, sys
    from numba.core import event

    compiled = []

    class Listener(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__module__)

        def on_end(self, ev):
            pass

    event.register("numba:compile", Listener())
    from fedmc.run import precompile
    precompile.compile_now(sys.argv[1], json.loads(sys.argv[2]), precompile.GENERIC)
    print(json.dumps(sorted({m for m in compiled if m.startswith("fedmc")})))
""")


def _compiled_after(parts: tuple[str, ...], folder) -> list[str]:
    """The fedmc modules whose kernels a tiny federation of FedMC-ADMM's defaults on the
    generic kernels compiles, on caches (under ``folder``) that children of ``parts`` filled,
    run at once."""
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
def test_the_two_children_leave_nothing_for_a_run_to_compile(tmp_path):
    """After the :data:`SETUP` and :data:`ROUND` children ran at once on empty caches, a tiny
    federation compiles no kernel of fedmc: the round warm-up builds the argument types a real
    client step passes. After :data:`SETUP` alone it compiles the round's kernels."""
    assert "fedmc.algorithms.fedmc_admm.kernels" in _compiled_after((precompile.SETUP,),
                                                                    tmp_path / "setup")
    assert _compiled_after((precompile.SETUP, precompile.ROUND), tmp_path / "both") == []
