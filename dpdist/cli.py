"""The ``dpdist`` command line (contract: ``../shared/spec/cli.md``).

Exit codes: 0 success; 2 bad arguments or input; 3 privacy budget refused; 130 interrupted
(Ctrl-C or SIGTERM); 1 anything else.
With ``--json`` exactly one JSON object is printed on stdout; messages go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from dpdist.exceptions import (
    SPACE_ERRNOS,
    BudgetExceeded,
    DPDistError,
    ParameterError,
    ReleaseKeyConflict,
    UnknownDataset,
    file_failure,
)
from dpdist.methods import DEFAULT_LEARNER, GRADIENT_METHODS
from dpdist.privacy.accountant import UNCOVERED_MARK, Accountant, default_ledger_path, spend_text, status_table
from dpdist.utils import operator_log
from dpdist.utils.io import write_json_atomic
from dpdist.utils.operator_log import timing
from dpdist.utils.random import derive_seed

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_INTERRUPTED = 0, 1, 2, 3, 130


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO on stderr (default: WARNING)")
    parser.add_argument(
        "--ledger",
        default=None,
        help=f"privacy ledger (default: $DPDIST_LEDGER, else {default_ledger_path()})",
    )


def _release_args(parser: argparse.ArgumentParser) -> None:
    """Options of every command that releases a private result."""
    parser.add_argument(
        "--key",
        default=None,
        help="release key (default: derived from the dataset, the command and every parameter, so the "
        "same command again replays its release and charges nothing)",
    )
    parser.add_argument("--fresh", action="store_true", help="a new release (a new key): charged again, with new noise")
    parser.add_argument("--out", default=None, help="also write the JSON result to this file (atomically)")
    parser.add_argument("--seed", type=int, default=None, help="reproducible noise (experiments only)")
    _common(parser)


def _emit(args: argparse.Namespace, payload: dict[str, Any], human: Callable[[], str]) -> None:
    if args.json:
        sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    else:
        sys.stdout.write(human() + "\n")


def _selected(path: str) -> list[int]:
    """The store columns a ``dpdist select --out`` file released."""
    try:
        return [int(j) for j in json.loads(open(path).read())["features"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ParameterError(f"--features {path}: not a select result ({e})") from None


def _metric_text(p: dict[str, Any]) -> str:
    """Held-out metrics in words: a private one with its noise's 95% interval, and a warning when the noise
    swamps it; an exact one (a public test set, a non-private fit) as exact."""

    def f(v: float | None, spec: str) -> str:
        return "undefined" if v is None else format(v, spec)

    if "accuracy" in p:
        text = f"held-out accuracy {f(p['accuracy'], '.3f')}, AUC {f(p.get('auc'), '.3f')}"
        interval = p.get("accuracy_interval")
    elif "mse" in p:
        text = f"held-out MSE {f(p['mse'], '.4g')}, R^2 {f(p.get('r2'), '.3f')}"
        interval = p.get("mse_interval")
    else:
        return "no held-out rows"
    if interval is None:
        return text + " (exact)"
    text += f" (private; the noise's 95% interval {interval[0]:.3g}-{interval[1]:.3g})"
    if p.get("noise_swamps"):
        text += (
            " -- the noise swamps it at this test size: a larger --eval-epsilon, or more held-out rows "
            "(--test-fraction), gives a usable figure"
        )
    return text


_PRECHECK_RECORDS = 100_000  # the public count a gradient learner's pre-check charge is taken at


def _train_gradient(args: argparse.Namespace) -> int:
    """``dpdist train`` for the gradient learners and ``--tune`` (dpdist.gradient_models, dpdist.tuning)."""

    import numpy as np

    from dpdist.data.split import derive_key, record_sides
    from dpdist.data.store import check_schema, open_store
    from dpdist.evaluation import PrivateEvaluation
    from dpdist.gradient_models import make_learner
    from dpdist.released import table_schema, user_labels
    from dpdist.selection.sis import store_target

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
    if not 0.0 <= args.test_fraction < 1.0:
        raise ParameterError(f"--test-fraction must lie in [0, 1), got {args.test_fraction}")
    if args.eval_epsilon <= 0:
        raise ParameterError(
            f"--eval-epsilon must be > 0, got {args.eval_epsilon:g} (held-out metrics are a release "
            "of their own; for none, hold out nothing: --test-fraction 0)"
        )
    store = open_store(args.store)
    check_schema(store)
    task = "regression" if store.task == "regression" else "binary"
    loss = args.loss or ("squared" if task == "regression" else "logistic")
    if (loss == "logistic") != (task == "binary"):
        raise ParameterError(f"--loss {loss} does not fit {args.store}, a {store.task} store")
    method = "private-search" if args.tune else args.method
    params: dict[str, Any] = dict(
        epsilon=args.epsilon,
        delta=args.delta,
        n_records=args.n_records,
        count_epsilon=args.count_epsilon,
        random_state=_noise_seed(args, "train/model"),
    )
    labels = None
    if task == "binary":  # the store's declared labels, never those the train rows happen to hold
        labels, params["classes"] = user_labels(store)
    if args.features and method == "private-search":
        raise ParameterError("--features with --tune: the search's candidates train on all the columns")
    if args.k is not None:
        if method not in ("select-train", "dp-iht"):
            raise ParameterError(f"--k is an option of select-train and dp-iht, not of {method}")
        params["k" if method == "select-train" else "s"] = args.k
    model = make_learner(task, method, **params)
    model._validate()  # bad parameters: exit 2 before the data is read
    acc = Accountant(args.ledger)
    dataset = acc.budget_of(store)
    name = acc.status(dataset).name  # no budget: fail before the work
    evaluation = PrivateEvaluation(
        task,
        args.eval_epsilon,
        y_bound=getattr(model, "y_bound", 1.0),
        random_state=_noise_seed(args, "train/evaluation"),
        curve=False,
    )
    # a refused budget: exit 3 before the data is read. Without a public count the model's loss waits for the
    # count's release (it sets q and T); the check takes it at a fixed public count (the loss's epsilon is the
    # target whatever the count), and the ledger checks the exact charge again when it is made
    model_charge = model.privacy_charge(args.n_records or _PRECHECK_RECORDS)
    acc.check(
        dataset,
        *([] if args.n_records is not None else [model.count_charge()]),
        model_charge,
        *([evaluation.privacy_charge()] if args.test_fraction > 0 else []),
    )
    X, y = store.csr(), store_target(store)
    split_key = derive_key(acc.split_key(dataset), "dpdist train")
    test = record_sides(X, y, split_key, args.test_fraction) if args.test_fraction > 0 else np.zeros(X.shape[0], bool)
    key = _release_key(args, "train", method, name)
    replayed = acc.recorded(dataset, key)
    extra: dict[str, Any] = {"split_key": derive_key(split_key, key)} if method == "private-search" else {}
    Xtr, ytr = X[~test], (labels[~test] if labels is not None else y[~test])
    if args.features:
        chosen = _selected(args.features)
        Xtr, extra["columns"] = Xtr[:, np.asarray(chosen, dtype=np.int64)], (chosen, int(X.shape[1]))
    if method != "private-search":
        extra["schema"] = table_schema(store.meta)
    if method == "private-search":  # no progress: how far the search is tells how many runs it makes
        model.fit(Xtr, ytr, acc, dataset, key, **extra)
    else:
        with _progress_bar(args, f"{method}: steps", None, count=True) as update:
            model.fit(Xtr, ytr, acc, dataset, key, progress=update, **extra)
    fitted = model.best_estimator_ if method == "private-search" else model
    coef = {
        "indices": np.flatnonzero(fitted.coef_).tolist(),
        "values": fitted.coef_[fitted.coef_ != 0].tolist(),
        "intercept": fitted.intercept_,
    }
    payload: dict[str, Any] = {
        "method": method,
        "loss": loss,
        "nnz_weights": len(coef["indices"]),
        "density": len(coef["indices"]) / X.shape[1],
        "dataset": name,
        "private": True,
        "epsilon": args.epsilon,
        "delta": args.delta,
        "key": key,
        "ledger": str(acc.path),
        "true_epsilon": model.release_["epsilon"],
        "n_public": model.n_public_,
        "replayed": replayed,
    }
    if method == "private-search":
        payload["chosen"] = {k: v for k, v in model.best_params_.items() if k != "random_state"}
    if args.test_fraction > 0:
        result = model.release_record_["model"] if method == "private-search" else model.release_record_
        metrics = acc.release(
            dataset,
            evaluation.privacy_charge(),
            f"{key}/evaluation",
            lambda: evaluation.evaluate_model(result, X[test], y[test]),
            {"model": key, "epsilon": args.eval_epsilon},
        )
        payload.update(
            {
                k: metrics[k]
                for k in ("accuracy", "auc", "mse", "r2", "rows", "accuracy_interval", "mse_interval", "noise_swamps")
                if k in metrics
            },
            eval_epsilon=args.eval_epsilon,
            eval_key=f"{key}/evaluation",
        )
    if args.out:
        write_json_atomic(args.out, {**payload, "coef": coef})

    def human() -> str:
        metric = _metric_text(payload)
        chosen = f" chose {payload['chosen']['learner']}," if "chosen" in payload else ""
        return (
            f"{method} ({loss}):{chosen} {metric}, {payload['nnz_weights']} non-zero weights; "
            f"{_charged_text(replayed, key, payload['true_epsilon'], args.delta)}, in {acc.path}"
        )

    _emit(args, payload, human)
    return EXIT_OK


# what does not make a release different: output and logging options, where the ledger and store are
_NOT_THE_RELEASE = frozenset(
    {
        "json",
        "verbose",
        "ledger",
        "key",
        "fresh",
        "out",
        "func",
        "argv",
        "command",
        "store",
        "budget_command",
        "models_command",
    }
)


def _release_key(args: argparse.Namespace, command: str, method: str, dataset_name: str) -> str:
    """``--key``, else a key derived from the dataset's public name, the command and every parameter that
    shapes the release: the same command again replays it (and charges nothing); ``--fresh`` adds a
    random suffix (a new release, charged again). Public inputs only: no content of the data."""
    import hashlib
    import uuid

    if args.key:
        return str(args.key)
    params = {k: v for k, v in sorted(vars(args).items()) if k not in _NOT_THE_RELEASE and not callable(v)}
    doc = json.dumps({"command": command, "dataset": dataset_name, "params": params}, sort_keys=True, default=str)
    key = f"{command}-{method}-{hashlib.sha256(doc.encode()).hexdigest()[:16]}"
    return f"{key}-{uuid.uuid4().hex[:8]}" if args.fresh else key


def _charged_text(replayed: bool, key: str, epsilon: float, delta: float) -> str:
    """What a release cost, in words: the charge, or the replay (nothing charged)."""
    if replayed:
        return f"replayed from the ledger (key {key}): nothing charged (--fresh asks for a new, charged release)"
    return f"charged epsilon={epsilon:.4g}, delta={delta:g} (key {key}; the same command again replays it)"


# ----------------------------------------------------------------------- budget


def _dataset(acc: Accountant, ref: str) -> str:
    """The content hash a command refers to: a store's (a path) or the ledger's for a public name."""
    from dpdist.data.store import open_store

    if os.path.isdir(ref):
        return acc.budget_of(open_store(ref))
    return acc.resolve(ref)


def _budget_init(args: argparse.Namespace) -> int:
    from dpdist.data.store import check_schema, open_store

    store = open_store(args.store)
    check_schema(store)  # a budget on a store private analyses refuse would be a permanent budget nobody can spend
    acc = Accountant(args.ledger)
    if store.budget_id != store.dataset_id:
        raise ParameterError(
            f"{args.store} holds part of another store's records (its train/test split): releases "
            "on it are charged to that store's budget; set the budget on the source store"
        )
    status = acc.init_budget(store.dataset_id, args.epsilon, args.delta, args.name or store.name)
    payload = {"dataset": status.name, "epsilon_total": status.epsilon_total, "delta_total": status.delta_total}
    _emit(
        args,
        payload,
        lambda: (
            f"budget of {status.name} ({args.store}): epsilon={status.epsilon_total:g} "
            f"delta={status.delta_total:g}, in {acc.path}"
        ),
    )
    return EXIT_OK


def _budget_show(args: argparse.Namespace) -> int:
    path = args.ledger or str(default_ledger_path())
    if args.dataset is None and not os.path.isfile(path):  # nothing to show, and nothing is created
        _emit(args, {"ledger": path, "datasets": []}, lambda: f"no budgets: there is no ledger at {path} yet")
        return EXIT_OK
    acc = Accountant(args.ledger, create=False)
    if args.dataset is not None:
        payload = acc.status(_dataset(acc, args.dataset)).to_dict()
        _emit(args, payload, lambda: f"{status_table([payload])}\n\n{payload['dataset']}: {spend_text(payload)}.")
    else:
        rows = [s.to_dict() for s in acc.datasets()]
        note = (
            "spent: each budget's privacy filter's figure (Renyi composition, or the releases' epsilons added "
            "when smaller): a new release of epsilon e can take less than e of what is left. "
            "`budget show --dataset NAME` explains one, `budget history --dataset NAME` lists its releases."
        )
        _emit(
            args,
            {"ledger": str(acc.path), "datasets": rows},
            lambda: f"{status_table(rows)}\n\n{note}" if rows else f"no budgets in {acc.path}",
        )
    return EXIT_OK


def _budget_history(args: argparse.Namespace) -> int:
    acc = Accountant(args.ledger, create=False)
    dataset = _dataset(acc, args.dataset)
    name = acc.name(dataset)
    releases = [r.to_dict(name) for r in acc.history(dataset)]
    payload = {"dataset": name, "releases": releases}

    def human() -> str:
        lines = [
            f"{r['time']}  {r['mechanism']:<28} eps={r['epsilon']:<10.4g} delta={r['delta']:<9.3g} "
            f"{r['loss']:<28} {r['key']}" + ("" if r["covered"] else f"  {UNCOVERED_MARK}")
            for r in releases
        ]
        return "\n".join(lines) or f"no releases for {name}"

    _emit(args, payload, human)
    return EXIT_OK


# ----------------------------------------------------------------------- stores


def _emit_store(args: argparse.Namespace, meta: dict[str, Any], extra: dict[str, Any], what: str) -> None:
    """Ingest/synth output: the store, its public name and schema (no row count, no content hash)."""
    payload = {
        "store": str(args.out),
        "name": meta["name"],
        "n_features": meta["n_features"],
        "task": meta["task"],
        "schema": meta["schema"],
        **extra,
    }
    _emit(
        args,
        payload,
        lambda: f"{args.out}: {what}store {meta['name']}, {meta['n_features']} features, task {meta['task']}",
    )


@contextlib.contextmanager
def _progress_bar(
    args: argparse.Namespace, what: str, total: float | None, count: bool = False
) -> Iterator[Callable[[float], None]]:
    """A progress bar on stderr when it is a terminal (and not --json); silent otherwise.

    Yields ``update(done)``; ``total`` is in bytes, or in items (``count``: shown as "done/total").
    The bar is the operator's own view of their data (never a release).
    """
    if args.json or not sys.stderr.isatty():
        yield lambda done, total=None: None
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    amount = MofNCompleteColumn() if count else DownloadColumn() if total else TextColumn("")
    columns = [TextColumn(what), BarColumn(), amount, TimeElapsedColumn()]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=total)
        yield lambda done, total=None: bar.update(task, completed=done, **({"total": total} if total else {}))


def _ingest(args: argparse.Namespace) -> int:
    from dpdist.data.ingest import ingest_svmlight
    from dpdist.data.tables import ingest_table, is_table

    categories: dict[str, list[str]] = {}
    for spec in args.categories or []:
        col, sep, values = spec.partition("=")
        if not sep or not col or not values:
            raise ParameterError(f"--categories {spec!r}: write COLUMN=value1,value2,... (the column's public values)")
        categories[col] = [v for v in values.split(",") if v]
    if is_table(args.src):
        meta = ingest_table(
            args.src,
            args.out,
            force=args.force,
            target=args.target,
            impute=args.impute,
            encode=args.encode_categories,
            task=args.task,
            name=args.name,
            labels=args.labels,
            categories=categories or None,
            fill_value=args.fill_value,
            private=not args.non_private,
        )
    else:
        if categories or args.fill_value is not None:
            raise ParameterError(
                "--categories and --fill-value are options of tables (CSV, xlsx, ...), not of "
                f"svmlight files ({args.src})"
            )
        if not args.non_private and (args.n_features is None or args.zero_based == "auto"):
            raise ParameterError(
                f"{args.src}: without a declared width (--n-features D, the dataset's documented "
                "number of features) and index base (--zero-based no|yes), the columns would be "
                "read from the data -- one record could shift the others' -- and private analyses "
                "would refuse the store: declare them, or pass --non-private for a store meant for "
                "non-private experiments only"
            )
        size = os.path.getsize(args.src) if os.path.isfile(args.src) else None
        compressed = str(args.src).endswith((".bz2", ".xz", ".gz"))
        with _progress_bar(args, f"ingest {os.path.basename(args.src)}", None if compressed else size) as update:
            meta = ingest_svmlight(
                args.src,
                args.out,
                force=args.force,
                zero_based=args.zero_based,
                n_features=args.n_features,
                task=args.task,
                name=args.name,
                labels=None if args.labels is None else [float(v) for v in args.labels],
                progress=lambda rows, text_bytes: update(text_bytes),
            )
    _emit_store(args, meta, {"label_mapping": meta["label_mapping"]}, "")
    return EXIT_OK


def _synth(args: argparse.Namespace) -> int:
    from dpdist.data.synthetic import write_synthetic

    params = {"n": args.n, "d": args.d}
    if args.scale is not None:
        params["scale"] = args.scale
    if args.correlated:
        params["correlated"] = True
    if args.task is not None:
        params["task"] = args.task
    if args.hinge:
        params["hinge"] = True
    meta = write_synthetic(args.name_, args.out, seed=args.seed, force=args.force, store_name=args.name, **params)
    _emit_store(args, meta, {"true_support": meta["true_support"]}, f"synthetic {args.name_}, ")
    return EXIT_OK


# ---------------------------------------------------------------------- select


BSS_METHODS = {"bss-top-r": "top-r", "bss-mistakes": "mistakes"}


def _noise_seed(args: argparse.Namespace, purpose: str) -> int | None:
    """The noise seed of one release of a command (``--seed``: experiments only; one per purpose)."""
    return derive_seed(args.seed, purpose)


def _bss_selector(args: argparse.Namespace) -> Any:
    from dpdist.selection.best_subset import BSSMistakesSelector, BSSTopRSelector

    if args.time_limit is not None:
        raise ParameterError(
            "--time-limit was removed: a time limit made a release's abort depend on the data, "
            "unprotected. Best subset selection now runs every solve to its certificate; an operator "
            "who wants a wall-clock guard anyway passes --nonprivate-time-limit SECONDS (outside the "
            "privacy guarantee, marked so in the ledger)"
        )
    ridge = args.ridge if args.ridge is not None else (120.0 if args.loss == "squared" else 100.0)
    common = dict(
        s=args.k,
        epsilon=args.epsilon,
        loss=args.loss,
        r=args.r,
        ridge=ridge,
        x_bound=args.x_bound,
        y_bound=args.y_bound,
        bounds="clip" if args.clip else "check",
        tol=args.tol,
        nonprivate_time_limit=args.nonprivate_time_limit,
        random_state=_noise_seed(args, f"select/{args.method}"),
    )
    if args.method == "bss-top-r":
        return BSSTopRSelector(**common)
    if not args.delta:
        raise ParameterError(
            "--delta: bss-mistakes is (epsilon, delta)-DP (its propose-test-release gap check "
            "fails with probability delta); pass --delta > 0, e.g. 1e-6"
        )
    return BSSMistakesSelector(**common, delta=args.delta, ptr_fraction=args.ptr_fraction)


def _select(args: argparse.Namespace) -> int:
    import time

    from dpdist.data.store import check_schema, column_ids, open_store
    from dpdist.selection.sis import DPSIS, store_scores, store_target
    from dpdist.selection.two_stage import TwoStageSelector, fit_on_support
    from dpdist.solvers.objective_perturbation import ObjectivePerturbation

    bss = args.method in BSS_METHODS
    if args.delta is None:
        args.delta = 0.0
    if args.delta != 0.0 and args.method != "bss-mistakes":
        raise ParameterError(f"--delta: {args.method} is pure epsilon-DP, so delta must be 0 (got {args.delta:g})")
    if args.stage2 is not None and args.stage2 <= 0:
        raise ParameterError(f"--stage2 must be an epsilon > 0, got {args.stage2:g}")
    selector = _bss_selector(args) if bss else None
    if selector is not None:
        selector._validate()  # bad parameters: exit 2 before the store is read
    store = open_store(args.store)
    check_schema(store)
    acc = Accountant(args.ledger)
    status = acc.status(acc.budget_of(store))  # fail before any computation when the dataset has no budget
    key = _release_key(args, "select", args.method, status.name)
    replayed = acc.recorded(store.budget_id, key)
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if bss:
        from dpdist.selection.best_subset.executor import LocalExecutor
        from dpdist.selection.best_subset.objective import store_problem

        acc.check(store.budget_id, selector.privacy_charge())  # a refusal before any work
        problem = store_problem(
            store,
            selector.s,
            selector.loss,
            selector.r,
            selector.ridge,
            selector.x_bound,
            selector.y_bound,
            selector.bounds,
        )  # Assumption 1 checked before the charge
        print(f"{args.method}: s={args.k} of {problem.p:,} features, {selector.loss} loss", file=sys.stderr)
        features = selector.fit_executor(LocalExecutor(problem), acc, store.budget_id, key).support_
    elif args.method == "dp-sis":
        sis = DPSIS(
            args.k,
            args.epsilon,
            bounds="clip" if args.clip else "check",
            random_state=_noise_seed(args, "select/dp-sis"),
        )
        acc.check(store.budget_id, sis.privacy_charge())  # a refusal before any work
        with _progress_bar(args, "dp-sis: X^T y", None) as update:
            scores = store_scores(store, bounds=sis.bounds, progress=lambda done, total: update(done))
        features = sis.fit_scores(scores, acc, store.budget_id, key).features_
    else:
        sel = TwoStageSelector(
            args.k,
            args.epsilon,
            alpha=args.alpha,
            n_blocks=args.n_blocks,
            random_state=_noise_seed(args, "select/two-stage"),
        )
        features = sel.fit(store.csr(), store_target(store), acc, store.budget_id, key).features_
        extra["n_blocks"] = sel.n_blocks_
    if args.stage2 is not None:
        model = ObjectivePerturbation(
            "squared" if store.task == "regression" else "logistic",
            args.stage2,
            random_state=_noise_seed(args, "select/stage2"),
            classes=None if store.task == "regression" else [-1.0, 1.0],
        )  # store_target's
        coef = fit_on_support(model, store.csr(), store_target(store), features, acc, store.budget_id, f"{key}/stage2")
        extra["stage2"] = {
            "key": f"{key}/stage2",
            "epsilon": args.stage2,
            "loss": model.loss,
            "indices": [int(i) for i in features],
            "values": coef.tolist(),
        }
    timing("%s: %.2f s", args.method, time.perf_counter() - t0)
    ids = column_ids(store.meta, features)
    payload = {
        "method": args.method,
        "k": args.k,
        "features": [int(i) for i in features],
        "epsilon": args.epsilon,
        "delta": args.delta,
        "dataset": status.name,
        "key": key,
        "ledger": str(acc.path),
        "replayed": replayed,
        "file_columns": ids,
        **extra,
    }

    def human() -> str:
        shown = ids.get("names") or ids["ids"]
        where = (
            "columns" if "names" in ids else f"the file's {'one' if ids['index_base'] == 1 else 'zero'}-based indices"
        )
        return (
            f"{args.method}: {args.k} features, as {where}: {shown} ({status.name}; "
            f"{_charged_text(replayed, key, args.epsilon, args.delta)})"
        )

    if args.out:
        write_json_atomic(args.out, payload)
    _emit(args, payload, human)
    return EXIT_OK


# ----------------------------------------------------------------------- train


def _train(args: argparse.Namespace) -> int:
    import secrets
    import time
    import uuid

    import numpy as np

    from dpdist.data.split import derive_key, record_sides
    from dpdist.data.store import check_schema, open_store
    from dpdist.evaluation import PrivateEvaluation, exact_metrics, sparse_coef
    from dpdist.linear_model import PRIVATE, SCREEN_METHODS, DPFrankWolfeClassifier, DPFrankWolfeRegressor
    from dpdist.released import table_schema, user_labels
    from dpdist.selection.sis import store_target

    if args.epsilon is None and not args.non_private:
        raise ParameterError(
            "--epsilon is required: the privacy loss of a release is the user's choice, never a "
            "default (a non-private baseline takes --non-private instead)"
        )
    if args.tune or args.method in GRADIENT_METHODS:
        return _train_gradient(args)
    if args.lam is None or args.iters is None:
        raise ParameterError(f"--method {args.method} (Frank-Wolfe) needs --lam and --iters")
    screening = SCREEN_METHODS.get(args.method)
    private = args.method in PRIVATE or screening is not None
    if not private and not args.non_private:
        raise ParameterError(
            f"--method {args.method} releases an un-noised model of the data; "
            "pass --non-private to confirm (nothing is charged to the ledger)"
        )
    if not 0.0 <= args.test_fraction < 1.0:
        raise ParameterError(f"--test-fraction must lie in [0, 1), got {args.test_fraction}")
    if args.eval_epsilon <= 0:
        raise ParameterError(
            f"--eval-epsilon must be > 0, got {args.eval_epsilon:g} (held-out metrics are a release "
            "of their own; for none, hold out nothing: --test-fraction 0)"
        )
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
    store = open_store(args.store)
    if private:
        check_schema(store)
    acc = Accountant(args.ledger) if private else None
    name = acc.status(acc.budget_of(store)).name if acc is not None else store.name  # no budget: fail before the work
    args.loss = args.loss or ("squared" if store.task == "regression" else "logistic")
    if args.loss == "logistic" and store.task != "binary":
        raise ParameterError(f"--loss logistic needs a binary store; {args.store} is {store.task}")
    common = dict(
        epsilon=args.epsilon,
        delta=args.delta,
        lam=args.lam,
        max_iter=args.iters,
        method="fast-dp-fw" if screening else args.method,
        calibration=args.calibration,
        bounds="clip" if args.clip else "check",
        random_state=_noise_seed(args, "train/model"),
    )
    if screening:
        common.update(screening=screening, screen_schedule=schedule, screen_rule=args.screen_rule, **screen_opts)
    # the classes are store_target's public mapping, never those the train rows happen to hold (a
    # train part with one class must not refuse before the charge: that refusal would be data-dependent)
    labels, classes = user_labels(store) if args.loss == "logistic" else (None, None)
    model = (
        DPFrankWolfeClassifier(**common, classes=classes)
        if args.loss == "logistic"
        else DPFrankWolfeRegressor(**common, y_bound=args.y_bound)
    )  # bad parameters: exit 2 before any work
    chosen = _selected(args.features) if args.features else None
    if private:  # a refused budget: exit 3 before the data is read
        task = "binary" if args.loss == "logistic" else "regression"
        evaluation = (
            [PrivateEvaluation(task, args.eval_epsilon, y_bound=args.y_bound).privacy_charge()]
            if args.test_fraction > 0
            else []
        )
        acc.check(
            store.budget_id, model.privacy_charge(len(chosen) if chosen is not None else store.shape[1]), *evaluation
        )
    X, y = store.csr(), store_target(store)
    # each record's side from its own content and the dataset's secret key (dpdist.data.split)
    # the train command's own split (the run's split key, derived for it: a part of a run's split splits again)
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
    key = _release_key(args, "train", args.method, name) if private else f"train-{args.method}-{uuid.uuid4().hex}"
    replayed = acc is not None and acc.recorded(store.budget_id, key)
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
    coef = {"indices": np.flatnonzero(model.coef_).tolist(), "values": model.coef_[model.coef_ != 0].tolist()}
    payload: dict[str, Any] = {
        "method": args.method,
        "loss": args.loss,
        "nnz_weights": len(coef["indices"]),
        "density": len(coef["indices"]) / X.shape[1],
        "iterations": args.iters,
        "dataset": name,
        "private": private,
    }
    if private:
        charge = model.privacy_charge()
        payload.update(
            epsilon=args.epsilon,
            delta=args.delta,
            true_epsilon=charge.epsilon,
            key=key,
            ledger=str(acc.path),
            rho=charge.loss.rho,
            replayed=replayed,
        )
        if screening:
            payload.update(
                screen_epsilon=args.screen_epsilon,
                screen_delta=args.screen_delta,
                screen_rho=args.screen_rho,
                screen_schedule=schedule,
                n_max=args.n_max,
                fw_epsilon=charge.details["fw_epsilon"],
                screened=len(model.screened_ or []),
            )
    else:  # a non-private run: its timing is the operator's own
        payload.update(seconds=round(seconds, 4), seconds_per_iter=seconds / args.iters)
    if args.test_fraction > 0:
        task = "binary" if args.loss == "logistic" else "regression"
        w = sparse_coef(coef["indices"], coef["values"], X.shape[1])
        path = [int(v) for v in model.path_] if model.path_ is not None else []
        if private:
            ev = PrivateEvaluation(
                task, args.eval_epsilon, y_bound=args.y_bound, random_state=_noise_seed(args, "train/evaluation")
            )
            screened = model.screened_
            metrics = acc.release(
                store.budget_id,
                ev.privacy_charge(),
                f"{key}/evaluation",
                lambda: ev.evaluate(w, path, args.lam, Xte, yte, screened),
                {"model": key, "epsilon": args.eval_epsilon},
            )
            payload.update(eval_epsilon=args.eval_epsilon, eval_key=f"{key}/evaluation")
        else:
            metrics = exact_metrics(task, w, Xte, yte)
        payload.update(
            {
                k: metrics[k]
                for k in ("accuracy", "auc", "mse", "r2", "rows", "accuracy_interval", "mse_interval", "noise_swamps")
                if k in metrics
            }
        )
    if args.out:
        write_json_atomic(args.out, {**payload, "coef": coef})

    def human() -> str:
        def f(v: float | None, spec: str) -> str:
            return "undefined" if v is None else format(v, spec)

        metric = _metric_text(payload)
        where = (
            f"; {_charged_text(replayed, key, payload['true_epsilon'], args.delta)}, in {acc.path}"
            if private
            else " (non-private: nothing charged)"
        )
        return (
            f"{args.method} ({args.loss}, lam={args.lam:g}, T={args.iters}): {metric}, "
            f"{payload['nnz_weights']} non-zero "
            f"weights (density {payload['density']:.3g}){where}"
        )

    _emit(args, payload, human)
    return EXIT_OK


# ---------------------------------------------------------------------- models


def _find_release(acc: Accountant, key: str, dataset: str | None) -> tuple[str, Any]:
    """(public name, release) of ``key`` in one dataset (``--dataset``) or the only one that has it."""
    hashes = [_dataset(acc, dataset)] if dataset else [s.dataset for s in acc.datasets()]
    found = list(
        {(r.dataset, r.key): (r.dataset, r) for h in hashes for r in acc.history(h) if r.key == key}.values()
    )  # a linked budget's release is listed by both: once, as its own
    if not found:
        raise ParameterError(f"no release with key {key!r} in {acc.path}; `dpdist models list` shows the keys")
    if len(found) > 1:
        raise ParameterError(f"key {key!r} is in several datasets: name one with --dataset")
    h, rec = found[0]
    if rec.result is None:
        raise ParameterError(
            f"release {key!r} was charged but has no recorded result (its computation never "
            "completed); nothing was released under it"
        )
    return acc.name(h), rec


def _models(args: argparse.Namespace) -> int:
    acc = Accountant(args.ledger, create=False)
    if args.models_command == "list":
        hashes = [_dataset(acc, args.dataset)] if args.dataset else [s.dataset for s in acc.datasets()]
        once = {(r.dataset, r.key): r for h in hashes for r in acc.history(h) if r.result is not None}
        rows = [{**r.to_dict(acc.name(r.dataset)), "result": None} for r in once.values()]  # linked: as its own
        for r in rows:
            r.pop("result")
        _emit(
            args,
            {"releases": rows},
            lambda: (
                "\n".join(f"{r['dataset']:<14} {r['mechanism']:<30} eps={r['epsilon']:<8.4g} {r['key']}" for r in rows)
                or f"no recorded releases in {acc.path}"
            ),
        )
        return EXIT_OK
    name, rec = _find_release(acc, args.key, args.dataset)
    record = rec.to_dict(name)
    if args.models_command == "export":
        write_json_atomic(args.out, record)
        hint = (
            " (a model: `dpdist evaluate` scores it on a public file; in Python, the estimator's "
            "from_release(json.load(open(...))) predicts on your whole matrix)"
            if isinstance(record.get("result"), dict) and "indices" in record["result"]
            else ""
        )
        _emit(args, {"key": args.key, "out": str(args.out)}, lambda: f"{args.key} -> {args.out}{hint}")
    else:
        _emit(args, record, lambda: _record_text(record))
    return EXIT_OK


def _record_text(record: dict[str, Any]) -> str:
    """A release's record in a few lines: what, its loss, its model's size (not one number a line)."""
    result = record.get("result")
    lines = [
        f"{record['key']}  {record['mechanism']}  epsilon={record['epsilon']:.4g} delta={record['delta']:g}  "
        f"({record['loss']}; {record['time']}; dataset {record['dataset']})"
    ]
    if isinstance(result, dict) and "indices" in result:
        nz = list(zip(result["indices"], result["values"]))
        shown = ", ".join(f"{j}: {v:.4g}" for j, v in nz[:10]) + (", ..." if len(nz) > 10 else "")
        lines.append(
            f"model: {len(nz)} non-zero weights of {result.get('n_features')} (store columns, zero-based) "
            f"{{{shown}}}" + (f"; intercept {result['intercept']:.4g}" if "intercept" in result else "")
        )
        if result.get("classes") is not None:
            lines.append(f"classes: {result['classes']}")
        if result.get("path"):
            lines.append(f"Frank-Wolfe path: {len(result['path'])} steps (--json prints them)")
    else:
        text = json.dumps(result, sort_keys=True)
        lines.append(f"result: {text if len(text) <= 400 else text[:400] + ' ... (--json prints it all)'}")
    return "\n".join(lines)


def _evaluate(args: argparse.Namespace) -> int:
    """``dpdist evaluate MODEL --public-test FILE``: a released model's exact metrics on a file the user
    declares public (nothing of the private data is read; nothing is charged)."""
    import numpy as np

    from dpdist.data.store import open_store
    from dpdist.evaluation import exact_metrics

    if os.path.isfile(args.model):
        try:
            record = json.loads(open(args.model).read())
        except ValueError as e:
            raise ParameterError(
                f"{args.model}: not a model record (JSON written by `dpdist models export`): {e}"
            ) from None
    else:
        acc = Accountant(args.ledger, create=False)
        name, rec = _find_release(acc, args.model, args.dataset)
        record = rec.to_dict(name)
    result = record.get("result", record)
    if not isinstance(result, dict) or not {"indices", "values", "n_features"} <= set(result):
        raise ParameterError(f"{args.model}: not a released model (a selection or a count has no predictions)")
    d = int(result["n_features"])
    if os.path.isdir(args.public_test):
        test = open_store(args.public_test)
        X, y = test.csr(), np.asarray(test.y, dtype=np.float64)
    else:
        from dpdist.data.tables import is_table, read_table

        if is_table(args.public_test):  # read as the model's training table was (its recorded schema)
            schema = result.get("schema") or {}
            t = read_table(
                args.public_test,
                target=args.target,
                categories=schema.get("categories"),
                fill_value=schema.get("fill_value"),
            )
            if schema.get("feature_names") and t.feature_names != schema["feature_names"]:
                raise ParameterError(
                    f"{args.public_test}: its columns {t.feature_names[:10]} are not the model's "
                    f"{schema['feature_names'][:10]} (same order, same declared categories)"
                )
            X, y = t.X, (np.asarray(t.classes, dtype=object)[t.y.astype(int)] if t.classes else t.y)
        else:
            import lzma

            from sklearn.datasets import load_svmlight_file

            src: Any = lzma.open(args.public_test) if args.public_test.endswith(".xz") else args.public_test
            X, y = load_svmlight_file(src, n_features=d, zero_based=args.zero_based == "yes")
    if X.shape[1] != d:
        raise ParameterError(f"{args.public_test} has {X.shape[1]} columns; the model has {d}")
    classes = result.get("classes")
    if classes is not None:
        known = np.isin(np.asarray(y, dtype=object), np.asarray(classes, dtype=object))
        if not known.all():
            raise ParameterError(f"{args.public_test}: labels outside the model's classes {classes}")
        target = np.where(np.asarray(y, dtype=object) == classes[1], 1.0, -1.0)
        task = "binary"
    else:
        target, task = np.asarray(y, dtype=np.float64), "regression"
    metrics = exact_metrics(task, result, X, target)
    payload = {"model": args.model, "public_test": args.public_test, "rows": int(X.shape[0]), "exact": True, **metrics}
    _emit(
        args,
        payload,
        lambda: (
            f"{args.model} on {args.public_test} (declared public: exact, nothing charged): " + _metric_text(payload)
        ),
    )
    return EXIT_OK


# ----------------------------------------------------------------------- parser


def _run(args: argparse.Namespace) -> int:
    """The main job: the end-to-end Prefect flow (dpdist.flows.end_to_end) on the config's cluster.

    The config is read and the privacy plan checked against the ledger before Prefect is even
    imported: a bad config exits 2 and a plan the budget cannot hold exits 3 at once.
    """
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault(*_CONSOLE_HANDLER)
    from dpdist.flows.config import load_config
    from dpdist.flows.plan import preflight

    overrides: dict[str, Any] = {}
    if args.ledger:
        overrides["ledger"] = args.ledger
    if args.output:
        overrides["output"] = args.output
    if args.seed is not None:
        overrides["seed"] = args.seed
    cfg = load_config(args.config, overrides)  # bad config: exit 2 before anything starts
    args.run_output = cfg.output  # for main's line on a full disk
    if os.environ.get(_RUN_CHILD) != "1":
        checked = preflight(cfg)  # no budget (exit 2) or not enough (exit 3): before any work
        if args.plan:
            _emit(args, {"plan": checked}, lambda: _format_plan(checked))
            return EXIT_OK
        print(
            f"dpdist run: {cfg.name} ({cfg.source_file}): data {cfg.data.source}, cluster {cfg.cluster.kind}, "
            f"output {cfg.output}; plan: {len(checked['releases'])} releases"
            + (f" ({checked['replayed']} replayed from the ledger)" if checked.get("replayed") else "")
            + (
                ", nothing new to charge"
                if _nothing_new(checked)
                else f", epsilon {checked['epsilon_after']:.4g} of {checked['epsilon_total']:g} after it"
            ),
            file=sys.stderr,
            flush=True,
        )
        return _supervise(args.argv, cfg.output)
    signal.signal(signal.SIGTERM, _interrupt)
    _redeliver_swallowed_interrupts()
    from dpdist.flows.end_to_end import end_to_end
    from dpdist.flows.runtime import prefect_api

    try:
        with prefect_api() as api:
            print(f"Prefect API: {api}", file=sys.stderr, flush=True)
            summary = end_to_end(args.config, overrides)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED

    def human() -> str:
        lines = [f"flow run {summary['flow_run']}, dataset {summary['dataset']}"]
        lines += [f"  {s['step']:<9} {len(s.get('releases', []))} release(s)" for s in summary["steps"]]
        lines.append(f"report: {summary['report']} (and {summary['html']}: one page, plots embedded)")
        return "\n".join(lines)

    _emit(args, summary, human)
    return EXIT_OK


_RUN_CHILD = "DPDIST_RUN_SUPERVISED"
# the run's processes (flow, local workers) print a full disk in one line, not its traceback
_CONSOLE_HANDLER = ("PREFECT_LOGGING_HANDLERS_CONSOLE_CLASS", "dpdist.flows.console.RunConsoleHandler")


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (not the one at creation)."""

    @property  # type: ignore[override]
    def stream(self):
        return sys.stderr

    @stream.setter
    def stream(self, value):
        pass


