"""``dpdist train`` with a Frank-Wolfe method (dpdist.linear_model), with or without DP screening.

A private fit checks its whole charge (the model and the held-out metrics) against the budget
before the data is read; a non-private one (fw, fast-fw) must be confirmed with ``--non-private``
and charges nothing.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

from dpdist.cli._common import (
    EXIT_OK,
    CommandPlan,
    _check_held_out,
    _metric_text,
    _noise_seed,
    _progress_bar,
    _release_held_out,
    _release_key,
    _reported_metrics,
    _selected,
    _write_result,
    command_delta,
)
from dpdist.exceptions import ParameterError
from dpdist.methods import get
from dpdist.utils.operator_log import timing

if TYPE_CHECKING:
    from dpdist.data.store import SparseStore
    from dpdist.privacy.accountant import Accountant


class _Options(NamedTuple):
    """The checked Frank-Wolfe options: the screening (None: none), whether the fit is private, the
    screening's schedule and its other options (those given)."""

    screening: str | None
    private: bool
    schedule: Any
    screen_opts: dict[str, Any]


def _train_frank_wolfe(args: argparse.Namespace) -> int:
    """``dpdist train`` for the Frank-Wolfe methods (dp-fw, fast-dp-fw, fw, fast-fw, rnm-screen, adp-screen)."""
    import time
    import uuid

    import numpy as np

    from dpdist.data.store import check_schema, open_store
    from dpdist.released import table_schema, user_labels

    opts = _frank_wolfe_options(args)
    store = open_store(args.store)
    if opts.private:
        check_schema(store)
    from dpdist.privacy.accountant import Accountant

    acc = Accountant(args.ledger) if opts.private else None
    status = acc.status(acc.budget_of(store)) if acc is not None else None  # no budget: fail before work
    budget_name = status.name if status is not None else None
    name = budget_name if budget_name is not None else store.name
    plan = _plan(args, status.delta_total) if status is not None else None
    args.loss = args.loss or ("squared" if store.task == "regression" else "logistic")
    if args.loss == "logistic" and store.task != "binary":
        raise ParameterError(f"--loss logistic needs a binary store; {args.store} is {store.task}")
    # the classes are store_target's public mapping, never those the train rows happen to hold (a
    # train part with one class must not refuse before the charge: that refusal would be data-dependent)
    labels, classes = user_labels(store) if args.loss == "logistic" else (None, None)
    model = _frank_wolfe_model(args, opts, classes, plan)  # bad parameters: exit 2 before any work
    chosen = _selected(args.features) if args.features else None
    key = (
        _release_key(args, "train", args.method, budget_name)
        if budget_name is not None
        else f"train-{args.method}-{uuid.uuid4().hex}"
    )
    replayed = acc is not None and acc.recorded(store.budget_id, key)
    if acc is not None and plan is not None:  # a refused budget: exit 3 before the data is read
        _precheck(args, opts, model, acc, store, chosen, plan, replayed)
    n_features, (Xtr, ytr), (Xte, yte), columns = _split(args, store, acc, labels, chosen)
    print(f"{args.method}: {args.iters} iterations ...", file=sys.stderr)
    t0 = time.perf_counter()
    with _progress_bar(args, f"{args.method}: iterations", args.iters, count=True) as update:
        model.fit(
            Xtr,
            ytr,
            acc,
            store.budget_id if acc else None,
            key if acc else None,
            progress=lambda done, total: update(done),
            columns=columns,
            schema=table_schema(store.meta),
        )
    seconds = time.perf_counter() - t0
    timing("%s: %.2f s, %.4f ms/iteration", args.method, seconds, 1e3 * seconds / args.iters)
    w = model.coef_.ravel()  # (1, d) for a classifier
    coef = {"indices": np.flatnonzero(w).tolist(), "values": w[w != 0].tolist()}
    payload = _frank_wolfe_payload(args, model, opts, coef, n_features, name)
    if acc is not None and plan is not None:
        _add_charge(args, payload, model, opts, acc, key, replayed)
        payload.update(delta=plan.delta, plan=plan.to_dict())
    else:  # a non-private run: its timing is the operator's own
        payload.update(seconds=round(seconds, 4), seconds_per_iter=seconds / args.iters)
    if args.test_fraction > 0:
        payload.update(_held_out_metrics(args, model, coef, n_features, Xte, yte, acc, store.budget_id, key))
    record = getattr(model, "release_record_", None) if acc is not None else None
    _write_result(args, payload, coef, record, lambda: _frank_wolfe_text(args, payload, acc, key, replayed, plan))
    return EXIT_OK


