"""A run's privacy plan: every release a config will make and what each costs, known before any work.

``dpdist run`` checks the plan against the ledger (or against the config's budget for data the
ledger does not know yet) before it generates, ingests or computes anything, and refuses with
exit code 3 when the budget cannot hold it; ``dpdist run --plan`` prints it. The charges are the
estimators' own ``privacy_charge()`` -- exactly what the flow will charge -- so the plan cannot
drift from the run.

The dataset is identified before ingest when its store already exists: a ``store`` source, or
the source store a previous run of the same config left in ``<output>/stores/source`` (its
recorded source parameters match the config's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpdist.defaults import bss_ridge
from dpdist.evaluation import PrivateEvaluation
from dpdist.exceptions import BudgetExceeded, UnknownDataset
from dpdist.flows.config import BSS_METHODS, RunConfig, store_paths
from dpdist.methods import get
from dpdist.privacy.accountant import Accountant, Release
from dpdist.privacy.filter import PrivacyFilter
from dpdist.privacy.loss import Charge, PrivacyLoss

__all__ = [
    "Planned",
    "plan",
    "preflight",
    "source_fingerprint",
    "known_source",
    "bss_selector",
    "make_selector",
    "evaluation",
    "recorded_train_count",
    "train_charge",
    "train_model",
    "train_params",
]

STORE_CLASSES = [-1.0, 1.0]  # a binary store's public labels (``store_target``'s mapping)


def bss_selector(cfg: RunConfig, method: str, seed: int | None = None) -> Any:
    """The best-subset selector of ``method`` (``bss-top-r`` or ``bss-mistakes``) from ``[select]``.

    The flow releases with this selector and the plan charges its ``privacy_charge()``: one
    constructor, so the plan and the run cannot differ. Its parameters are the registry's
    (:mod:`dpdist.methods`); an unset ``bss_ridge`` is the loss's default ridge.
    """
    if method not in BSS_METHODS:
        raise ValueError(f"not a best-subset method: {method!r} (one of {BSS_METHODS})")
    s = cfg.select
    entry = get(method)
    params = entry.estimator_params(s, cfg.data)
    if s.bss_ridge is None:
        params["ridge"] = bss_ridge(s.bss_loss)
    return entry.build(**params, random_state=seed)


def make_selector(cfg: RunConfig, method: str, n_blocks: int | None = None, seed: int | None = None) -> Any:
    """The selector of a ``select.methods`` entry (``n_blocks``: two-stage's public number of blocks,
    default ``select.n_blocks``): the one constructor of the plan and the select stage."""
    entry = get(method)
    if entry.kind == "best-subset":
        return bss_selector(cfg, method, seed)
    params = entry.estimator_params(cfg.select, cfg.data)
    if "n_blocks" in params and n_blocks is not None:  # two-stage's public number of blocks
        params["n_blocks"] = n_blocks
    return entry.build(**params, random_state=seed)


@dataclass(frozen=True)
class Planned:
    step: str
    method: str
    charge: Charge
    key_method: str = ""  # the method part of the release key the flow uses (``RunConfig.step_key``)

    def replays(self, cfg: RunConfig, rec: Release) -> bool:
        """Whether ``rec`` is (by its key's step and method, and its charge) this planned release,
        made by an earlier run of the same config: the run will replay it and spend nothing."""
        prefix = f"{cfg.name}/{self.step}/{self.key_method or self.method}/"
        return (
            rec.key.startswith(prefix)
            and rec.mechanism == self.charge.mechanism
            and rec.privacy_loss == self.charge.loss
        )

    def to_dict(self) -> dict[str, Any]:
        loss = self.charge.loss
        return {
            "step": self.step,
            "method": self.method,
            "mechanism": self.charge.mechanism,
            "epsilon": loss.epsilon,
            "delta": loss.delta,
            "form": loss.form,
            "rho": loss.rho,
            "loss": loss.describe(),
        }


def plan(
    cfg: RunConfig, task: str = "binary", n_features: int | None = None, n_records: int | None = None
) -> list[Planned]:
    """The releases of ``cfg`` in the order the flow makes them (``task``, ``n_features``: the data's,
    if known; the number of features is public and only the screening methods' charge in
    ``calibration = "paper"`` depends on it; ``n_records``: the gradient learners' public count, if
    known -- else ``cfg.train_records()``, else the count the run releases, planned as ``privacy_charge``
    plans it before it is known: :data:`dpdist.base.PLANNED_RECORDS`)."""
    out: list[Planned] = []
    n_records = n_records or cfg.train_records()
    if cfg.data.count_epsilon > 0:
        out.append(
            Planned(
                "counts", "laplace", Charge(PrivacyLoss.laplace(cfg.data.count_epsilon), "counts/laplace"), "laplace"
            )
        )
    s = cfg.select
    for method in s.methods:  # two-stage's number of blocks m is public in the flow: its charge does not depend on it
        sel = make_selector(cfg, method, n_blocks=s.n_blocks or 1)
        out.append(Planned("select", method, sel.privacy_charge()))
    t = cfg.train
    models = [(m, e) for m in cfg.train_methods() for e in t.epsilon]
    d = s.k if t.features != "all" else (n_features or cfg.data.d or cfg.data.n_features)
    for method, eps in models:
        out.append(
            Planned("train", f"{method} eps={eps:g}", train_charge(cfg, task, method, eps, d, n_records), method)
        )
    if not cfg.evaluate.public_test:
        for method, eps in models:
            ev = evaluation(cfg, task, method)
            out.append(Planned("evaluate", f"{method} eps={eps:g}", ev.privacy_charge(), method))
    return out


def train_params(
    cfg: RunConfig, task: str, method: str, epsilon: float, n_records: int | None, seed: int | None = None
) -> dict[str, Any]:
    """The estimator parameters of one train release (``[train]``'s and ``[data]``'s keys the method
    takes, at ``epsilon``; the store's public classes; the gradient learners' public count ``n_records``):
    the plan, the release's parameters and the worker's fit all build the estimator from these."""
    entry = get(method)
    params = entry.estimator_params(cfg.train, cfg.data)
    params["epsilon"] = epsilon
    if entry.counted:
        params["n_records"] = n_records
    if isinstance(params.get("screen_schedule"), (list, tuple)):
        params["screen_schedule"] = list(params["screen_schedule"])
    if task != "regression":  # the classes are store_target's public mapping, never those the train half holds
        params["classes"] = STORE_CLASSES
    return {**params, "random_state": seed}


def train_model(cfg: RunConfig, task: str, method: str, epsilon: float, n_records: int | None) -> Any:
    """The estimator of one train release (the registry builds it from :func:`train_params`)."""
    return get(method).build(task, **train_params(cfg, task, method, epsilon, n_records))


def train_charge(
    cfg: RunConfig, task: str, method: str, epsilon: float, n_features: int | None, n_records: int | None
) -> Charge:
    """What the train stage charges for one model (``n_records``: the gradient learners' public count):
    the plan and the flow call this one function, which asks the estimator (``privacy_charge``)."""
    return train_model(cfg, task, method, epsilon, n_records).privacy_charge(n_features=n_features)


def recorded_train_count(cfg: RunConfig, acc: Accountant, dataset: str) -> int | None:
    """The run's train count from its counts release recorded by an earlier run of ``cfg`` (a re-run
    replays it), as the gradient learners take it (``RunConfig.train_records``)."""
    import json

    for rec in acc.history(dataset):
        if rec.key.startswith(f"{cfg.name}/counts/") and rec.result is not None:
            result = json.loads(rec.result)
            if isinstance(result, dict) and "train" in result:
                return cfg.train_records(result)
    return None


def evaluation(cfg: RunConfig, task: str, method: str, seed: int | None = None) -> PrivateEvaluation:
    """The private evaluation of a model of ``method`` (a curve part for the methods the registry says:
    ``Method.curve``)."""
    e = cfg.evaluate
    curve = get(method).curve
    return PrivateEvaluation(task, e.epsilon, bins=e.bins, points=e.points, random_state=seed, curve=curve)


def source_fingerprint(cfg: RunConfig) -> dict[str, Any] | None:
    """What identifies the configured source's content without reading it (None for a ``store`` source).

    A synthetic set is fixed by its generator and parameters; an svmlight file by its path, size
    and modification time (as make and rsync do).
    """
    d = cfg.data
    if d.source == "synth":
        return {"synth": d.name, "n": d.n, "d": d.d, "seed": d.data_seed}
    if d.source == "svmlight":
        st = Path(d.path).stat()
        return {
            "svmlight": str(Path(d.path).resolve()),
            "size": st.st_size,
            "mtime_ns": st.st_mtime_ns,
            "n_features": d.n_features,
            "zero_based": d.zero_based,
            "task": d.task,
            "labels": None if d.labels is None else list(d.labels),
        }
    return None


def known_source(cfg: RunConfig) -> tuple[str, str, int] | None:
    """(content hash, task, number of features) of the configured source if its store exists already,
    else None."""
    from dpdist.data.store import open_store

    path = store_paths(cfg)["source"]
    if not Path(path).is_dir():
        return None
    try:
        store = open_store(path)
    except Exception:  # noqa: BLE001 - an unreadable leftover is rebuilt by the ingest stage
        return None
    if cfg.data.source != "store" and store.meta.get("source_fingerprint") != source_fingerprint(cfg):
        return None
    return store.budget_id, store.task, int(store.shape[1])  # a part of a split is charged to its source's budget


def _link_halves(cfg: RunConfig, acc: Accountant, dataset: str) -> None:
    """Link the legacy budgets of the run's split halves (and of a source store that is a half) to
    ``dataset`` before the check (``Accountant.budget_of``), as the run's first charge would: the
    check then counts what their records were charged under those budgets."""
    from dpdist.data.store import open_store

    paths = store_paths(cfg)
    for path in {paths["source"], paths["train"], paths["test"]}:
        try:
            store = open_store(path)
        except Exception:  # noqa: BLE001 - absent or unreadable: the run writes it anew
            continue
        if store.budget_id == dataset:  # halves a run of another source left are not this run's
            acc.budget_of(store)


def preflight(cfg: RunConfig) -> dict[str, Any]:
    """Check the plan before any work: ``BudgetExceeded`` (exit 3) or ``UnknownDataset`` (exit 2).

    Returns the plan's summary: its releases, the filter's and basic composition's totals, and what it
    was checked against.
    """
    known = known_source(cfg)
    acc = Accountant(cfg.ledger)
    n_records = recorded_train_count(cfg, acc, known[0]) if known and acc.has_budget(known[0]) else None
    task, n_features = (known[1], known[2]) if known else ("binary", None)
    steps = plan(cfg, task, n_features, n_records=n_records)
    charges = [p.charge for p in steps]
    summary: dict[str, Any] = {
        "releases": [p.to_dict() for p in steps],
        "epsilon_basic": math.fsum(c.epsilon for c in charges),
        "delta_basic": math.fsum(c.delta for c in charges),
    }
    if known and acc.has_budget(known[0]):
        _link_halves(cfg, acc, known[0])
        # a re-run of the same config replays what the ledger holds under its keys and spends nothing:
        # only the releases still to make are checked (the ledger checks each charge again when made)
        recorded = [r for r in acc.history(known[0]) if r.key.startswith(f"{cfg.name}/")]
        new = []
        for p in steps:
            match = next((r for r in recorded if p.replays(cfg, r)), None)
            if match is None:
                new.append(p.charge)
            else:
                recorded.remove(match)
        after = acc.check(known[0], *new)
        summary.update(
            checked_against="ledger",
            dataset=after.name,
            epsilon_total=after.epsilon_total,
            delta_total=after.delta_total,
            replayed=len(steps) - len(new),
            # inf: the ledger is past its filter already (releases an earlier rule admitted) and this
            # run only replays (anything new would be refused)
            epsilon_after=after.epsilon_spent if math.isfinite(after.epsilon_spent) else None,
        )
        return summary
    b = cfg.budget
    if b.epsilon is None:
        raise UnknownDataset(
            f"{cfg.source_file}: no privacy budget for this run's data: add a [budget] section (epsilon, delta; "
            "the budget is permanent) to the config, or ingest the data (dpdist ingest), set its budget "
            '(dpdist budget init STORE --epsilon E --delta D) and use data.source = "store"'
        )
    total = PrivacyFilter.for_budget(b.epsilon, b.delta).spent([c.loss for c in charges])[0]
    summary.update(checked_against="config budget", epsilon_total=b.epsilon, delta_total=b.delta, epsilon_after=total)
    if not total <= b.epsilon:
        planned = PrivacyLoss.compose(*(c.loss for c in charges))
        raise BudgetExceeded(b.name or "(new dataset)", planned.epsilon, planned.delta, 0.0, total, b.epsilon, b.delta)
    return summary
