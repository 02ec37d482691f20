"""The ``dpdist`` command line (contract: ``../shared/spec/cli.md``).

Exit codes: 0 success; 2 bad arguments or input; 3 privacy budget refused; 1 anything else.
With ``--json`` exactly one JSON object is printed on stdout; messages go to stderr.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any

from dpdist.exceptions import BudgetExceeded, DPDistError, ParameterError, UnknownDataset
from dpdist.privacy.accountant import Accountant, default_ledger_path
from dpdist.utils.io import write_json_atomic

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_BUDGET = 0, 1, 2, 3


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument(
        "--ledger",
        default=None,
        help=f"privacy ledger (default: $DPDIST_LEDGER, else {default_ledger_path()})",
    )


def _release_args(parser: argparse.ArgumentParser) -> None:
    """Options of every command that releases a private result."""
    parser.add_argument("--key", default=None, help="release key (a retry with the same key replays the release)")
    parser.add_argument("--out", default=None, help="also write the JSON result to this file (atomically)")
    parser.add_argument("--seed", type=int, default=None, help="reproducible noise (experiments only)")
    _common(parser)


def _emit(args: argparse.Namespace, payload: dict[str, Any], human: Callable[[], str]) -> None:
    if args.json:
        sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    else:
        sys.stdout.write(human() + "\n")


# ----------------------------------------------------------------------- budget


def _budget_init(args: argparse.Namespace) -> int:
    status = Accountant(args.ledger).init_budget(args.dataset, args.epsilon, args.delta)
    payload = {"dataset": status.dataset, "epsilon_total": status.epsilon_total, "delta_total": status.delta_total}
    _emit(
        args,
        payload,
        lambda: f"budget of {status.dataset}: epsilon={status.epsilon_total:g} delta={status.delta_total:g}",
    )
    return EXIT_OK


def _format_status(s: dict[str, Any]) -> str:
    return (
        f"{s['dataset']}: epsilon spent {s['epsilon_spent']:g} of {s['epsilon_total']:g} "
        f"(remaining {s['epsilon_remaining']:g}), delta spent {s['delta_spent']:g} of {s['delta_total']:g}, "
        f"{s['releases']} release(s)"
    )


def _budget_show(args: argparse.Namespace) -> int:
    acc = Accountant(args.ledger)
    if args.dataset is not None:
        payload = acc.status(args.dataset).to_dict()
        _emit(args, payload, lambda: _format_status(payload))
    else:
        rows = [s.to_dict() for s in acc.datasets()]
        _emit(
            args,
            {"ledger": str(acc.path), "datasets": rows},
            lambda: "\n".join(_format_status(r) for r in rows) or f"no budgets in {acc.path}",
        )
    return EXIT_OK


def _budget_history(args: argparse.Namespace) -> int:
    releases = [r.to_dict() for r in Accountant(args.ledger).history(args.dataset)]
    payload = {"dataset": args.dataset, "releases": releases}

    def human() -> str:
        lines = [f"{r['time']}  {r['mechanism']:<24} eps={r['epsilon']:<10g} delta={r['delta']:<10g} {r['key']}"
                 for r in releases]
        return "\n".join(lines) or f"no releases for {args.dataset}"

    _emit(args, payload, human)
    return EXIT_OK


# ----------------------------------------------------------------------- stores


def _emit_store(args: argparse.Namespace, meta: dict[str, Any], extra: dict[str, Any], what: str) -> None:
    payload = {"store": str(args.out), **{k: meta[k] for k in ("dataset_id", "n_rows", "n_features", "nnz", "task")},
               **extra}
    _emit(
        args,
        payload,
        lambda: f"{args.out}: {what}{meta['n_rows']} x {meta['n_features']}, nnz {meta['nnz']}, "
        f"task {meta['task']}, dataset id {meta['dataset_id']}",
    )



def _ingest(args: argparse.Namespace) -> int:
    from dpdist.data.ingest import ingest_svmlight
    from dpdist.data.tables import ingest_table, is_table

    def progress(rows: int, text_bytes: int) -> None:
        print(f"\ringest: {rows:,} rows, {text_bytes / 1e6:,.1f} MB of text", end="", file=sys.stderr, flush=True)

    if is_table(args.src):
        meta = ingest_table(args.src, args.out, force=args.force, target=args.target, impute=args.impute)
    else:
        meta = ingest_svmlight(
            args.src,
            args.out,
            force=args.force,
            zero_based=args.zero_based,
            n_features=args.n_features,
            task=args.task,
            progress=progress,
        )
        print(file=sys.stderr)
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
    meta = write_synthetic(args.name, args.out, seed=args.seed, force=args.force, **params)
    _emit_store(args, meta, {"true_support": meta["true_support"]}, f"synthetic {args.name}, ")
    return EXIT_OK


# ---------------------------------------------------------------------- select


def _progress(what: str) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        print(f"\r{what}: {done:,}/{total:,} rows", end="" if done < total else "\n", file=sys.stderr, flush=True)

    return report


BSS_METHODS = {"bss-top-r": "top-r", "bss-mistakes": "mistakes"}


def _bss_selector(args: argparse.Namespace) -> Any:
    from dpdist.selection.best_subset import BSSMistakesSelector, BSSTopRSelector

    ridge = args.ridge if args.ridge is not None else (120.0 if args.loss == "squared" else 100.0)
    common = dict(s=args.k, epsilon=args.epsilon, loss=args.loss, r=args.r, ridge=ridge, x_bound=args.x_bound,
                  y_bound=args.y_bound, bounds="clip" if args.clip else "check", tol=args.tol,
                  time_limit=args.time_limit, random_state=args.seed)
    if args.method == "bss-top-r":
        return BSSTopRSelector(**common)
    if not args.delta:
        raise ParameterError("--delta: bss-mistakes is (epsilon, delta)-DP (its propose-test-release gap check "
                             "fails with probability delta); pass --delta > 0, e.g. 1e-6")
    return BSSMistakesSelector(**common, delta=args.delta, ptr_fraction=args.ptr_fraction)


def _select(args: argparse.Namespace) -> int:
    import time
    import uuid

    from dpdist.data.store import open_store
    from dpdist.selection.sis import DPSIS, store_scores, store_target
    from dpdist.selection.two_stage import TwoStageSelector

    bss = args.method in BSS_METHODS
    if args.delta is None:
        args.delta = 0.0
    if args.delta != 0.0 and args.method != "bss-mistakes":
        raise ParameterError(f"--delta: {args.method} is pure epsilon-DP, so delta must be 0 (got {args.delta:g})")
    selector = _bss_selector(args) if bss else None
    if selector is not None:
        selector._validate()  # bad parameters: exit 2 before the store is read
    store = open_store(args.store)
    acc = Accountant(args.ledger)
    acc.status(store.dataset_id)  # fail before any computation when the dataset has no budget
    key = args.key or f"select-{args.method}-{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    if bss:
        from dpdist.selection.best_subset.executor import LocalExecutor
        from dpdist.selection.best_subset.objective import store_problem

        problem = store_problem(store, selector.s, selector.loss, selector.r, selector.ridge, selector.x_bound,
                                selector.y_bound, selector.bounds)  # Assumption 1 checked before the charge
        print(f"{args.method}: s={args.k} of {problem.p:,} features, {selector.loss} loss", file=sys.stderr)
        features = selector.fit_executor(LocalExecutor(problem), acc, store.dataset_id, key).support_
    elif args.method == "dp-sis":
        sis = DPSIS(args.k, args.epsilon, bounds="clip" if args.clip else "check", random_state=args.seed)
        scores = store_scores(store, bounds=sis.bounds, progress=_progress("dp-sis scores"))
        features = sis.fit_scores(scores, acc, store.dataset_id, key).features_
    else:
        sel = TwoStageSelector(args.k, args.epsilon, alpha=args.alpha, random_state=args.seed)
        print(f"two-stage: {math.isqrt(store.shape[0])} LASSO blocks", file=sys.stderr)
        features = sel.fit(store.csr(), store_target(store), acc, store.dataset_id, key).features_
    seconds = time.perf_counter() - t0
    payload = {"method": args.method, "k": args.k, "features": [int(i) for i in features], "epsilon": args.epsilon,
               "delta": args.delta, "dataset_id": store.dataset_id, "key": key}
    if bss:  # the solvers' time is a statistic of the data: the terminal only, never the JSON
        print(f"{args.method}: released in {seconds:.2f} s", file=sys.stderr)
    else:
        payload["seconds"] = round(seconds, 4)
    if args.out:
        write_json_atomic(args.out, payload)
    _emit(args, payload, lambda: f"{args.method}: {args.k} features {payload['features']} "
                                 f"(epsilon={args.epsilon:g}, delta={args.delta:g} charged to {store.dataset_id})")
    return EXIT_OK


# ----------------------------------------------------------------------- train


def _train(args: argparse.Namespace) -> int:
    import uuid

    import numpy as np
    from sklearn.metrics import roc_auc_score

    from dpdist.data.store import open_store
    from dpdist.linear_model import PRIVATE, DPFrankWolfeClassifier, DPFrankWolfeRegressor

    private = args.method in PRIVATE
    if not private and not args.non_private:
        raise ParameterError(f"--method {args.method} releases an un-noised model of the data; "
                             "pass --non-private to confirm (nothing is charged to the ledger)")
    if not 0.0 <= args.test_fraction < 1.0:
        raise ParameterError(f"--test-fraction must lie in [0, 1), got {args.test_fraction}")
    store = open_store(args.store)
    acc = Accountant(args.ledger) if private else None
    if acc is not None:
        acc.status(store.dataset_id)  # no budget for this dataset: fail before the work
    X, y = store.csr(), store.y
    if args.features:
        try:
            chosen = json.loads(open(args.features).read())["features"]
        except (OSError, ValueError, KeyError) as e:
            raise ParameterError(f"--features {args.features}: not a select result ({e})") from None
        X = X[:, np.asarray(chosen, dtype=np.int64)]
    if args.loss == "logistic" and store.task != "binary":
        raise ParameterError(f"--loss logistic needs a binary store; {args.store} is {store.task}")
    split = np.random.default_rng(args.seed).random(X.shape[0]) < args.test_fraction  # public: record order only
    Xtr, ytr, Xte, yte = X[~split], y[~split], X[split], y[split]
    common = dict(epsilon=args.epsilon, delta=args.delta, lam=args.lam, max_iter=args.iters, method=args.method,
                  bounds="clip" if args.clip else "check", random_state=args.seed)
    model = DPFrankWolfeClassifier(**common) if args.loss == "logistic" else \
        DPFrankWolfeRegressor(**common, y_bound=args.y_bound)
    key = args.key or f"train-{args.method}-{uuid.uuid4().hex}"
    print(f"{args.method}: {args.iters} iterations on {Xtr.shape[0]:,} x {Xtr.shape[1]:,} ...", file=sys.stderr)
    model.fit(Xtr, ytr, acc, store.dataset_id if acc else None, key if acc else None)
    payload: dict[str, Any] = {"method": args.method, "loss": args.loss, "nnz_weights": int(np.count_nonzero(model.coef_)),
                               "iterations": args.iters, "seconds": round(model.seconds_, 4),
                               "seconds_per_iter": model.seconds_ / args.iters,
                               "epsilon": args.epsilon if private else None, "delta": args.delta if private else None,
                               "true_epsilon": model.privacy_.true_epsilon if model.privacy_ else None,
                               "dataset_id": store.dataset_id, "key": key if private else None,
                               "n_train": int(Xtr.shape[0]), "n_test": int(Xte.shape[0])}
    if Xte.shape[0]:
        if args.loss == "logistic":
            payload["accuracy"] = model.score(Xte, yte)
            pos = yte == model.classes_[1]
            payload["auc"] = float(roc_auc_score(pos, model.decision_function(Xte))) if 0 < pos.sum() < pos.size \
                else None
        else:
            payload["mse"] = float(np.mean((model.predict(Xte) - yte) ** 2))
    if args.out:
        write_json_atomic(args.out, {**payload, "coef": {"indices": np.flatnonzero(model.coef_).tolist(),
                                                          "values": model.coef_[model.coef_ != 0].tolist()}})

    def human() -> str:
        metric = (f"accuracy {payload.get('accuracy', float('nan')):.4f}, AUC {payload.get('auc') or float('nan'):.4f}"
                  if args.loss == "logistic" else f"MSE {payload.get('mse', float('nan')):.5g}")
        return (f"{args.method} ({args.loss}, lam={args.lam:g}, T={args.iters}): {metric}, "
                f"{payload['nnz_weights']} non-zero weights, {payload['seconds_per_iter'] * 1e3:.3f} ms/iteration")

    _emit(args, payload, human)
    return EXIT_OK


# ----------------------------------------------------------------------- parser


def _run(args: argparse.Namespace) -> int:
    """The main job: the end-to-end Prefect flow (flows.end_to_end) on the config's cluster."""
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    from flows.config import load_config
    from flows.end_to_end import end_to_end
    from flows.runtime import prefect_api

    overrides: dict[str, Any] = {}
    if args.ledger:
        overrides["ledger"] = args.ledger
    if args.output:
        overrides["output"] = args.output
    if args.seed is not None:
        overrides["seed"] = args.seed
    cfg = load_config(args.config, overrides)  # bad config: exit 2 before anything starts
    print(f"dpdist run: {cfg.name} ({cfg.source_file}): data {cfg.data.source}, cluster {cfg.cluster.kind}, "
          f"output {cfg.output}", file=sys.stderr, flush=True)
    with prefect_api() as api:
        print(f"Prefect API: {api}", file=sys.stderr, flush=True)
        summary = end_to_end(args.config, overrides)

    def human() -> str:
        lines = [f"flow run {summary['flow_run']}, dataset {summary['dataset_id']}"]
        lines += [f"  {s['step']:<9} {s['seconds']:8.1f} s" for s in summary["steps"]]
        lines.append(f"report: {summary['report']}")
        return "\n".join(lines)

    _emit(args, summary, human)
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="dpdist", description="Differentially private sparse regression and selection.")
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("ingest", help="svmlight/LIBSVM file (plain, .bz2, .xz, .gz) or a table -> zarr store")
    p.add_argument("src", help="svmlight file")
    p.add_argument("--out", required=True, help="store directory to create")
    p.add_argument("--force", action="store_true", help="replace an existing store")
    p.add_argument("--zero-based", choices=("auto", "yes", "no"), default="auto",
                   help="column indices start at 0 (auto: one-based unless an index 0 appears)")
    p.add_argument("--n-features", type=int, default=None, help="number of columns (default: largest index seen)")
    p.add_argument("--task", choices=("auto", "binary", "multiclass", "regression"), default="auto",
                   help="auto: binary when there are exactly two distinct labels, else regression")
    p.add_argument("--target", default=None,
                   help="tables (.csv, .data, .xlsx, .zip, .RData, .rda): target column (default: last)")
    p.add_argument("--impute", choices=("mean",), default=None,
                   help="tables: fill missing features with column means (data-dependent)")
    _common(p)
    p.set_defaults(func=_ingest)

    from dpdist.data.synthetic import GENERATORS

    p = sub.add_parser("synth", help="write a synthetic store (seed experiments; LIBSVM-shaped sparse sets)")
    p.add_argument("name", choices=sorted(GENERATORS))
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
    p.add_argument("--delta", type=float, default=None,
                   help="bss-mistakes: the propose-test-release delta (required, > 0); the others are pure: 0")
    p.add_argument("--alpha", type=float, default=0.1, help="two-stage: LASSO alpha of each block")
    p.add_argument("--clip", action="store_true",
                   help="clip each record to the bounds instead of refusing data outside them "
                        "(dp-sis: |x_ij|, |y_i| <= 1; bss: --x-bound, --y-bound)")
    g = p.add_argument_group("best subset selection (bss-top-r, bss-mistakes; seed 002)")
    g.add_argument("--loss", choices=("squared", "hinge"), default="squared",
                   help="least squares with ridge, or hinge (binary stores, labels mapped to -1/+1)")
    g.add_argument("--r", type=float, default=1.1, help="l2-ball radius of the coefficients")
    g.add_argument("--ridge", type=float, default=None, help="ridge (default 120 squared, 100 hinge)")
    g.add_argument("--x-bound", type=float, default=0.5, help="Assumption 1: |x_ij| <= x_bound")
    g.add_argument("--y-bound", type=float, default=0.5, help="Assumption 1: |y_i| <= y_bound (squared loss)")
    g.add_argument("--tol", type=float, default=1e-3,
                   help="certified tolerance as a fraction of the sensitivity (paid for in the sampling rate)")
    g.add_argument("--time-limit", type=float, default=600.0,
                   help="seconds per MIP solve; reaching it refuses the release (the charge is kept)")
    g.add_argument("--ptr-fraction", type=float, default=0.5, help="bss-mistakes: share of epsilon for the gap test")
    _release_args(p)
    p.set_defaults(func=_select)

    p = sub.add_parser("train", help="L1-constrained (DP) Frank-Wolfe model (charges the ledger before output)")
    p.add_argument("store")
    p.add_argument("--method", required=True, choices=("dp-fw", "fast-dp-fw", "fw", "fast-fw"))
    p.add_argument("--loss", required=True, choices=("logistic", "squared"))
    p.add_argument("--lam", type=float, required=True, help="L1-ball radius lambda")
    p.add_argument("--iters", type=int, required=True, help="Frank-Wolfe iterations T")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-6)
    p.add_argument("--y-bound", type=float, default=1.0, help="squared loss: public bound on |y|")
    p.add_argument("--features", default=None, help="JSON written by 'dpdist select --out': train on those columns")
    p.add_argument("--test-fraction", type=float, default=0.2, help="held-out rows (random, by record)")
    p.add_argument("--clip", action="store_true", help="clip |x_ij| (and |y_i|) to the bounds instead of refusing")
    p.add_argument("--non-private", action="store_true", help="required for fw/fast-fw (no noise, no charge)")
    _release_args(p)
    p.set_defaults(func=_train)

    budget = sub.add_parser("budget", help="privacy budgets and the audit trail")
    bsub = budget.add_subparsers(dest="budget_command", required=True)

    p = bsub.add_parser("init", help="set a dataset's total (epsilon, delta) budget")
    p.add_argument("--dataset", required=True, help="dataset id (the content hash recorded by ingest/synth)")
    p.add_argument("--epsilon", required=True, type=float)
    p.add_argument("--delta", required=True, type=float)
    _common(p)
    p.set_defaults(func=_budget_init)

    p = bsub.add_parser("show", help="spent and remaining budget")
    p.add_argument("--dataset", default=None)
    _common(p)
    p.set_defaults(func=_budget_show)

    p = bsub.add_parser("history", help="every release charged to a dataset")
    p.add_argument("--dataset", required=True)
    _common(p)
    p.set_defaults(func=_budget_history)
    p = sub.add_parser("run", help="the main job: the end-to-end Prefect flow on a Dask cluster")
    p.add_argument("config", nargs="?", default=None,
                   help="run config (TOML or YAML; default: the embedded defaults, see flows/defaults.toml)")
    p.add_argument("--output", default=None, help="output directory (overrides the config's)")
    p.add_argument("--seed", type=int, default=None, help="reproducible noise (experiments only)")
    _common(p)
    p.set_defaults(func=_run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on bad arguments
    try:
        return int(args.func(args))
    except BudgetExceeded as e:
        print(f"dpdist: budget refused: {e}", file=sys.stderr)
        return EXIT_BUDGET
    except (ParameterError, UnknownDataset) as e:
        print(f"dpdist: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DPDistError as e:
        print(f"dpdist: error: {e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