def _frank_wolfe_text(
    args: argparse.Namespace,
    payload: dict[str, Any],
    acc: Accountant | None,
    key: str,
    replayed: bool,
    plan: CommandPlan | None,
) -> str:
    """The fit's result in words: its held-out metrics, its number of weights, its charge."""
    metric = _metric_text(payload)
    where = (
        f"; {plan.charged_text(replayed, key, payload['true_epsilon'])}, in {acc.path}"
        if acc is not None and plan is not None
        else " (non-private: nothing charged)"
    )
    return (
        f"{args.method} ({args.loss}, lam={args.lam:g}, T={args.iters}): {metric}, "
        f"{payload['nnz_weights']} non-zero "
        f"weights (density {payload['density']:.3g}){where}"
    )


def _split(
    args: argparse.Namespace, store: SparseStore, acc: Accountant | None, labels: Any, chosen: list[int] | None
) -> tuple[int, tuple[Any, Any], tuple[Any, Any], tuple[list[int], int] | None]:
    """(the store's number of columns, the train rows, the held-out rows, the chosen columns or None).

    Each record's side comes from its own content and a key: the dataset's secret key, derived for
    the train command (a part of a run's split splits again), or a random key for a non-private fit.
    The train rows keep the ``--features`` columns only; the held-out rows keep all the columns (the
    released model is stated in the store's columns).
    """
    import secrets

    import numpy as np

    from dpdist.data.split import derive_key, record_sides
    from dpdist.selection.sis import store_target

    X, y = store.csr(), store_target(store)
    split_key = (
        derive_key(acc.split_key(store.budget_id), "dpdist train") if acc is not None else secrets.token_bytes(32)
    )
    test = record_sides(X, y, split_key, args.test_fraction) if args.test_fraction > 0 else np.zeros(X.shape[0], bool)
    Xte, yte = X[test], y[test]  # all the columns: the released model is stated in the store's columns
    Xtr, ytr = X[~test], (labels[~test] if labels is not None else y[~test])
    columns = None
    if chosen is not None:
        columns = ([int(j) for j in chosen], int(X.shape[1]))
        Xtr = Xtr[:, np.asarray(chosen, dtype=np.int64)]
    return int(X.shape[1]), (Xtr, ytr), (Xte, yte), columns


def _frank_wolfe_options(args: argparse.Namespace) -> _Options:
    """Check the Frank-Wolfe and screening options (exit 2 before anything is read)."""
    if args.lam is None or args.iters is None:
        raise ParameterError(f"--method {args.method} (Frank-Wolfe) needs --lam and --iters")
    entry = get(args.method)
    screening, private = entry.defaults.get("screening"), entry.private
    if not private and not args.non_private:
        raise ParameterError(
            f"--method {args.method} releases an un-noised model of the data; "
            "pass --non-private to confirm (nothing is charged to the ledger)"
        )
    _check_held_out(args)
    screen_opts = {
        k: getattr(args, k)
        for k in ("screen_epsilon", "screen_delta", "screen_rho", "n_max")
        if getattr(args, k) is not None
    }
    if args.screen_every is not None and args.screen_at is not None:
        raise ParameterError("give --screen-every or --screen-at, not both")
    if screening is None and (screen_opts or args.screen_every is not None or args.screen_at is not None):
        raise ParameterError(
            f"--screen-* and --n-max are options of --method rnm-screen|adp-screen, not of {args.method}"
        )
    schedule: Any = 1 if args.screen_every is None else args.screen_every
    if args.screen_at is not None:
        try:
            schedule = [int(t) for t in args.screen_at.split(",")]
        except ValueError:
            raise ParameterError(
                f"--screen-at must be a comma-separated list of iterations, got {args.screen_at!r}"
            ) from None
    return _Options(screening, private, schedule, screen_opts)


def _plan(args: argparse.Namespace, budget_delta: float) -> CommandPlan:
    """The command's ``--epsilon``/``--delta`` split: its held-out metrics, its screening and the model, which gets
    the rest (shown on stderr before anything is charged).

    The screening's part is ``--screen-epsilon`` (at ``--screen-delta``), or ``--screen-rho`` converted to the
    epsilon it is stated at: at half the command's basic share of delta, the other half the model's (the
    estimator states a zCDP screening at the model's delta)."""
    from dpdist.privacy.filter import PrivacyFilter
    from dpdist.privacy.loss import PrivacyLoss

    delta = command_delta(args, budget_delta)
    fixed = [("its held-out metrics", float(args.eval_epsilon))] if args.test_fraction > 0 else []
    screen_delta = float(args.screen_delta or 0.0)
    if args.screen_epsilon is not None:
        fixed.insert(0, ("its screening", float(args.screen_epsilon)))
    elif args.screen_rho is not None and args.screen_rho > 0 and delta > 0:  # (a bad rho or delta: refused after)
        screen_delta = PrivacyFilter.basic_share * delta / 2.0
        rho_epsilon = PrivacyLoss.zcdp(float(args.screen_rho), screen_delta).epsilon
        fixed.insert(0, (f"its screening (rho {args.screen_rho:g})", rho_epsilon))
    plan = CommandPlan(args.epsilon, delta, fixed, screen_delta)
    print(plan.text(), file=sys.stderr)
    return plan


