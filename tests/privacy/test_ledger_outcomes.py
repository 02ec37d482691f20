"""A release's recorded outcome (``dpdist.privacy.ledger.outcomes``): a failure is recorded and
replayed, never redrawn under the same charge."""

from __future__ import annotations

import pytest

from dpdist.exceptions import SolverFailure
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss


def test_a_failed_release_is_not_redrawn_under_the_same_charge(tmp_path):
    acc = Accountant(tmp_path / "ledger.sqlite")
    acc.init_budget("d", 10.0, 1e-6)
    charge = Charge(PrivacyLoss.laplace(1.0), "laplace")
    draws = []

    def failing():
        draws.append("first")  # the noise was drawn; the failure itself is observed
        raise SolverFailure("could not certify")

    with pytest.raises(SolverFailure):
        acc.release("d", charge, "k", failing)
    try:
        acc.release("d", charge, "k", lambda: draws.append("second") or 1.0)
    except SolverFailure:
        pass  # replaying the recorded failure is fine
    assert draws == ["first"], "the retry drew fresh noise without a new charge"
    assert acc.status("d").releases == 1
