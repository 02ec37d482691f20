"""An error raised in a flow's task on a Dask worker reaches the flow (and the command's exit code) as itself."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from flow_helpers import flow_env

FLOW = """
from prefect import flow, task
from prefect_dask import DaskTaskRunner

from dpdist.exceptions import BudgetExceeded


@task(persist_result=False)
def refuse():
    raise BudgetExceeded("ds", 1.0, 1e-6, 1.5, 2.5, 2.0, 1e-6)


runner = DaskTaskRunner(
    cluster_kwargs={"n_workers": 1, "threads_per_worker": 1, "processes": True, "dashboard_address": None}
)


@flow(task_runner=runner)
def refused():
    return refuse.submit().result()


try:
    refused()
except Exception as e:
    print("RAISED", type(e).__name__, e.epsilon_after if isinstance(e, BudgetExceeded) else None)
"""


def test_a_budget_refused_in_a_worker_task_reaches_the_flow_as_budget_exceeded(
    prefect_server: dict, tmp_path: Path
) -> None:
    """Two racing runs of one budget: the one refused inside a release task on a Dask worker exited 1,
    not 3 -- the worker's BudgetExceeded could not be unpickled in the flow (its ``__init__`` takes the
    figures, not the message) and became a TypeError. The flow now re-raises the refusal itself."""
    (tmp_path / "refused.py").write_text(FLOW)
    proc = subprocess.run(
        [sys.executable, str(tmp_path / "refused.py")],
        env=flow_env(tmp_path, prefect_server),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert "RAISED BudgetExceeded 2.5" in proc.stdout, (proc.stdout, proc.stderr[-3000:])
