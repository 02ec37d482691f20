"""dpdist's errors cross process boundaries (a Dask worker to the flow) as themselves."""

from __future__ import annotations

import errno
import pickle

import pytest

from dpdist.data.svmlight import SvmlightFormatError
from dpdist.exceptions import BudgetExceeded, DPDistError, LedgerUnavailable, ParameterError, ReleaseRefused
from dpdist.flows.config.schema import ConfigError
from dpdist.selection.best_subset.base import Refusal


def _every_error() -> list[DPDistError]:
    return [
        BudgetExceeded("ds", 1.0, 1e-6, 0.5, 1.5, 1.0, 1e-6, deltas_past_basic=3e-7),
        SvmlightFormatError("a.svm", 7, "invalid literal for int() with base 10: '12x'"),
        Refusal("the test refused", kind="test"),
        LedgerUnavailable(errno.ENOSPC, "No space left on device"),
        ParameterError("--epsilon must be > 0"),
        ConfigError("run.toml: [train] epsilon: not a number"),
        ReleaseRefused("refused"),
    ]


@pytest.mark.parametrize("error", _every_error(), ids=lambda e: type(e).__name__)
def test_an_error_survives_a_pickle_round_trip_as_itself(error: DPDistError) -> None:
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is type(error)
    assert str(back) == str(error) and back.args == error.args
    assert back.__dict__ == error.__dict__


def test_a_ledger_error_keeps_its_file_across_a_pickle_round_trip() -> None:
    error = LedgerUnavailable(errno.EROFS, "Read-only file system", "/ledgers/l.sqlite")
    back = pickle.loads(pickle.dumps(error))
    assert type(back) is LedgerUnavailable and back.filename == "/ledgers/l.sqlite" and back.errno == errno.EROFS
    assert str(back) == str(error)
