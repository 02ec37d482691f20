"""The central accountant of a flow: one Prefect task, run in the flow process, charges every release.

Why a task in the flow process, not a Dask actor: the ledger is a SQLite file on the machine
that runs the flow, and it must outlive any worker. An actor lives on one worker and dies with
it, and SLURM workers need not see the flow's disk. Here the workers only compute; every
charge, every noisy draw of a selection and every record of a result happens in the flow
process, through ``Accountant.release`` (charge first, compute, record, return).

* A retried task (or a re-run of the same config) finds its key charged and recorded, and
  returns the recorded release: one charge never yields two different noisy results. A key
  reused with other parameters is refused (``ReleaseKeyConflict``).
* A solver that draws its noise on a Dask worker (``dpdist.pipelines.train``) runs inside ``compute``,
  after the charge. If its worker dies, Dask runs it again under the same charge; the first
  attempt's model never left the worker.
* A refused charge raises ``BudgetExceeded`` before anything is computed: the flow stops,
  nothing of that step is released, and the ledger is unchanged by it.

Raw aggregates (the un-noised X^T y, per-block LASSO supports) come from tasks with
``cache_policy=NO_CACHE`` and ``persist_result=False``: Prefect never stores or caches them,
even with ``PREFECT_RESULTS_PERSIST_BY_DEFAULT=true``. Release tasks are not cached by Prefect
either: the ledger is the one record of a release, and a retry is answered from it (a Prefect
cache keyed apart from the ledger could hand out a release the ledger in use never charged).
What Prefect may persist are the flows' summaries (paths, public names, release keys).

Datasets are passed between tasks by their content hash (``dataset``), which never leaves the
flow: logs, summaries, reports and artifacts name the dataset by its public name.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from dpdist.exceptions import UnknownDataset
from dpdist.methods import REGISTRY
from dpdist.privacy.accountant import Accountant, machine_failure
from dpdist.privacy.loss import Charge
from dpdist.utils.operator_log import timing

__all__ = ["release", "ensure_budget", "RAW", "SECRET_DURATION"]

# the mechanisms (their charges') whose duration reveals a secret of their guarantee: the registry's
# ``secret_duration`` methods (the private search's, which tells its number of runs)
SECRET_DURATION = frozenset(m.estimator_class().mechanism for m in REGISTRY.values() if m.secret_duration)


def _not_a_data_error(task: Any, task_run: Any, state: Any) -> bool:
    """Prefect's ``retry_condition_fn`` of the raw tasks: retry only what the machine causes (a
    lost worker or connection, an I/O error, memory: ``machine_failure``, the accountant's
    rule), never what the data or the config may cause (a bound or schema violation, a
    numpy or scikit-learn error on the data): those would fail the same way and leave a
    data-dependent "Retrying" state behind."""
    exc = getattr(state, "data", None)
    return isinstance(exc, BaseException) and machine_failure(exc)


# options of every task that returns an un-noised statistic of the data (or a content hash)
RAW: dict[str, Any] = {"cache_policy": NO_CACHE, "persist_result": False, "retry_condition_fn": _not_a_data_error}


@task(name="release", cache_policy=NO_CACHE, persist_result=False, retries=0)
def release(
    ledger_path: str | None,
    dataset: str,
    charge: Charge,
    key: str,
    compute: Callable[[], Any],
    params: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Charge ``charge`` to ``dataset`` under ``key``, then compute and record; see the module doc.

    Returns ``{"key", "epsilon", "delta", "form", "mechanism", "replayed", "result"}``. The flow's
    log (Prefect's run logger: stored by its server) gets the release's public parameters; the
    time the computation took goes to the operator's terminal only (``dpdist.utils.operator_log``),
    and only when the operator asked (``dpdist -v``) -- never for a release whose duration reveals a
    secret (``SECRET_DURATION``: the private search's number of runs).
    """
    acc = Accountant(ledger_path)
    logger = get_run_logger()
    before = {r.key for r in acc.history(dataset) if r.result is not None}
    timed = charge.mechanism not in SECRET_DURATION
    if key not in before and timed:  # progress on the operator's terminal: what is being computed now
        timing("release %s under %s: computing ...", charge.mechanism, key)
    t0 = time.perf_counter()
    result = acc.release(dataset, charge, key, compute, params)
    replayed = key in before
    if timed:
        timing(
            "release %s (%s) under %s: %.2f s",
            charge.mechanism,
            "replayed" if replayed else "computed",
            key,
            time.perf_counter() - t0,
        )
    status = acc.status(dataset)
    logger.info(
        "%s %s (%s) under %s; dataset %s spent epsilon=%.4g of %g",
        "replayed" if replayed else "released",
        charge.mechanism,
        charge.loss.describe(),
        key,
        status.name,
        status.epsilon_spent,
        status.epsilon_total,
    )
    return {
        "key": key,
        "epsilon": charge.epsilon,
        "delta": charge.delta,
        "form": charge.loss.form,
        "rho": charge.loss.rho,
        "mechanism": charge.mechanism,
        "replayed": replayed,
        "result": result,
    }


@task(name="budget", cache_policy=NO_CACHE, persist_result=False)
def ensure_budget(
    ledger_path: str | None, dataset: str, epsilon: float | None, delta: float | None, name: str | None = None
) -> dict[str, Any]:
    """Set the config's budget if the ledger has none for ``dataset``; return its public status.

    An existing budget is never changed here (``dpdist budget init`` sets budgets).
    """
    acc = Accountant(ledger_path)
    logger = get_run_logger()
    if not acc.has_budget(dataset):
        if epsilon is None or delta is None:  # the config gives both or neither
            raise UnknownDataset(
                f"no privacy budget for this run's data in {acc.path}; give [budget] epsilon and "
                "delta in the run config, or set one with `dpdist budget init STORE ...`"
            )
        status = acc.init_budget(dataset, epsilon, delta, name)
        logger.warning("budget set for dataset %s: epsilon=%g, delta=%g (permanent)", status.name, epsilon, delta)
    status = acc.status(dataset)
    logger.info(
        "ledger %s: dataset %s has epsilon %.4g of %g left",
        acc.path,
        status.name,
        status.epsilon_remaining,
        status.epsilon_total,
    )
    return status.to_dict()
