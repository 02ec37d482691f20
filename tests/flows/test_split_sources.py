"""A run whose source store is part of a split (a train or test half a run left in
``<output>/stores/``): its records are the source's, so its releases are charged to the source's
budget -- never to a fresh budget of their own (issue 12: the budget stays tied to the content)."""

from __future__ import annotations

import secrets
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from dpdist.data.split import key_id, split_store
from dpdist.data.store import open_store, write_store
from dpdist.exceptions import BudgetExceeded
from dpdist.flows.config import load_config
from dpdist.flows.ingest import store_summary
from dpdist.flows.plan import preflight
from dpdist.privacy.accountant import Accountant


def _halves(tmp_path: Path) -> Path:
    rng = np.random.default_rng(0)
    X = sp.random(400, 30, density=0.2, format="csr", random_state=1)
    write_store(tmp_path / "src", X, np.where(rng.random(400) < 0.5, -1.0, 1.0), task="binary", labels=[-1.0, 1.0])
    split_store(tmp_path / "src", tmp_path / "tr", tmp_path / "te", 0.5, KEYS[0])
    split_store(tmp_path / "tr", tmp_path / "tr-tr", tmp_path / "tr-te", 0.5, KEYS[1])
    return tmp_path


KEYS = [secrets.token_bytes(32), secrets.token_bytes(32)]


def test_a_half_and_a_half_of_a_half_are_charged_to_the_source(tmp_path: Path) -> None:
    root = _halves(tmp_path)
    source = open_store(root / "src").dataset_id
    for part in ("tr", "te", "tr-tr", "tr-te"):
        assert open_store(root / part).budget_id == source, part
        assert store_summary(str(root / part))["dataset"] == source, part


def test_the_plan_of_a_run_on_a_half_is_checked_against_the_sources_budget(tmp_path: Path) -> None:
    root = _halves(tmp_path)
    ledger = tmp_path / "l.sqlite"
    Accountant(ledger).init_budget(open_store(root / "src").dataset_id, 1.0, 1e-6, name="the-source")
    cfg = load_config(
        None,
        {
            "output": str(tmp_path / "out"),
            "ledger": str(ledger),
            "data": {"source": "store", "path": str(root / "tr")},
            "budget": {"epsilon": 20.0, "delta": 1e-6},
            "select": {"methods": ["dp-sis"]},
            "train": {"methods": []},
        },
    )
    summary = preflight(cfg)
    assert summary["checked_against"] == "ledger" and summary["dataset"] == "the-source", summary
    assert summary["epsilon_total"] == 1.0  # the source's budget, not the config's 20 for "new" data


def test_halves_are_reused_only_for_the_same_source_store(tmp_path: Path) -> None:
    from dpdist.flows.ingest import _is_split_of

    root = _halves(tmp_path)
    src, half = open_store(root / "src").dataset_id, open_store(root / "tr").dataset_id
    k0, k1 = key_id(KEYS[0]), key_id(KEYS[1])
    assert _is_split_of(str(root / "tr"), src, 0.5, k0) and _is_split_of(str(root / "tr-tr"), half, 0.5, k1)
    # the halves of the source are not the halves of its train half, though both are charged to the source
    assert not _is_split_of(str(root / "tr"), half, 0.5, k1) and not _is_split_of(str(root / "tr-tr"), src, 0.5, k0)
    # nor are halves made with another key (a ledger created anew): the split is f(record, the ledger's key)
    assert not _is_split_of(str(root / "tr"), src, 0.5, k1) and not _is_split_of(
        str(root / "tr"), src, 0.5, key_id(secrets.token_bytes(32))
    )
    assert KEYS[0].hex() not in str(open_store(root / "tr").meta)  # the key itself is never in a store


def test_the_plan_counts_a_halfs_legacy_budget_of_its_own(tmp_path: Path) -> None:
    from dpdist.privacy.loss import Charge, PrivacyLoss

    root = _halves(tmp_path)
    ledger = tmp_path / "l.sqlite"
    acc = Accountant(ledger)
    half = open_store(root / "tr")
    acc.init_budget(half.dataset_id, 1.0, 1e-6)  # as dpdist before 4cadcda let one do
    acc.release(half.dataset_id, Charge(PrivacyLoss.pure(0.9), "laplace"), "old", lambda: [1.0])
    acc.init_budget(half.budget_id, 1.0, 1e-6, name="the-source")
    cfg = load_config(
        None,
        {
            "output": str(tmp_path / "out"),
            "ledger": str(ledger),
            "data": {"source": "store", "path": str(root / "tr")},
            "select": {"methods": ["dp-sis"]},
            "train": {"methods": []},
        },
    )
    with pytest.raises(BudgetExceeded):  # 0.9 spent under the half's own budget + the plan > 1
        preflight(cfg)
    assert acc.status(half.budget_id).epsilon_spent == pytest.approx(0.9)
