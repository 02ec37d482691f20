"""The raw tasks retry what the machine may cause, never dpdist's own (data- or config-made) refusals."""

from __future__ import annotations

import pytest
from prefect.states import Failed

import dpdist.flows.ingest
import dpdist.flows.select
from dpdist.exceptions import ParameterError, SolverAborted
from dpdist.flows.release import RAW, _not_a_data_error


@pytest.mark.parametrize(
    "exc, retried",
    [
        (OSError("disk"), True),
        (MemoryError(), True),
        (ImportError("numba"), True),
        (__import__("distributed").client.ClosedClientError(), True),
        (ParameterError("a bound"), False),
        (SolverAborted("limit"), False),
        (KeyError("k"), False),
        (ValueError("Found array with 0 sample(s)"), False),
    ],
)
def test_raw_tasks_retry_only_what_the_data_cannot_cause(exc: Exception, retried: bool) -> None:
    assert _not_a_data_error(None, None, Failed(data=exc)) is retried


def test_every_raw_task_with_retries_has_the_condition() -> None:
    tasks = [
        dpdist.flows.ingest.make_source,
        dpdist.flows.ingest.public_test,
        dpdist.flows.ingest.split,
        dpdist.flows.select.xty_scores,
        dpdist.flows.select.two_stage_votes,
    ]
    assert all(t.retries >= 1 and t.retry_condition_fn is _not_a_data_error for t in tasks)
    assert RAW["retry_condition_fn"] is _not_a_data_error