def _one_line_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
) -> str:
    """A warning as one line naming its kind, without the Python source line that raised it."""
    return f"dpdist: warning ({category.__name__}): {message}\n"


def _logging(verbose: bool) -> None:
    """stderr logs at WARNING (INFO with -v), for dpdist, Prefect and Dask, in this process and its children."""
    level = "INFO" if verbose else "WARNING"
    # -v asks for INFO whatever the environment says; without it the environment's own choice stands
    put = os.environ.__setitem__ if verbose else os.environ.setdefault
    put("PREFECT_LOGGING_LEVEL", level)
    put("DASK_LOGGING__DISTRIBUTED", level.lower())
    logger = logging.getLogger("dpdist")
    logger.setLevel(getattr(logging, level))
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


def _interrupt(signum: int, frame: Any) -> None:
    import logging

    logging.disable(logging.CRITICAL)  # the interrupted flow's crash reports are not for the terminal
    raise KeyboardInterrupt


class _StderrRelay(threading.Thread):
    """Copies the supervised run's stderr to this terminal as it comes (bytes, unchanged) until
    ``divert()``; from then on to an owner-only log file, so an interrupted run's teardown (the
    crash notes and connection errors of workers stopped mid-task) stays off the terminal."""

    def __init__(self, stream: IO[bytes], log: Path) -> None:
        super().__init__(daemon=True)
        self.stream, self.log, self.diverted_bytes = stream, log, 0
        self._diverted = threading.Event()
        self.start()

    def divert(self) -> None:
        self._diverted.set()

    def run(self) -> None:
        fd, out, logf = self.stream.fileno(), sys.stderr.buffer, None
        try:
            while chunk := os.read(fd, 65536):
                if not self._diverted.is_set():
                    out.write(chunk)
                    out.flush()
                    continue
                if logf is None:
                    from dpdist.utils.files import open_private

                    self.log.parent.mkdir(parents=True, exist_ok=True)  # the output dir keeps its mode
                    logf = open_private(self.log, "ab")
                logf.write(chunk)
                logf.flush()
                self.diverted_bytes += len(chunk)
        except OSError:
            pass
        finally:
            if logf is not None:
                logf.close()


