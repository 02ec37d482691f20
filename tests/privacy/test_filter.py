"""The ledger's privacy filter (dpdist.privacy.filter): its rule, and that it is never looser than
composition with parameters fixed in advance."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dpdist.privacy.filter import PrivacyFilter
from dpdist.privacy.loss import PrivacyLoss, compose_epsilon


def _offset(alpha: float, delta: float) -> float:
    return math.log(1 - 1 / alpha) - math.log(delta * alpha) / (alpha - 1)


@pytest.mark.parametrize("epsilon, delta", [(0.5, 1e-8), (1.0, 1e-6), (15.0, 1e-6), (3.0, 1e-5)])
def test_the_order_spends_a_zcdp_budget_exactly(epsilon: float, delta: float):
    f = PrivacyFilter.for_budget(epsilon, delta)
    alpha = f.order
    rho = (epsilon - _offset(alpha, delta / 2)) / alpha  # the largest rho route (R) admits
    assert f.admits([PrivacyLoss.zcdp(rho * (1 - 1e-9), 1e-6)])
    assert not f.admits([PrivacyLoss.zcdp(rho * (1 + 1e-6), 1e-6)])
    # at that rho the best order of the grid converts to epsilon too: a fixed order loses nothing
    # for a sequence that spends the whole budget
    assert compose_epsilon([PrivacyLoss.zcdp(rho, delta / 2)], delta / 2, basic=False) == pytest.approx(
        epsilon, rel=1e-9
    )


def test_the_order_is_the_budgets_not_the_sequences():
    f = PrivacyFilter.for_budget(2.0, 1e-6)
    laplace = [PrivacyLoss.laplace(0.05, 30)] * 2  # a sequence whose best order differs from alpha*
    eps, dlt = f.spent(laplace)
    assert eps < 3.0  # below basic composition's sum: route (R)
    s = 60 * _laplace_rdp(0.05, f.order)
    assert eps == pytest.approx(s + _offset(f.order, 5e-7), rel=1e-9) and dlt == 5e-7
    assert eps > compose_epsilon(laplace, 1e-6, basic=False)  # the after-the-fact best order says less


def _laplace_rdp(eps: float, alpha: float) -> float:
    """Mironov 2017, Table II: the Renyi divergence of Laplace noise of scale 1/eps at order alpha."""
    return math.log(
        alpha / (2 * alpha - 1) * math.exp((alpha - 1) * eps) + (alpha - 1) / (2 * alpha - 1) * math.exp(-alpha * eps)
    ) / (alpha - 1)


def test_pure_releases_add_their_epsilons():
    f = PrivacyFilter.for_budget(1.0, 1e-6)
    assert f.spent([PrivacyLoss.pure(0.4), PrivacyLoss.bounded_range(0.1, 3)]) == (pytest.approx(0.7), 0.0)
    assert f.admits([PrivacyLoss.pure(0.5)] * 2) and not f.admits(
        [PrivacyLoss.pure(0.5)] * 2 + [PrivacyLoss.pure(0.01)]
    )
    # releases with a delta add too, without a conversion, their deltas within delta / 4
    assert f.spent([PrivacyLoss.approx(0.3, 2e-7), PrivacyLoss.pure(0.2)]) == (pytest.approx(0.5), 2e-7)
    assert f.spent([PrivacyLoss.approx(0.3, 3e-7)] * 2) == (math.inf, 1e-6)  # 6e-7 > delta / 4 (both routes)
    # standalone deltas 3e-7 > delta / 4, approximate ones 1e-7: route (R), with delta / 2 for its conversion
    assert f.spent([PrivacyLoss.gaussian(20.0, 2e-7), PrivacyLoss.approx(0.3, 1e-7)])[1] == pytest.approx(1e-7 + 5e-7)
    # a model whose delta comes from its zCDP conversion, with a pure selection (dpdist run's full-size plans)
    big = PrivacyFilter.for_budget(5.0, 1e-5)
    model = PrivacyLoss.bounded_range(0.05, 200, delta=1e-7)
    assert model.delta == 1e-7 and big.spent([model, PrivacyLoss.pure(0.5)]) == (
        pytest.approx(model.epsilon + 0.5),
        1e-7,
    )
    assert (
        PrivacyFilter.for_budget(1.0, 0.0).spent([PrivacyLoss.gaussian(5.0, 1e-7)])[0] == math.inf
    )  # no route (R) at delta 0


def _random_loss(rng: np.random.Generator) -> PrivacyLoss:
    kind = rng.integers(6)
    eps = float(rng.uniform(0.01, 0.6))
    if kind == 0:
        return PrivacyLoss.pure(eps)
    if kind == 1:
        return PrivacyLoss.bounded_range(eps / 10, int(rng.integers(1, 200)), delta=1e-7)
    if kind == 2:
        return PrivacyLoss.laplace(eps, int(rng.integers(1, 5)))
    if kind == 3:
        return PrivacyLoss.gaussian(float(rng.uniform(2, 40)), 1e-7)
    if kind == 4:
        return PrivacyLoss.approx(eps, float(rng.uniform(0, 2e-7)))
    return PrivacyLoss.compose(PrivacyLoss.approx(eps, 1e-8), PrivacyLoss.gaussian(float(rng.uniform(5, 40)), 1e-7))


def _fixed_in_advance(losses: list[PrivacyLoss], delta: float) -> float:
    """The rule the ledger used before: the better of basic and tight composition at the best order."""
    return compose_epsilon(losses, delta)


def test_never_looser_than_composition_fixed_in_advance_and_monotone():
    rng = np.random.default_rng(7)
    for budget in [(1.0, 1e-6), (5.0, 1e-5), (15.0, 1e-6)]:
        f = PrivacyFilter.for_budget(*budget)
        for _ in range(60):
            losses = [_random_loss(rng) for _ in range(int(rng.integers(1, 8)))]
            spent = [f.spent(losses[: i + 1])[0] for i in range(len(losses))]
            assert spent == sorted(spent)  # a release never lowers it: the proof's step 3 needs this
            assert spent[-1] >= _fixed_in_advance(losses, budget[1]) * (1 - 1e-12)


def test_status_and_filter_agree(tmp_path):
    from dpdist.privacy.accountant import Accountant
    from dpdist.privacy.loss import Charge

    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 2.0, 1e-6)
    # three standalone deltas of 1e-7 exceed delta / 4: route (R), whose delta is the approximate one plus delta / 2
    losses = [PrivacyLoss.gaussian(8.0, 1e-7)] * 2 + [PrivacyLoss.pure(0.2), PrivacyLoss.approx(0.1, 1e-7)]
    for i, loss in enumerate(losses):
        acc.charge("ds", Charge(loss, "m"), f"r{i}")
    s = acc.status("ds")
    assert (s.epsilon_spent, s.delta_spent) == PrivacyFilter.for_budget(2.0, 1e-6).spent(losses)
    assert s.delta_spent == pytest.approx(1e-7 + 5e-7)


def test_approximate_deltas_beyond_a_quarter_are_refused():
    f = PrivacyFilter.for_budget(1.0, 1e-6)
    assert f.admits([PrivacyLoss.approx(0.1, 1.25e-7)] * 2)  # 2.5e-7: exactly delta / 4
    # 4e-7, within delta / 2 but not delta / 4: refused by both routes, however small the epsilons
    assert not f.admits([PrivacyLoss.approx(0.01, 2e-7)] * 2)
    assert not f.admits([PrivacyLoss.gaussian(50.0, 1e-7)] * 2 + [PrivacyLoss.approx(0.01, 2e-7)] * 2)


def test_the_boundary_is_refused_and_the_figure_rounds_up():
    f = PrivacyFilter.for_budget(1.0, 1e-6)
    rho = (1.0 - _offset(f.order, 5e-7)) / f.order
    assert not f.admits([PrivacyLoss.zcdp(rho, 1e-6)])  # S = B exactly in floating point: not admitted
    assert f.admits([PrivacyLoss.zcdp(rho * (1 - 1e-9), 1e-6)])


def test_a_sequence_moves_from_basic_to_renyi_composition_and_each_route_only_grows():
    from dpdist.privacy.filter import _rdp_at

    f = PrivacyFilter.for_budget(3.0, 1e-6)
    seq = [PrivacyLoss.pure(0.2), PrivacyLoss.laplace(0.1)] + [PrivacyLoss.gaussian(10.0, 1e-7)] * 4
    figures = [f.spent(seq[: i + 1]) for i in range(len(seq))]
    assert figures[0] == (0.2, 0.0) and figures[1] == (pytest.approx(0.3), 0.0)  # basic while its deltas fit
    assert figures[-1][1] == 5e-7  # three deltas of 1e-7 are past delta / 4: the Renyi route, delta / 2
    assert [e for e, _ in figures] == sorted(e for e, _ in figures)
    s = [_rdp_at(seq[: i + 1], f.order) for i in range(len(seq))]
    assert s == sorted(s) and s[0] > 0  # route (R)'s sum on its own never falls


def test_repeat_and_select_is_read_at_the_order_from_the_whole_grid():
    from dp_accounting import dp_event
    from dp_accounting.rdp.rdp_privacy_accountant import RdpAccountant

    from dpdist.privacy.filter import _rdp_at
    from dpdist.privacy.loss import ORDERS

    f = PrivacyFilter.for_budget(1.0, 1e-6)
    inner = PrivacyLoss.gaussian(30.0, 1e-7)
    picked = PrivacyLoss.repeat_and_select(inner, mean=10.0, shape=float("inf"), delta=1e-7)  # Poisson
    grid = RdpAccountant(orders=ORDERS)
    grid.compose(dp_event.RepeatAndSelectDpEvent(dp_event.ZCDpEvent(1 / (2 * 30.0**2)), 10.0, float("inf")))
    one = RdpAccountant(orders=(f.order,))
    one.compose(dp_event.RepeatAndSelectDpEvent(dp_event.ZCDpEvent(1 / (2 * 30.0**2)), 10.0, float("inf")))
    assert _rdp_at([picked], f.order) == pytest.approx(grid.rdp[ORDERS.index(f.order)], rel=1e-12)
    assert _rdp_at([picked], f.order) < one.rdp[0]  # at one order alone dp-accounting's bound is looser


def test_a_check_with_nothing_new_never_refuses(tmp_path):
    """A ledger already past its filter (releases admitted by an earlier rule) can still be read and
    re-checked with nothing new; anything new is refused."""
    from dpdist.exceptions import BudgetExceeded
    from dpdist.privacy.accountant import Accountant
    from dpdist.privacy.loss import Charge

    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("ds", 1.0, 1e-6)
    import sqlite3

    con = sqlite3.connect(acc.path)  # as an earlier rule admitted them: over this filter's figure
    loss = PrivacyLoss.bounded_range(0.05, 37, delta=1e-6)
    for i in range(2):
        con.execute(
            "INSERT INTO releases (dataset, key, time, mechanism, epsilon, delta, loss) VALUES "
            "('ds', ?, '2026-01-01', 'em', ?, ?, ?)",
            (f"old{i}", loss.epsilon, loss.delta, loss.to_json()),
        )
    con.commit()
    con.close()
    assert acc.status("ds").epsilon_spent > 1.0
    assert acc.check("ds").releases == 2
    with pytest.raises(BudgetExceeded):
        acc.check("ds", Charge(PrivacyLoss.pure(1e-6), "tiny"))
