"""The first run's generic kernels, compiled by child processes beside the data's loading
(:mod:`fedmc.run.precompile`)."""

from __future__ import annotations

import csv
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


@pytest.mark.parametrize(("algorithm", "changed", "cores", "part", "own", "one_user"), [
    ("fedmc-admm", {}, 2, precompile.ROUND, precompile.SETUP, False),
    ("fedmc-admm", {}, 1, precompile.GENERIC, None, False),
    ("fedmc-admm", {"consensus": "rated"}, 2, precompile.ROUND, precompile.SETUP, True),
    ("fedmavg", {}, 2, precompile.GENERIC, None, False),
    ("fedals", {"implicit": True}, 2, precompile.ROUND, precompile.SETUP, True),
    ("fedals", {"implicit": True}, 1, precompile.GENERIC, None, True),
])
def test_fedmc_admm_compiles_its_round_in_a_child_of_its_own(monkeypatch, algorithm, changed,
                                                              cores, part, own, one_user):
    """An algorithm with a round warm-up (FedMC-ADMM, federated ALS) has the larger part of its
    round compiled by a child and the rest by the run where the run may use two cores; any
    other, and any run on one core, has all its generic kernels compiled by the child. The
    child is told when the run's clients hold one user each."""
    monkeypatch.setenv("NUMBA_NUM_THREADS", str(cores))
    started = []

    class Child:
        def __init__(self, argv, **kwargs):
            started.append(argv)

    monkeypatch.setattr(subprocess, "Popen", Child)
    params = _params(algorithm, **changed)
    warming = precompile.compile_generic_alongside(algorithm, params, one_user)
    flag = [precompile.ONE_USER] if one_user else []
    assert [argv[3:] for argv in started] == [[algorithm, json.dumps(params), part, *flag]]
    assert warming.own_part == own and warming.one_user == one_user


_LISTENER = textwrap.dedent("""
    import json, sys
    from numba.core import event

    compiled = []  # the module of every kernel compiled once a Listener is registered

    class Listener(event.Listener):
        def on_start(self, ev):
            compiled.append(ev.data["dispatcher"].py_func.__module__)

        def on_end(self, ev):
            pass
""")

_COUNT_COMPILES = _LISTENER + textwrap.dedent("""
    from fedmc.run import precompile

    algorithm, params, one_user = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3] == "1"
    precompile.compile_now(algorithm, params, precompile.SETUP, one_user)  # the run's own part
    event.register("numba:compile", Listener())
    precompile.compile_now(algorithm, params, precompile.GENERIC, one_user)
    print(json.dumps(sorted({m for m in compiled if m.startswith("fedmc")})))
""")


def _compiled_after(algorithm: str, params: dict, one_user: bool, parts: tuple[str, ...],
                    folder) -> list[str]:
    """The fedmc modules whose kernels a tiny federation of ``algorithm`` (settings
    ``params``) on the generic kernels compiles, after the process compiled :data:`SETUP`'s
    part itself (as a run does), on caches (under ``folder``) that children of ``parts``
    filled."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(folder / "numba"),
           "XDG_CACHE_HOME": str(folder / "cache")}
    flag = [precompile.ONE_USER] if one_user else []
    children = [subprocess.Popen([sys.executable, "-m", "fedmc.run.precompile", algorithm,
                                  json.dumps(params), part, *flag], env=env) for part in parts]
    assert [child.wait(timeout=600) for child in children] == [0] * len(parts)
    found = subprocess.run([sys.executable, "-c", _COUNT_COMPILES, algorithm,
                            json.dumps(params), str(int(one_user))],
                           env=env, capture_output=True, text=True, timeout=600, check=True)
    return json.loads(found.stdout.strip().splitlines()[-1])


def _readme_fedals() -> dict:
    """The settings of the README's ``fedmc run -a fedals --implicit`` (one user a client,
    the item step by exchanges)."""
    from fedmc.run.options import RunOptions
    from fedmc.run.settings import resolve

    readme = resolve(RunOptions(algorithm="fedals", implicit=True))
    assert readme.data.partition == "user" and readme.params["upload"] == "factors"
    return readme.config().model_dump(mode="json")


@pytest.mark.slow
@pytest.mark.parametrize(("algorithm", "changed", "one_user"), [
    ("fedmc-admm", {}, False), ("fedmc-admm", {"consensus": "rated"}, True),
    ("fedals", None, True)])
def test_the_round_child_and_the_run_leave_nothing_to_compile(tmp_path, algorithm, changed,
                                                               one_user):
    """After the :data:`ROUND` child ran on empty caches and the run compiled :data:`SETUP`'s
    part itself, a tiny federation compiles no kernel of fedmc: the round warm-up builds the
    argument types a real client step passes (FedMC-ADMM's defaults and its consensus on
    rated items with one user a client; federated ALS as the README runs it). Without the
    child it compiles the round's kernels."""
    params = _readme_fedals() if changed is None else _params(algorithm, **changed)
    own = f"fedmc.algorithms.{algorithm.replace('-', '_')}.kernels"
    assert own in _compiled_after(algorithm, params, one_user, (), tmp_path / "setup")
    assert _compiled_after(algorithm, params, one_user, (precompile.ROUND,),
                           tmp_path / "both") == []


