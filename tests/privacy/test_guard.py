"""No private fit without an accountant unless the caller opts out (dpdist.privacy.guard)."""

from __future__ import annotations

import numpy as np
import pytest

from dpdist import unaccounted
from dpdist.exceptions import ParameterError, UnaccountedReleaseWarning
from dpdist.gradient_models import DPSGDClassifier
from dpdist.linear_model import DPFrankWolfeClassifier
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.guard import _MODE
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.selection.sis import DPSIS
from dpdist.solvers.objective_perturbation import ObjectivePerturbation


@pytest.fixture
def strict():
    """Outside the tests' own opt-out (tests/conftest.py): as a user's script runs."""
    token = _MODE.set(None)
    yield
    _MODE.reset(token)


@pytest.fixture
def data():
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, (200, 5))
    return X, np.where(X[:, 0] > 0, 1.0, -1.0)


@pytest.mark.parametrize(
    "make",
    [
        lambda: DPFrankWolfeClassifier(epsilon=1.0, max_iter=10),
        lambda: DPSGDClassifier(epochs=1, n_records=200),
        lambda: DPSIS(k=2, epsilon=1.0),
        lambda: ObjectivePerturbation(loss="logistic", epsilon=1.0),
    ],
)
def test_a_private_fit_without_an_accountant_refuses_unless_opted_out(strict, data, make, monkeypatch, tmp_path):
    X, y = data
    with pytest.raises(ParameterError, match="without an accountant.*dpdist.unaccounted"):
        make().fit(X, y)
    with unaccounted(), pytest.warns(UnaccountedReleaseWarning, match="nothing was charged"):
        make().fit(X, y)
    monkeypatch.setenv("DPDIST_UNACCOUNTED", "1")  # the same opt-out for a whole experiment process
    with pytest.warns(UnaccountedReleaseWarning):
        make().fit(X, y)
    monkeypatch.delenv("DPDIST_UNACCOUNTED")
    acc = Accountant(tmp_path / "l.sqlite")  # inside a release its caller charged: no refusal, no warning
    acc.init_budget("d", 5.0, 1e-6)
    est = make()
    acc.release("d", Charge(PrivacyLoss.pure(1.0), "outer"), "k", lambda: est.fit(X, y) and [1])
    assert acc.history("d")[0].result == "[1]"


def test_a_non_private_baseline_needs_no_accountant(strict, data):
    X, y = data
    DPFrankWolfeClassifier(method="fast-fw", max_iter=10).fit(X, y)
