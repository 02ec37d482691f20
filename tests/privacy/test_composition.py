"""Composition helpers: the seeds' formulas in both directions, checked against the exact bound."""

from __future__ import annotations

import math

import pytest

from dpdist.exceptions import ParameterError
from dpdist.privacy.composition import (
    Budget,
    advanced_composition,
    advanced_step_budget_split,
    advanced_step_epsilon,
    basic_composition,
    rnm_paper_true_epsilon,
)


def test_basic_composition_sums_exactly():
    total = basic_composition([(0.1, 1e-7)] * 10)
    assert total == Budget(1.0, 1e-6)
    assert basic_composition([Budget(0.5), Budget(0.25, 1e-5)]) == Budget(0.75, 1e-5)


def test_basic_composition_refuses_delta_one():
    with pytest.raises(ParameterError, match="delta"):
        basic_composition([(1.0, 0.6), (1.0, 0.6)])


def test_advanced_composition_formula():
    eps0, k, slack, d0 = 0.01, 500, 1e-6, 1e-9
    got = advanced_composition(eps0, k, slack, delta_step=d0)
    assert got.epsilon == pytest.approx(eps0 * math.sqrt(2 * k * math.log(1 / slack)) + k * eps0 * math.expm1(eps0))
    assert got.delta == pytest.approx(k * d0 + slack)


def test_seed004_step_epsilon_and_its_exact_total():
    # spec 1.4: eps = 4.9, T = 1000, delta = 1/4000 -> per step eps/sqrt(8 T ln(1/delta)), exact total 2.82
    eps0 = advanced_step_epsilon(4.9, 1 / 4000, 1000)
    assert eps0 == pytest.approx(4.9 / math.sqrt(8 * 1000 * math.log(4000)))
    assert advanced_composition(eps0, 1000, 1 / 4000).epsilon == pytest.approx(2.82, abs=0.005)


def test_step_epsilon_refuses_when_shortcut_is_invalid():
    # eps far above 4 ln(1/delta): the shortcut's exact bound exceeds the target
    with pytest.raises(ParameterError, match="exact advanced-composition bound"):
        advanced_step_epsilon(60.0, 1e-2, 50)
    # so far above that e^eps0 overflows a double: still the same clear refusal
    with pytest.raises(ParameterError, match="exact advanced-composition bound"):
        advanced_step_epsilon(1e9, 1e-3, 150)
    with pytest.raises(ParameterError, match="overflows"):
        advanced_composition(800.0, 3, 1e-6)


@pytest.mark.parametrize(("eps", "delta", "T", "expected"), [(1.0, 1e-6, 4000, 1.036), (4.9, 1 / 4000, 1000, 6.38)])
def test_paper_mode_true_epsilon(eps, delta, T, expected):
    # spec 2.2 FLAG, checked values
    assert rnm_paper_true_epsilon(eps, delta, T).epsilon == pytest.approx(expected, abs=0.005)


@pytest.mark.parametrize("n_steps", [1, 20, 1000])
def test_seed001_split(n_steps):
    eps, delta = 2.5, 1 / 6000
    step = advanced_step_budget_split(eps, delta, n_steps)
    assert step.delta == pytest.approx(delta / (n_steps + 1))
    assert step.epsilon == pytest.approx(eps / (2 * math.sqrt(2 * n_steps * math.log(1 / step.delta))))
    total = advanced_composition(step.epsilon, n_steps, step.delta, delta_step=step.delta)
    assert total.delta == pytest.approx(delta)
    # spec 3.3: the exact total is about 1.3, well within the target 2.5
    assert 1.25 <= total.epsilon <= 1.35


@pytest.mark.parametrize(
    "call",
    [
        lambda: advanced_step_epsilon(0.0, 1e-6, 10),
        lambda: advanced_step_epsilon(1.0, 0.0, 10),
        lambda: advanced_step_epsilon(1.0, 1e-6, 0),
        lambda: advanced_step_epsilon(float("nan"), 1e-6, 10),
        lambda: advanced_step_budget_split(1.0, 1.0, 10),
        lambda: advanced_composition(-0.1, 10, 1e-6),
        lambda: advanced_composition(0.1, 10, 1e-6, delta_step=float("nan")),
        lambda: Budget(-1.0),
    ],
)
def test_bad_parameters(call):
    with pytest.raises(ParameterError):
        call()