def _redeliver_swallowed_interrupts() -> None:
    """Deliver again an interrupt whose exception Python swallowed.

    A signal handler raises in whatever Python code runs at that moment; when that is a callback
    Python cannot propagate from (a gc callback -- distributed installs one in the scheduler's
    process --, a ``__del__``, a weakref callback), the exception is printed as "Exception ignored"
    and dropped, and the run would go on to its end. This hook takes such a dropped
    ``KeyboardInterrupt`` or Prefect ``TerminationSignal`` and raises the signal in the main
    thread again, where it is handled at the next ordinary bytecode.
    """
    import _thread

    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt):
            _thread.interrupt_main(signal.SIGINT)
        elif type(exc).__name__ == "TerminationSignal":
            _thread.interrupt_main(int(getattr(exc, "signal", signal.SIGTERM)))
        else:
            previous(unraisable)

    sys.unraisablehook = hook


def _supervise(argv: list[str], output: str) -> int:
    """Run this same command in a child process in its own session, and stop it in order on Ctrl-C.

    A Ctrl-C at the terminal reaches every process of the terminal's process group. In the
    child's own session, the temporary Prefect server and the Dask workers never see it: only
    this process does, and it asks the child (SIGTERM) to leave the flow, close the cluster and
    then stop the server, removes the temporaries of stores left half-written, and exits 130.
    A second Ctrl-C kills the child's whole session at once.
    """
    import subprocess
    import time

    env = {**os.environ, _RUN_CHILD: "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpdist.cli", *argv], env=env, start_new_session=True, stderr=subprocess.PIPE
    )
    relay = _StderrRelay(proc.stderr, Path(output) / "interrupted-run.log")
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        try:
            code = proc.wait()
            relay.join(timeout=10)
            if code == EXIT_OK:  # an earlier interrupted run's log is about a run that has now completed
                relay.log.unlink(missing_ok=True)
            return code
        except KeyboardInterrupt:
            relay.divert()  # the teardown's crash reports (workers losing their peers) go to the log file
            print(
                "\ndpdist run: interrupted; stopping the flow, the cluster and the Prefect server "
                "(Ctrl-C again to kill them)",
                file=sys.stderr,
                flush=True,
            )
            proc.send_signal(signal.SIGTERM)
            try:
                deadline = time.monotonic() + 60
                while proc.poll() is None and time.monotonic() < deadline:
                    time.sleep(0.1)
            except KeyboardInterrupt:
                pass
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            relay.join(timeout=10)
            _remove_partial(output)
            if relay.diverted_bytes:
                print(f"dpdist run: what the stopping run printed is in {relay.log}", file=sys.stderr, flush=True)
            return EXIT_INTERRUPTED
    finally:
        signal.signal(signal.SIGTERM, previous)


