"""A run's "public" test set is scored exactly, so data with a privacy budget is refused as one."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from dpdist.exceptions import ParameterError
from dpdist.flows.config import store_paths
from dpdist.flows.ingest import check_public_test, public_test_store
from dpdist.privacy.accountant import Accountant


def _cfg(tmp_path: Path, public: str) -> SimpleNamespace:
    return SimpleNamespace(
        ledger=str(tmp_path / "l.sqlite"),
        source_file="run.toml",
        output=str(tmp_path / "out"),
        evaluate=SimpleNamespace(public_test=public),
        data=SimpleNamespace(source="synth"),
    )


def test_private_data_is_refused_as_a_public_test_set(tmp_path: Path) -> None:
    cfg = _cfg(tmp_path, str(tmp_path / "t.svm"))
    Accountant(cfg.ledger).init_budget("other-private", 1.0, 1e-6)
    for public in ("run-data", "other-private"):  # the run's own data (or a half of it), another private set
        with pytest.raises(ParameterError, match="run.toml: evaluate.public_test: .* privacy budget"):
            check_public_test(cfg, {"dataset": public}, "run-data")
    check_public_test(cfg, {"dataset": "public-set"}, "run-data")


def test_a_public_test_store_is_read_where_it_is(tmp_path: Path) -> None:
    (tmp_path / "store").mkdir()
    assert public_test_store(_cfg(tmp_path, str(tmp_path / "store"))) == str(tmp_path / "store")
    cfg = _cfg(tmp_path, str(tmp_path / "t.svm"))
    assert public_test_store(cfg) == store_paths(cfg)["public_test"]
