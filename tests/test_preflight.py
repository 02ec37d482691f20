"""The pre-flight estimate: public values in, a simulated score out, and a warning near chance."""

from __future__ import annotations

import inspect

import numpy as np

from dpdist.preflight import estimate, synthetic_like


def test_it_takes_public_values_only():
    params = set(inspect.signature(estimate).parameters)
    public = {
        "task",
        "n_public",
        "n_features",
        "epsilon",
        "delta",
        "class_counts",
        "dense",
        "y_bound",
        "random_state",
        "count_scale",
    }
    assert params == public  # no X, no y


def test_a_hopeless_plan_is_flagged_and_a_comfortable_one_is_not():
    tiny = estimate("binary", 160, 3000, 0.5, 1e-6, (80.0, 80.0))
    assert tiny.near_chance and "WARNING" in tiny.message()
    big = estimate("binary", 20_000, 500, 5.0, 1e-6, (10_000.0, 10_000.0))
    assert not big.near_chance and big.private > big.chance + 0.05 and "WARNING" not in big.message()
    reg = estimate("regression", 20_000, 50, 2.0, 1e-6, dense=True, y_bound=2.0)
    assert reg.metric == "R^2" and reg.plan.learner == "adassp" and reg.private > 0.05


def test_the_synthetic_sets_have_the_declared_shape_and_class_share():
    rng = np.random.default_rng(0)
    X, y = synthetic_like("binary", 4000, 300, False, 0.1, rng)
    assert X.shape == (4000, 300) and abs(np.mean(y > 0) - 0.1) < 0.01
    X, y = synthetic_like("binary", 60, 1000, True, 0.3, rng)
    assert X.shape == (60, 1000) and 0 < np.mean(y > 0) < 1
    X, y = synthetic_like("regression", 500, 20, True, 0.5, rng, y_bound=3.0)
    assert X.shape == (500, 20) and np.mean(np.abs(y) <= 3.0) > 0.95
