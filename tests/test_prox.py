"""Every prox against a brute-force minimization of R(z) + ||z - x||^2 / (2 t)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize_scalar

from fedmc.core.prox import REG_KINDS, Regularizer
from fedmc.errors import ConfigError

finite = st.floats(-5, 5, allow_nan=False)


def brute_prox(reg: Regularizer, x: float, t: float) -> float:
    lo, hi = -20.0, 20.0
    if reg.kind == "nonneg":
        lo = 0.0
    if reg.kind == "box":
        lo, hi = reg.lo, reg.hi
    res = minimize_scalar(
        lambda z: reg.value(np.array([z])) + (z - x) ** 2 / (2 * t),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-11},
    )
    return res.x


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(REG_KINDS),
    x=finite,
    t=st.floats(0.01, 3),
    lam=st.floats(0, 2),
    ratio=st.floats(0, 1),
)
def test_prox_matches_brute_force(kind, x, t, lam, ratio):
    reg = Regularizer(kind, lam, ratio=ratio, lo=-0.5, hi=1.5)
    got = reg.prox(np.array([x]), t)[0]
    assert got == pytest.approx(brute_prox(reg, x, t), abs=1e-6)


def test_prox_closed_forms_of_the_paper():
    x = np.array([-2.0, -0.1, 0.0, 0.3, 4.0])
    # (66)/(68): l2 squared shrinks by 1 / (1 + t lam)
    assert np.allclose(Regularizer("l2", 2.0).prox(x, 0.5), x / 2.0)
    # (72): soft thresholding
    assert np.allclose(Regularizer("l1", 1.0).prox(x, 0.2), [-1.8, 0.0, 0.0, 0.1, 3.8])


def test_values():
    x = np.array([-1.0, 2.0])
    assert Regularizer("l2", 2.0).value(x) == pytest.approx(5.0)
    assert Regularizer("l1", 2.0).value(x) == pytest.approx(6.0)
    assert Regularizer("nonneg").value(x) == np.inf
    assert Regularizer("box", lo=-1, hi=2).value(x) == 0.0


@pytest.mark.parametrize(
    "kwargs", [{"kind": "l3"}, {"kind": "l2", "lam": -1}, {"kind": "box", "lo": 2, "hi": 1}]
)
def test_bad_settings_are_refused(kwargs):
    with pytest.raises(ConfigError):
        Regularizer(**kwargs)