def _remove_partial(output: str) -> None:
    """Temporaries of stores and files an interrupted run left half-written (complete stores stay)."""
    import shutil
    from pathlib import Path

    root = Path(output)
    for pattern in ("stores/.*.tmp-*", "stores/.*.old-*", ".tmp-*"):
        for p in root.glob(pattern):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)


def _nothing_new(p: dict[str, Any]) -> bool:
    """Whether a plan (``dpdist.flows.plan.preflight``) only replays releases the ledger holds."""
    return p.get("replayed") == len(p["releases"])


def _format_plan(p: dict[str, Any]) -> str:
    lines = [
        f"  {r['step']:<9} {r['method']:<28} {r['mechanism']:<30} eps={r['epsilon']:<8.4g} "
        f"delta={r['delta']:<8.3g} {r['loss']}"
        for r in p["releases"]
    ]
    lines.append(
        f"{len(p['releases'])} releases; basic composition epsilon={p['epsilon_basic']:.4g}, "
        f"delta={p['delta_basic']:.3g}; "
        + (f"{p['replayed']} already in the ledger (replayed, no charge); " if p.get("replayed") else "")
        + f"checked against the {p['checked_against']} "
        f"(epsilon={p['epsilon_total']:g}, delta={p['delta_total']:g}): "
        + (
            "nothing new to charge"
            if _nothing_new(p)
            else f"spend after the run epsilon={p['epsilon_after']:.4g} (the budget's privacy filter) -- it fits"
        )
    )
    return "\n".join(lines)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dpdist")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpdist", description="Differentially private sparse regression and selection."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="svmlight/LIBSVM file (plain, .bz2, .xz, .gz) or a table -> zarr store")
    p.add_argument("src", help="an svmlight file (plain, .bz2, .xz, .gz) or a table (CSV, xlsx, zipped CSV, R .RData)")
    p.add_argument("--out", required=True, help="store directory to create")
    p.add_argument("--force", action="store_true", help="replace an existing store")
    p.add_argument(
        "--zero-based",
        choices=("no", "yes", "auto"),
        default="no",
        help="svmlight: whether column indices start at 0 (default no: one-based, the LIBSVM "
        "convention); auto guesses from whether an index 0 appears, which private analyses refuse",
    )
    p.add_argument(
        "--n-features",
        type=int,
        default=None,
        help="svmlight: the number of columns, public (private analyses need it: without it the "
        "largest index seen is used)",
    )
    p.add_argument(
        "--task",
        choices=("auto", "binary", "multiclass", "regression"),
        default="auto",
        help="auto: binary when there are exactly two distinct labels (a text target: by its "
        "number of categories), else regression",
    )
    p.add_argument(
        "--target", default=None, help="tables (.csv, .data, .xlsx, .zip, .RData, .rda): target column (default: last)"
    )
    p.add_argument(
        "--categories",
        action="append",
        default=None,
        metavar="COLUMN=a,b,c",
        help="tables: a text column's public values (one 0/1 column each, and COLUMN=other for any "
        "other value); repeat for several columns",
    )
    p.add_argument(
        "--fill-value",
        type=float,
        default=None,
        help="tables: a public constant for missing values (each record's gaps alone: private)",
    )
    p.add_argument(
        "--non-private",
        action="store_true",
        help="allow a store whose columns are inferred from the data (--impute mean, "
        "--encode-categories, no --n-features): for non-private experiments only",
    )
    p.add_argument(
        "--impute",
        choices=("mean",),
        default=None,
        help="tables: fill missing features with column means (data-dependent: needs --non-private)",
    )
    p.add_argument(
        "--encode-categories",
        action="store_true",
        help="tables: code text columns 1..K from the values seen (data-dependent: needs --non-private)",
    )
    p.add_argument("--name", default=None, help="the store's public name (default: random)")
    p.add_argument(
        "--labels",
        default=None,
        type=lambda s: [v for v in s.split(",") if v],
        help="the classes, comma-separated (public: with --task binary/multiclass; private analyses "
        "need them, or --task regression, so that no record's label can recode the others)",
    )
    _common(p)
    p.set_defaults(func=_ingest)

    from dpdist.data.synthetic import GENERATORS

    p = sub.add_parser("synth", help="write a synthetic store (seed experiments; LIBSVM-shaped sparse sets)")
    p.add_argument("name_", metavar="name", choices=sorted(GENERATORS))
    p.add_argument("--name", dest="name", default=None, help="the store's public name (default: random)")
    p.add_argument("--out", required=True, help="store directory to create")
    p.add_argument("--seed", type=int, default=None, help="reproducible data (default: OS entropy)")
    p.add_argument("--n", type=int, default=None, help="rows (default: the set's own)")
    p.add_argument("--d", type=int, default=None, help="features (default: the set's own)")
    p.add_argument("--scale", type=float, default=None, help="sparse profiles: multiply the number of rows")
    p.add_argument("--correlated", action="store_true", help="raj: Sigma_ij = 0.5^|i-j|")
    p.add_argument("--task", choices=("regression", "binary"), default=None, help="raj: linear or logistic labels")
    p.add_argument("--hinge", action="store_true", help="bss: binary labels y = +1 w.p. sigmoid(z)")
    p.add_argument("--force", action="store_true", help="replace an existing store")
    _common(p)
    p.set_defaults(func=_synth)

    p = sub.add_parser("select", help="private feature selection (charges the ledger before printing)")
    p.add_argument("store", help="store written by ingest/synth")
    p.add_argument("--method", required=True, choices=("dp-sis", "two-stage", *BSS_METHODS))
    p.add_argument("--k", required=True, type=int, help="number of features to release (bss: the support size s)")
    p.add_argument("--epsilon", required=True, type=float)
    p.add_argument(
        "--delta",
        type=float,
        default=None,
        help="bss-mistakes: the propose-test-release delta (required, > 0); the others are pure: 0",
    )
    p.add_argument("--alpha", type=float, default=0.1, help="two-stage: LASSO alpha of each block")
    p.add_argument(
        "--clip",
        action="store_true",
        help="clip each record to the bounds instead of refusing data outside them "
        "(dp-sis: |x_ij|, |y_i| <= 1; bss: --x-bound, --y-bound)",
    )
    g = p.add_argument_group("best subset selection (bss-top-r, bss-mistakes; seed 002)")
    g.add_argument(
        "--loss",
        choices=("squared", "hinge"),
        default="squared",
        help="least squares with ridge, or hinge (binary stores, labels mapped to -1/+1)",
    )
    g.add_argument("--r", type=float, default=1.1, help="l2-ball radius of the coefficients")
    g.add_argument("--ridge", type=float, default=None, help="ridge (default 120 squared, 100 hinge)")
    g.add_argument("--x-bound", type=float, default=0.5, help="Assumption 1: |x_ij| <= x_bound")
    g.add_argument("--y-bound", type=float, default=0.5, help="Assumption 1: |y_i| <= y_bound (squared loss)")
    g.add_argument(
        "--tol",
        type=float,
        default=1e-3,
        help="certified tolerance as a fraction of the sensitivity (paid for in the sampling rate)",
    )
    g.add_argument(
        "--nonprivate-time-limit",
        type=float,
        default=None,
        metavar="SECONDS",
        help="OUTSIDE THE PRIVACY GUARANTEE: seconds per MIP solve, past which the release aborts "
        "(whether it does depends on the data; the ledger marks the release not covered). "
        "Default: none, every solve runs to its certificate",
    )
    g.add_argument("--time-limit", type=float, default=None, help=argparse.SUPPRESS)  # removed: a clear error
    g.add_argument("--ptr-fraction", type=float, default=0.5, help="bss-mistakes: share of epsilon for the gap test")
    p.add_argument(
        "--n-blocks",
        type=int,
        default=None,
        help="two-stage: a public number of blocks (default: floor(sqrt) of a noisy row count)",
    )
    p.add_argument(
        "--stage2",
        type=float,
        default=None,
        metavar="EPSILON",
        help="also release a model on the selected features by objective perturbation at this epsilon",
    )
    _release_args(p)
    p.set_defaults(func=_select)

    p = sub.add_parser("train", help="a private linear model (charges the ledger before output)")
    p.add_argument("store")
    p.add_argument(
        "--method",
        default=DEFAULT_LEARNER,
        choices=(*GRADIENT_METHODS, "dp-fw", "fast-dp-fw", "fw", "fast-fw", "rnm-screen", "adp-screen"),
        help="select-train (default: the best measured, benchmarks/utility.py), dp-sgd, dp-gd, dp-iht; "
        "the Frank-Wolfe methods (need --lam, --iters); rnm-screen / adp-screen: fast DP-FW with "
        "RNM-Screen / ADP-Screen (seeds 000/001)",
    )
    p.add_argument(
        "--tune",
        action="store_true",
        help="release the private choice among the default grid of learners (dpdist.tuning; one charge)",
    )
    p.add_argument("--k", type=int, default=None, help="select-train: columns screened; dp-iht: non-zero weights")
    p.add_argument(
        "--n-records",
        type=int,
        default=None,
        help="gradient learners: a public count of the train rows (default: a noisy count, released "
        "first at --count-epsilon)",
    )
    p.add_argument("--count-epsilon", type=float, default=0.01, help="gradient learners: the count's epsilon")
    p.add_argument(
        "--loss",
        choices=("logistic", "squared"),
        default=None,
        help="default: logistic for a binary store, squared for a regression store",
    )
    p.add_argument(
        "--lam",
        type=float,
        default=None,
        help="Frank-Wolfe: L1-ball radius lambda (required; the main job's 500 suits unit-norm rows of "
        "~50k features; benchmarks/utility.py measures it)",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=None,
        help="Frank-Wolfe: iterations T (required; the main job's 1000; more steps, more noise per step)",
    )
    p.add_argument("--epsilon", type=float, default=None, help="the model's privacy loss (required)")
    p.add_argument("--delta", type=float, default=1e-6)
    p.add_argument("--y-bound", type=float, default=1.0, help="squared loss: public bound on |y|")
    p.add_argument("--features", default=None, help="JSON written by 'dpdist select --out': train on those columns")
    p.add_argument(
        "--test-fraction",
        type=float,
        default=0.2,
        help="held-out records (each by its keyed hash; 0: train on all, no metrics)",
    )
    p.add_argument(
        "--eval-epsilon",
        type=float,
        default=0.1,
        help="epsilon of the private held-out metrics (charged on top of --epsilon)",
    )
    p.add_argument(
        "--calibration",
        choices=("safe", "paper"),
        default="safe",
        help="safe: eps0 from tight (zCDP) accounting; paper: seed 004's eps/sqrt(8T ln(1/delta))",
    )
    p.add_argument("--clip", action="store_true", help="clip |x_ij| (and |y_i|) to the bounds instead of refusing")
    p.add_argument("--non-private", action="store_true", help="required for fw/fast-fw (no noise, no charge)")
    p.add_argument(
        "--screen-epsilon", type=float, default=None, help="screening: its epsilon (eps2, on top of --epsilon)"
    )
    p.add_argument("--screen-delta", type=float, default=None, help="screening: its delta (delta2)")
    p.add_argument(
        "--screen-rho",
        type=float,
        default=None,
        help="screening: its budget as zCDP rho (instead of --screen-epsilon/--screen-delta)",
    )
    p.add_argument("--screen-every", type=int, default=None, help="screen every M-th iteration (default: every one)")
    p.add_argument("--screen-at", default=None, help="screen at these iterations (comma-separated)")
    p.add_argument(
        "--screen-rule",
        choices=("safe", "seed"),
        default="safe",
        help="safe: the corrected safe rule; seed: the seeds' printed rule",
    )
    p.add_argument(
        "--n-max",
        type=int,
        default=None,
        help="screening: a public upper bound on the number of training records (required)",
    )
    _release_args(p)
    p.set_defaults(func=_train)

    p = sub.add_parser("evaluate", help="a released model's exact metrics on a test file you declare public")
    p.add_argument("model", help="a model record (`dpdist models export` writes one), or a release key in the ledger")
    p.add_argument(
        "--public-test",
        required=True,
        help="an svmlight file, a table or a store whose records are public (exact metrics)",
    )
    p.add_argument("--zero-based", choices=("no", "yes"), default="no", help="svmlight: the file's index base")
    p.add_argument("--target", default=None, help="tables: the target column (default: the last)")
    p.add_argument("--dataset", default=None, help="with a key: the dataset it was released on")
    _common(p)
    p.set_defaults(func=_evaluate)

    budget = sub.add_parser("budget", help="privacy budgets and the audit trail")
    bsub = budget.add_subparsers(dest="budget_command", required=True)

    p = bsub.add_parser("init", help="set a dataset's total (epsilon, delta) budget (permanent)")
    p.add_argument("store", help="the store (written by ingest/synth) whose data the budget covers")
    p.add_argument("--name", default=None, help="the dataset's public name (default: the store's name)")
    p.add_argument("--epsilon", required=True, type=float)
    p.add_argument("--delta", required=True, type=float)
    _common(p)
    p.set_defaults(func=_budget_init)

    p = bsub.add_parser("show", help="spent and remaining budget")
    p.add_argument("--dataset", default=None, help="a dataset's public name, or a store")
    _common(p)
    p.set_defaults(func=_budget_show)

    p = bsub.add_parser("history", help="every release charged to a dataset, with its recorded result")
    p.add_argument("--dataset", required=True, help="a dataset's public name, or a store")
    _common(p)
    p.set_defaults(func=_budget_history)
    models = sub.add_parser("models", help="released models and selections, read back from the ledger")
    msub = models.add_subparsers(dest="models_command", required=True)
    p = msub.add_parser("list", help="every release with a recorded result")
    p.add_argument("--dataset", default=None, help="a dataset's public name, or a store")
    _common(p)
    p.set_defaults(func=_models)
    for name, what in (
        ("show", "print a release's record (its loss and result)"),
        ("export", "write a release's record to a file (loads with from_release)"),
    ):
        p = msub.add_parser(name, help=what)
        p.add_argument("key", help="the release key (printed by train/select/run; `dpdist models list`)")
        p.add_argument("--dataset", default=None, help="a dataset's public name, or a store")
        if name == "export":
            p.add_argument("--out", required=True, help="JSON file to write (atomically)")
        _common(p)
        p.set_defaults(func=_models)

    p = sub.add_parser("run", help="the main job: the end-to-end Prefect flow on a Dask cluster")
    p.add_argument(
        "config",
        nargs="?",
        default=None,
        help="run config (TOML or YAML; default: the embedded defaults, see flows/defaults.toml)",
    )
    p.add_argument("--output", default=None, help="output directory (overrides the config's)")
    p.add_argument("--seed", type=int, default=None, help="reproducible noise (experiments only)")
    p.add_argument(
        "--plan",
        action="store_true",
        help="print every release the run would make, its cost and whether the budget holds it; run nothing",
    )
    _common(p)
    p.set_defaults(func=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on bad arguments
    args.argv = list(sys.argv[1:] if argv is None else argv)
    _logging(args.verbose)
    if not args.verbose:
        import warnings

        warnings.formatwarning = _one_line_warning  # type: ignore[assignment]
    os.environ.setdefault(operator_log.ON_ENV, "1")  # timings on this terminal (and its children's) only
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("dpdist: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BudgetExceeded as e:
        print(f"dpdist: {e}", file=sys.stderr)
        return EXIT_BUDGET
    except (ParameterError, UnknownDataset, ReleaseKeyConflict) as e:
        print(f"dpdist: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DPDistError as e:
        print(f"dpdist: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as e:  # a full disk, a read-only or forbidden path: one line; any other OSError is a bug's
        line = file_failure(e)
        if line is None:
            raise
        if e.errno in SPACE_ERRNOS and getattr(args, "out", None):  # (the file that ran out is not named)
            line += f" (writing {args.out})"  # the one file or store the command writes
        elif e.errno in SPACE_ERRNOS and getattr(args, "run_output", None):
            line += f" (the run's output: {args.run_output})"  # one of the places a run writes
        print(f"dpdist: error: {line}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
