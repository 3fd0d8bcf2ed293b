"""The thread pool the kernels run their ranges on (:mod:`fedmc.core.parallel`), and the sort
the kernels use instead of NumPy's (:func:`fedmc.core.kernels.heap_sort`)."""

from __future__ import annotations

import ctypes
import os
import signal
import threading
import time

import numba
import numpy as np
import pytest

from fedmc.core.kernels import heap_sort, rank_token, residual_sums
from fedmc.core.parallel import ordered_sum, parallel_for


@numba.njit(nogil=True)
def _count(start, stop, hits):
    for i in range(start, stop):
        hits[i] += 1


@numba.njit(nogil=True)
def _fail_at(start, stop, bad):
    for i in range(start, stop):
        if i == bad:
            raise ValueError("bad row")


_usleep = ctypes.CDLL(None).usleep  # an opaque call: the flag is read again after each
_usleep.argtypes = [ctypes.c_uint]
_usleep.restype = ctypes.c_int


@numba.njit(nogil=True)
def _wait(start, stop, flag, bound):
    """A long kernel that takes no core: sleeps 1 ms at a time until ``flag[0]`` is set (at
    most ``bound`` times)."""
    for _ in range(bound):
        if flag[0] != 0:
            break
        _usleep(1000)


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("n", [1, 2, 7, 64, 1001])
def test_every_row_runs_once(monkeypatch, threads, n):
    monkeypatch.setenv("NUMBA_NUM_THREADS", threads)
    hits = np.zeros(n, dtype=np.int64)
    parallel_for(_count, n, hits)
    assert np.all(hits == 1)


def test_nothing_to_do():
    parallel_for(_count, 0, np.zeros(0, dtype=np.int64))


def test_an_error_in_a_range_reaches_the_caller():
    with pytest.raises(ValueError, match="bad row"):
        parallel_for(_fail_at, 50, 37)
    hits = np.zeros(10, dtype=np.int64)  # the pool still works after it
    parallel_for(_count, 10, hits)
    assert np.all(hits == 1)


def _heard_after(send) -> float:
    """Seconds until a kernel that waits a minute is stopped by the SIGINT ``send(signum)``
    sends 0.3 s after it starts (KeyboardInterrupt required)."""
    flag = np.zeros(1)
    _wait(0, 1, np.ones(1), 1)  # compiled before the clock starts
    parallel_for(_wait, 1, np.ones(1), 1)  # and the workers started

    def interrupt() -> None:
        time.sleep(0.3)
        send(signal.SIGINT)

    # Python's own handler, even where this process was started with SIGINT ignored (a
    # background job of a shell without job control is)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    started = time.perf_counter()
    threading.Thread(target=interrupt, daemon=True).start()
    try:
        with pytest.raises(KeyboardInterrupt):
            parallel_for(_wait, 1, flag, 60_000)
        return time.perf_counter() - started
    finally:
        flag[0] = 1  # let the worker go
        signal.signal(signal.SIGINT, previous)


def test_a_signal_is_heard_while_a_kernel_runs():
    assert _heard_after(lambda signum: os.kill(os.getpid(), signum)) < 2.0


def test_a_signal_a_worker_thread_takes_is_heard_too():
    """The kernel hands a signal sent to the process to any thread that does not block it;
    one a worker thread takes (inside the kernel) is heard all the same within a moment."""
    from fedmc.core import parallel

    assert _heard_after(  # the workers are started by then
        lambda signum: signal.pthread_kill(parallel._workers[0].ident, signum)) < 2.0


def test_ordered_sum_adds_rows_in_order():
    rng = np.random.default_rng(0)
    part = rng.normal(size=(64, 3)) * 10.0 ** rng.integers(-8, 8, size=(64, 1))
    expected = np.zeros(3)
    for row in part:
        expected = expected + row
    assert np.array_equal(ordered_sum(part), expected)
    assert ordered_sum(part[:, 0]) == expected[0]


def test_sums_do_not_depend_on_the_threads(monkeypatch):
    rng = np.random.default_rng(1)
    m, n, r = 300, 40, 5
    counts = rng.integers(0, 12, size=m)
    indptr = np.concatenate(([0], np.cumsum(counts))).astype(np.int64)
    indices = rng.integers(0, n, size=indptr[-1]).astype(np.int64)
    values = rng.normal(size=indptr[-1])
    U, V = rng.normal(size=(m, r)), rng.normal(size=(n, r))
    args = (indptr, indices, values, U, V, 3.5, 1.1, 1.0, 5.0, rank_token(r))
    found = []
    for threads in ("1", "2", "5"):
        monkeypatch.setenv("NUMBA_NUM_THREADS", threads)
        found.append(residual_sums(*args))
    assert found[0] == found[1] == found[2]


@pytest.mark.parametrize("n", [0, 1, 2, 3, 10, 257])
def test_heap_sort_sorts_as_numpy(n):
    a = np.random.default_rng(n).integers(-50, 50, size=n)  # repeats too
    b = a.copy()
    heap_sort(b)
    assert np.array_equal(b, np.sort(a))