_IMPLICIT_RUN = _LISTENER + textwrap.dedent("""
    from fedmc.run.data import federated_data
    from fedmc.run.data_settings import DataSettings
    from fedmc.run.spec import RunSpec
    from fedmc.run.train import train

    settings = DataSettings(implicit=True, partition="user", clients=3000)
    data = federated_data(settings)[0]
    data.item_major  # the layout's kernel: the run's, not the algorithm's
    event.register("numba:compile", Listener())
    train(RunSpec(algorithm="fedals", params=json.loads(sys.argv[1]), data=settings,
                  schedule={"rounds": 2}), data)
    print(json.dumps(sorted({m for m in compiled if m.startswith("fedmc")})))
""")


@pytest.mark.slow
def test_a_child_compiles_every_kernel_of_an_algorithm_without_a_rank_token(tmp_path):
    """Federated ALS on interactions (the README's ``-a fedals --implicit``, one user a client
    and its user factors uploaded) takes no rank token: the child compiles all its kernels on
    tiny interactions of one user a client (:data:`GENERIC`), and a run on real interactions
    then compiles none of fedmc's; without the child it compiles fedals' own."""
    params = json.dumps(_readme_fedals())
    found = {}
    for name, child in (("without", False), ("with", True)):
        env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / name / "numba"),
               "XDG_CACHE_HOME": str(tmp_path / name / "cache")}
        if child:
            subprocess.run([sys.executable, "-m", "fedmc.run.precompile", "fedals", params,
                            precompile.GENERIC, precompile.ONE_USER], env=env, timeout=600,
                           check=True)
        run = subprocess.run([sys.executable, "-c", _IMPLICIT_RUN, params], env=env,
                             capture_output=True, text=True, timeout=600, check=True)
        found[name] = json.loads(run.stdout.strip().splitlines()[-1])
    assert "fedmc.algorithms.fedals.kernels" in found["without"]
    assert found["with"] == []


def test_a_first_run_without_a_rank_token_compiles_beside_its_loading(monkeypatch, tmp_path):
    """``fedmc run -a fedals --implicit``'s first run starts the child that compiles its
    kernels while its data load, and marks them compiled afterwards: the next run starts
    none."""
    from fedmc.run.runner import execute
    from fedmc.run.spec import RunSpec

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    started = []

    def alongside(algorithm, params, one_user):
        started.append(algorithm)
        return precompile.Warming(algorithm, params, one_user, [], None)

    monkeypatch.setattr(precompile, "compile_generic_alongside", alongside)
    run = RunSpec(algorithm="fedals", params={"implicit": True},
                  data={"implicit": True, "clients": 10}, schedule={"rounds": 1})
    key = precompile.generic_key(spec("fedals"), run.config())
    assert not precompile.is_compiled(key, precompile.GENERIC)
    execute(run, kernels="auto")
    assert started == ["fedals"] and precompile.is_compiled(key, precompile.GENERIC)
    execute(run, kernels="auto")
    assert started == ["fedals"]



def _first_run(folder, cores: int, args: list[str]) -> list[dict[str, str]]:
    """``fedmc run --rounds 3 ARGS`` on empty caches under ``folder`` with ``cores`` kernel
    threads (two: the round's child and the run compile at once; one: a child compiles all):
    the history without its clock."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(folder / "numba"),
           "XDG_CACHE_HOME": str(folder / "cache"), "FEDMC_KERNELS": "auto",
           "NUMBA_NUM_THREADS": str(cores)}
    subprocess.run([sys.executable, "-m", "fedmc", "run", "--rounds", "3", *args, "--quiet",
                    "--out", str(folder / "run")], env=env, timeout=600, check=True)
    with open(folder / "run" / "history.csv") as history:
        rows = list(csv.DictReader(history))
    return [{k: v for k, v in row.items() if k != "seconds"} for row in rows]


@pytest.mark.slow
@pytest.mark.parametrize("args", [[], ["-a", "fedals", "--implicit"]])
def test_a_first_run_is_the_same_whichever_process_compiled_its_kernels(tmp_path, args):
    """The first run's kernels compiled in two processes at once (part of the round by a child
    while the run compiles the rest: both compile the helpers they share) give the history of
    kernels compiled in one process, to the last bit: no kernel links a helper from the cache
    (:mod:`fedmc.core.kernels`). The default run and federated ALS on interactions."""
    assert _first_run(tmp_path / "two", 2, args) == _first_run(tmp_path / "one", 1, args)


_RANKING = _LISTENER + textwrap.dedent("""
    import numpy as np
    from fedmc.core.ranking import top_k_metrics
    from fedmc.run import precompile
    from fedmc.run.data import federated_data
    from fedmc.run.data_settings import DataSettings

    precompile.compile_ranking(True, True, 10)
    data = federated_data(DataSettings(implicit=True, partition="user", clients=3000))[0]
    event.register("numba:compile", Listener())
    rng = np.random.default_rng(1)
    top_k_metrics(data, rng.random((data.n_users, 32)), rng.random((data.n_items, 32)), 10)
    print(json.dumps(sorted({m for m in compiled if m.startswith("fedmc")})))
""")


@pytest.mark.slow
def test_the_top_n_kernels_compiled_while_a_run_waits_are_those_it_evaluates_with(tmp_path):
    """:func:`precompile.compile_ranking` on tiny interactions leaves nothing of the top-N
    evaluation of a real run's model to compile (the README's fedals on interactions)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path / "numba")}
    found = subprocess.run([sys.executable, "-c", _RANKING], env=env, capture_output=True,
                           text=True, timeout=600, check=True)
    assert json.loads(found.stdout.strip().splitlines()[-1]) == []
