"""``dpdist train`` with a gradient learner (dpdist.gradient_models), ``--tune`` (dpdist.tuning), or any
other registered learner that is not a Frank-Wolfe one (:mod:`dpdist.cli.train_frank_wolfe`).

The options are checked, the learner built by the registry and the whole charge (its own plan of
charges: the noisy count when no public count is given, the model; the held-out metrics) checked
against the budget before the data is read.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from dpdist.cli._common import (
    EXIT_OK,
    CommandPlan,
    _check_held_out,
    _metric_text,
    _noise_seed,
    _progress_bar,
    _release_held_out,
    _release_key,
    _selected,
    _write_result,
    command_delta,
)
from dpdist.exceptions import ParameterError
from dpdist.methods import SEARCH, Method, get, names

if TYPE_CHECKING:
    import numpy as np

    from dpdist.data.store import SparseStore
    from dpdist.evaluation import PrivateEvaluation
    from dpdist.privacy.accountant import Accountant


def _train_gradient(args: argparse.Namespace) -> int:
    """``dpdist train`` for the gradient learners and ``--tune`` (dpdist.gradient_models, dpdist.tuning)."""
    import numpy as np

    from dpdist.data.split import derive_key, record_sides
    from dpdist.data.store import check_schema, open_store
    from dpdist.selection.sis import store_target

    _check_gradient_options(args)
    store = open_store(args.store)
    check_schema(store)
    task = "regression" if store.task == "regression" else "binary"
    loss = args.loss or ("squared" if task == "regression" else "logistic")
    if (loss == "logistic") != (task == "binary"):
        raise ParameterError(f"--loss {loss} does not fit {args.store}, a {store.task} store")
    method = SEARCH if args.tune else args.method
    entry = get(method)
    from dpdist.privacy.accountant import Accountant

    acc = Accountant(args.ledger)
    dataset = acc.budget_of(store)
    status = acc.status(dataset)  # no budget: fail before the work
    name = status.name
    plan = _plan(args, entry, status.delta_total)
    model, labels = _gradient_learner(args, store, task, method, plan)
    key = _release_key(args, "train", method, name)
    replayed = acc.recorded(dataset, key)
    evaluation = _precheck(args, model, acc, dataset, task, plan, replayed)
    X, y = store.csr(), store_target(store)
    split_key = derive_key(acc.split_key(dataset), "dpdist train")
    test = record_sides(X, y, split_key, args.test_fraction) if args.test_fraction > 0 else np.zeros(X.shape[0], bool)
    Xtr, ytr = X[~test], (labels[~test] if labels is not None else y[~test])
    preflight = _preflight(args, entry, model, ytr, (acc, dataset, key), task, int(X.shape[1]))
    _fit(args, entry, model, (Xtr, ytr), (acc, dataset, key), store, derive_key(split_key, key))
    coef = _coef(model)
    payload = _gradient_payload(args, model, entry, loss, coef, int(X.shape[1]), name, key, str(acc.path), replayed)
    payload.update(delta=plan.delta, plan=plan.to_dict())
    if preflight is not None:
        payload["preflight"] = preflight
    released = model.release_record_["model"] if entry.own_split else model.release_record_
    if args.test_fraction > 0:
        payload.update(
            _release_held_out(
                args, acc, dataset, key, evaluation, lambda: evaluation.evaluate_model(released, X[test], y[test])
            )
        )

    def human() -> str:
        metric = _metric_text(payload)
        chosen = f" chose {payload['chosen']['learner']}," if "chosen" in payload else ""
        cost = plan.charged_text(replayed, key, payload["true_epsilon"])
        return f"{method} ({loss}):{chosen} {metric}, {payload['nnz_weights']} non-zero weights; {cost}, in {acc.path}"

    _write_result(args, payload, coef, released, human)
    return EXIT_OK


def _fit(
    args: argparse.Namespace,
    entry: Method,
    model: Any,
    train: tuple[Any, Any],
    release: tuple[Accountant, str, str],
    store: SparseStore,
    split_key: bytes,
) -> None:
    """Fit ``model`` on the train rows and release it: the search with its own split's key and no
    progress (how far it is tells how many runs it makes), a learner on the ``--features`` columns."""
    import numpy as np

    from dpdist.released import table_schema

    (Xtr, ytr), (acc, dataset, key) = train, release
    if entry.own_split:
        model.fit(Xtr, ytr, acc, dataset, key, split_key=split_key)
        return
    extra: dict[str, Any] = {"schema": table_schema(store.meta)}
    if args.features:
        chosen = _selected(args.features)
        Xtr, extra["columns"] = Xtr[:, np.asarray(chosen, dtype=np.int64)], (chosen, int(store.shape[1]))
    with _progress_bar(args, f"{entry.name}: steps", None, count=True) as update:
        model.fit(Xtr, ytr, acc, dataset, key, progress=update, **extra)


def _preflight(
    args: argparse.Namespace,
    entry: Method,
    model: Any,
    ytr: Any,
    release: tuple[Accountant, str, str],
    task: str,
    n_features: int,
) -> dict[str, Any] | None:
    """The default learner's pre-flight (:mod:`dpdist.preflight`), before its model is charged: its
    counts released first (as its fit would release them: same key, same charge), then the estimate of
    what the plan reaches from public values only (those counts, the width, the budget), on stderr with
    a warning where it is near chance. None for a learner the registry runs no pre-flight for."""
    import sys

    from dpdist.preflight import estimate

    if not entry.preflight:
        return None
    acc, dataset, key = release
    if args.n_records is None:
        n, counts = model.release_counts(ytr, acc, dataset, key)
    else:
        n, counts = int(args.n_records), None
    if counts is None and task == "binary":
        counts = (n / 2.0, n / 2.0)  # no class counts released: taken as balanced, as the fit takes them
    est = estimate(
        task,
        n,
        n_features,
        float(model.epsilon),
        float(model.delta),
        counts,
        dense=bool(getattr(model, "dense", False)),
        y_bound=getattr(model, "y_bound", 1.0),
        count_scale=1.0 / float(model.count_epsilon) if args.n_records is None and task == "binary" else 0.0,
    )
    print(f"dpdist train: {est.message()}", file=sys.stderr, flush=True)
    return {
        "learner": est.plan.learner,
        "reason": est.plan.reason,
        "metric": est.metric,
        "estimate": est.private,
        "ceiling": est.ceiling,
        "chance": est.chance,
        "near_chance": est.near_chance,
    }


def _check_gradient_options(args: argparse.Namespace) -> None:
    """Refuse the Frank-Wolfe options and a held-out split or metrics budget out of range."""
    fw_only = {
        "--lam": args.lam,
        "--iters": args.iters,
        "--calibration": args.calibration != "safe" or None,
        "--screen-*": args.screen_epsilon or args.screen_delta or args.screen_rho or args.screen_every,
        "--non-private": args.non_private or None,
    }
    for flag, value in fw_only.items():
        if value:
            raise ParameterError(f"{flag} is a Frank-Wolfe option, not one of {'--tune' if args.tune else args.method}")
    _check_held_out(args)


def _plan(args: argparse.Namespace, entry: Method, budget_delta: float) -> CommandPlan:
    """The command's ``--epsilon``/``--delta`` split: its noisy count (a counted learner without ``--n-records``),
    its held-out metrics, and the model, which gets the rest (shown on stderr before anything is charged)."""
    import sys

    fixed = [("its record count", float(args.count_epsilon))] if entry.counted and args.n_records is None else []
    if args.test_fraction > 0:
        fixed.append(("its held-out metrics", float(args.eval_epsilon)))
    plan = CommandPlan(args.epsilon, command_delta(args, budget_delta), fixed)
    print(plan.text(), file=sys.stderr)
    return plan


def _gradient_learner(
    args: argparse.Namespace, store: SparseStore, task: str, method: str, plan: CommandPlan
) -> tuple[Any, Any]:
    """(the learner, the store's declared labels or None) of ``--method`` / ``--tune`` at the plan's share of the
    command's budget, its parameters checked (bad parameters: exit 2 before the data is read)."""
    from dpdist.released import from_table, user_labels

    entry = get(method)
    params: dict[str, Any] = {"epsilon": plan.model_epsilon, "random_state": _noise_seed(args, "train/model")}
    if entry.param("delta") is not None:
        params["delta"] = plan.model_delta
    if entry.counted:  # a public count of the train rows, or its own noisy count
        params.update(n_records=args.n_records, count_epsilon=args.count_epsilon)
    takes = entry.estimator_class(task)._get_param_names()
    if task == "regression" and "y_bound" in takes:
        params["y_bound"] = args.y_bound  # the public bound on |y| the learner clips to
    if "dense" in takes:  # the default learner: rows from a table are a dense table (its ingest's public fact)
        params["dense"] = from_table(store.meta)
    labels = None
    if task == "binary":  # the store's declared labels, never those the train rows happen to hold
        labels, params["classes"] = user_labels(store)
    if args.features and entry.own_split:
        raise ParameterError("--features with --tune: the search's candidates train on all the columns")
    if args.k is not None:
        target = entry.sparsity
        if target is None:
            sparse = [m for m in names("learner") if get(m).sparsity]
            raise ParameterError(f"--k is an option of {', '.join(sparse)}, not of {method}")
        params[target] = args.k
    model = entry.build(task, **params)
    model.check_params()  # bad parameters: exit 2 before the data is read
    return model, labels


def _precheck(
    args: argparse.Namespace,
    model: Any,
    acc: Accountant,
    dataset: str,
    task: str,
    plan: CommandPlan,
    replayed: bool,
) -> PrivateEvaluation:
    """The held-out metrics' evaluation, after the whole plan was checked against the command's own budget
    and, unless the command replays its releases, the dataset's."""
    from dpdist.evaluation import PrivateEvaluation

    evaluation = PrivateEvaluation(
        task,
        args.eval_epsilon,
        y_bound=getattr(model, "y_bound", 1.0),
        random_state=_noise_seed(args, "train/evaluation"),
        curve=False,
    )
    # a refused budget: exit 3 before the data is read: the fit's own plan of charges (dpdist.base: the count's
    # release when no public count is given, then the model's), and the held-out metrics'
    charges = [*model.charges(), *([evaluation.privacy_charge()] if args.test_fraction > 0 else [])]
    plan.check([c.loss for c in charges])
    if not replayed:
        acc.check(dataset, *charges)
    return evaluation


def _coef(fitted: Any) -> dict[str, Any]:
    """A fitted model's weights as the sparse record the output carries."""
    import numpy as np

    w: np.ndarray = np.ravel(fitted.coef_)  # (1, d) for a classifier
    return {"indices": np.flatnonzero(w).tolist(), "values": w[w != 0].tolist(), "intercept": fitted.intercept_}


def _gradient_payload(
    args: argparse.Namespace,
    model: Any,
    entry: Method,
    loss: str,
    coef: dict[str, Any],
    n_features: int,
    name: str,
    key: str,
    ledger: str,
    replayed: bool,
) -> dict[str, Any]:
    """The JSON result of a gradient learner's (or the search's) release, before its held-out metrics."""
    payload: dict[str, Any] = {
        "method": entry.name,
        "loss": loss,
        "nnz_weights": len(coef["indices"]),
        "density": len(coef["indices"]) / n_features,
        "dataset": name,
        "private": True,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "key": key,
        "ledger": ledger,
        "true_epsilon": model.release_["epsilon"],
        "n_public": getattr(model, "n_public_", None),  # the count a counted learner trained on
        "replayed": replayed,
    }
    if entry.own_split:  # the search: the candidate its best run was
        payload["chosen"] = {k: v for k, v in model.best_params_.items() if k != "random_state"}
    elif "learner" in model.release_record_:  # auto: the learner its public rule ran
        payload["chosen"] = {"learner": model.release_record_["learner"]}
    return payload