def _frank_wolfe_model(args: argparse.Namespace, opts: _Options, classes: Any, plan: CommandPlan | None) -> Any:
    """The Frank-Wolfe estimator the options describe (the registry's entry of ``--method``) at the plan's
    share of the command's budget: a classifier for the logistic loss, else a regressor; its parameters
    checked (bad parameters: exit 2)."""
    params: dict[str, Any] = dict(
        epsilon=plan.model_epsilon if plan is not None else args.epsilon,
        delta=plan.model_delta if plan is not None else (args.delta if args.delta is not None else 1e-6),
        lam=args.lam,
        max_iter=args.iters,
        calibration=args.calibration,
        bounds="clip" if args.clip else "check",
        random_state=_noise_seed(args, "train/model"),
    )
    if opts.screening:
        params.update(screen_schedule=opts.schedule, screen_rule=args.screen_rule, **opts.screen_opts)
    if args.loss == "logistic":
        model = get(args.method).build("binary", **params, classes=classes)
    else:
        model = get(args.method).build("regression", **params, y_bound=args.y_bound)
    model.check_params()
    return model


def _precheck(
    args: argparse.Namespace,
    opts: _Options,
    model: Any,
    acc: Accountant,
    store: SparseStore,
    chosen: list[int] | None,
    plan: CommandPlan,
    replayed: bool,
) -> None:
    """Check the model's and the held-out metrics' charges -- the paper calibration's true epsilon, not the one it
    was calibrated at -- against the command's own budget and, unless the command replays its releases, the
    dataset's (exit 3 before the data is read)."""
    from dpdist.evaluation import PrivateEvaluation

    task = "binary" if args.loss == "logistic" else "regression"
    evaluation = (
        [PrivateEvaluation(task, args.eval_epsilon, y_bound=args.y_bound).privacy_charge()]
        if args.test_fraction > 0
        else []
    )
    charges = [*model.charges(n_features=len(chosen) if chosen is not None else store.shape[1]), *evaluation]
    planned = plan.epsilon - (args.eval_epsilon if evaluation else 0.0)  # the model's (and its screening's)
    why = (
        f" (--calibration paper is charged its true epsilon: {charges[0].epsilon:.6g} for the model"
        f"{' and its screening' if opts.screening else ''}, planned at {planned:.4g}; the default --calibration "
        "safe spends what it is given)"
        if args.calibration == "paper"
        else ""
    )
    plan.check([c.loss for c in charges], why)
    if not replayed:
        acc.check(store.budget_id, *charges)


def _frank_wolfe_payload(
    args: argparse.Namespace, model: Any, opts: _Options, coef: dict[str, Any], n_features: int, name: str | None
) -> dict[str, Any]:
    """The JSON result's description of the fit (its charge and metrics are added after)."""
    return {
        "method": args.method,
        "loss": args.loss,
        "nnz_weights": len(coef["indices"]),
        "density": len(coef["indices"]) / n_features,
        "iterations": args.iters,
        "dataset": name,
        "private": opts.private,
    }


def _add_charge(
    args: argparse.Namespace,
    payload: dict[str, Any],
    model: Any,
    opts: _Options,
    acc: Accountant,
    key: str,
    replayed: bool,
) -> None:
    """A private fit's charge into ``payload``: its epsilon and delta, the true epsilon, the key; the screening's."""
    charge = model.charge_  # what the fit charged
    payload.update(
        epsilon=args.epsilon,
        delta=args.delta,
        true_epsilon=charge.epsilon,
        key=key,
        ledger=str(acc.path),
        rho=charge.loss.rho,
        replayed=replayed,
    )
    if opts.screening:
        payload.update(
            screen_epsilon=args.screen_epsilon,
            screen_delta=args.screen_delta,
            screen_rho=args.screen_rho,
            screen_schedule=opts.schedule,
            n_max=args.n_max,
            fw_epsilon=charge.details["fw_epsilon"],
            screened=len(model.screened_ or []),
        )


def _held_out_metrics(
    args: argparse.Namespace,
    model: Any,
    coef: dict[str, Any],
    n_features: int,
    Xte: Any,
    yte: Any,
    acc: Accountant | None,
    dataset: str,
    key: str,
) -> dict[str, Any]:
    """The held-out metrics: a private release charged under ``key/evaluation``, or exact for a non-private fit."""
    from dpdist.evaluation import PrivateEvaluation, exact_metrics, sparse_coef

    task = "binary" if args.loss == "logistic" else "regression"
    w = sparse_coef(coef["indices"], coef["values"], n_features)
    path = [int(v) for v in model.path_] if model.path_ is not None else []
    if acc is None:
        return _reported_metrics(exact_metrics(task, w, Xte, yte))
    ev = PrivateEvaluation(
        task, args.eval_epsilon, y_bound=args.y_bound, random_state=_noise_seed(args, "train/evaluation")
    )
    screened = model.screened_
    return _release_held_out(args, acc, dataset, key, ev, lambda: ev.evaluate(w, path, args.lam, Xte, yte, screened))
