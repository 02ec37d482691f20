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


def _dataset(acc: Accountant, ref: str) -> str:
    """The content hash a command refers to: a store's (a path) or the ledger's for a public name."""
    from dpdist.data.store import open_store

    if os.path.isdir(ref):
        return open_store(ref).dataset_id
    return acc.resolve(ref)


def _budget_init(args: argparse.Namespace) -> int:
    from dpdist.data.store import open_store

    store = open_store(args.store)
    acc = Accountant(args.ledger)
    status = acc.init_budget(store.dataset_id, args.epsilon, args.delta, args.name or store.name)
    payload = {"dataset": status.name, "epsilon_total": status.epsilon_total, "delta_total": status.delta_total}
    _emit(args, payload, lambda: f"budget of {status.name} ({args.store}): epsilon={status.epsilon_total:g} "
                                 f"delta={status.delta_total:g}, in {acc.path}")
    return EXIT_OK


def _format_status(s: dict[str, Any]) -> str:
    return (
        f"{s['dataset']}: epsilon spent {s['epsilon_spent']:.4g} of {s['epsilon_total']:g} at delta={s['delta_total']:g} "
        f"(tight composition; remaining {s['epsilon_remaining']:.4g}; basic composition would say "
        f"epsilon={s['epsilon_basic']:.4g}, delta={s['delta_basic']:.3g}), {s['releases']} release(s)"
    )


def _budget_show(args: argparse.Namespace) -> int:
    acc = Accountant(args.ledger)
    if args.dataset is not None:
        payload = acc.status(_dataset(acc, args.dataset)).to_dict()
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
    acc = Accountant(args.ledger)
    dataset = _dataset(acc, args.dataset)
    name = acc.name(dataset)
    releases = [r.to_dict(name) for r in acc.history(dataset)]
    payload = {"dataset": name, "releases": releases}

    def human() -> str:
        lines = [f"{r['time']}  {r['mechanism']:<28} eps={r['epsilon']:<10.4g} delta={r['delta']:<9.3g} "
                 f"{r['loss']:<28} {r['key']}" for r in releases]
        return "\n".join(lines) or f"no releases for {name}"

    _emit(args, payload, human)
    return EXIT_OK


# ----------------------------------------------------------------------- stores


def _emit_store(args: argparse.Namespace, meta: dict[str, Any], extra: dict[str, Any], what: str) -> None:
    """Ingest/synth output: the store, its public name and schema (no row count, no content hash)."""
    payload = {"store": str(args.out), "name": meta["name"], "n_features": meta["n_features"], "task": meta["task"],
               **extra}
    _emit(args, payload, lambda: f"{args.out}: {what}store {meta['name']}, {meta['n_features']} features, "
                                 f"task {meta['task']}")


def _ingest(args: argparse.Namespace) -> int:
    from dpdist.data.ingest import ingest_svmlight
    from dpdist.data.tables import ingest_table, is_table

    def progress(rows: int, text_bytes: int) -> None:
        print(f"\ringest: {rows:,} rows, {text_bytes / 1e6:,.1f} MB of text", end="", file=sys.stderr, flush=True)

    if is_table(args.src):
        meta = ingest_table(args.src, args.out, force=args.force, target=args.target, impute=args.impute,
                            name=args.name)
    else:
        meta = ingest_svmlight(
            args.src,
            args.out,
            force=args.force,
            zero_based=args.zero_based,
            n_features=args.n_features,
            task=args.task,
            progress=progress,
            name=args.name,
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
    meta = write_synthetic(args.name_, args.out, seed=args.seed, force=args.force, store_name=args.name, **params)
    _emit_store(args, meta, {"true_support": meta["true_support"]}, f"synthetic {args.name_}, ")
    return EXIT_OK


# ---------------------------------------------------------------------- select


def _progress(what: str) -> Callable[[int, int], None]:
    def report(done: int, total: int) -> None:
        print(f"\r{what}: {100.0 * done / max(total, 1):5.1f}%", end="" if done < total else "\n", file=sys.stderr,
              flush=True)

    return report


def _select(args: argparse.Namespace) -> int:
    import time
    import uuid

    from dpdist.data.store import open_store
    from dpdist.selection.sis import DPSIS, store_scores, store_target
    from dpdist.selection.two_stage import TwoStageSelector, fit_on_support
    from dpdist.solvers.objective_perturbation import ObjectivePerturbation

    if args.delta != 0.0:
        raise ParameterError(f"--delta: {args.method} is pure epsilon-DP, so delta must be 0 (got {args.delta:g})")
    if args.stage2 is not None and args.stage2 <= 0:
        raise ParameterError(f"--stage2 must be an epsilon > 0, got {args.stage2:g}")
    store = open_store(args.store)
    acc = Accountant(args.ledger)
    status = acc.status(store.dataset_id)  # fail before any computation when the dataset has no budget
    key = args.key or f"select-{args.method}-{uuid.uuid4().hex}"
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if args.method == "dp-sis":
        sis = DPSIS(args.k, args.epsilon, bounds="clip" if args.clip else "check", random_state=args.seed)
        acc.check(store.dataset_id, sis.privacy_charge())  # a refusal before any work
        scores = store_scores(store, bounds=sis.bounds, progress=_progress("dp-sis scores"))
        features = sis.fit_scores(scores, acc, store.dataset_id, key).features_
    else:
        sel = TwoStageSelector(args.k, args.epsilon, alpha=args.alpha, n_blocks=args.n_blocks, random_state=args.seed)
        features = sel.fit(store.csr(), store_target(store), acc, store.dataset_id, key).features_
        extra["n_blocks"] = sel.n_blocks_
    if args.stage2 is not None:
        model = ObjectivePerturbation("squared" if store.task == "regression" else "logistic", args.stage2,
                                      random_state=args.seed)
        coef = fit_on_support(model, store.csr(), store_target(store), features, acc, store.dataset_id,
                              f"{key}/stage2")
        extra["stage2"] = {"key": f"{key}/stage2", "epsilon": args.stage2, "loss": model.loss,
                           "indices": [int(i) for i in features], "values": coef.tolist()}
    print(f"{args.method}: {time.perf_counter() - t0:.2f} s", file=sys.stderr)
    payload = {"method": args.method, "k": args.k, "features": [int(i) for i in features], "epsilon": args.epsilon,
               "delta": 0.0, "dataset": status.name, "key": key, "ledger": str(acc.path), **extra}
    if args.out:
        write_json_atomic(args.out, payload)
    _emit(args, payload, lambda: f"{args.method}: {args.k} features {payload['features']} "
                                 f"(epsilon={args.epsilon:g} charged to {status.name}; recorded in {acc.path} "
                                 f"under {key})")
    return EXIT_OK


# ----------------------------------------------------------------------- train


def _train(args: argparse.Namespace) -> int:
    import secrets
    import time
    import uuid

    import numpy as np

    from dpdist.data.split import record_sides
    from dpdist.data.store import open_store
    from dpdist.evaluation import PrivateEvaluation, exact_metrics, sparse_coef
    from dpdist.linear_model import PRIVATE, SCREEN_METHODS, DPFrankWolfeClassifier, DPFrankWolfeRegressor
    from dpdist.selection.sis import store_target

    screening = SCREEN_METHODS.get(args.method)
    private = args.method in PRIVATE or screening is not None
    if not private and not args.non_private:
        raise ParameterError(f"--method {args.method} releases an un-noised model of the data; "
                             "pass --non-private to confirm (nothing is charged to the ledger)")
    if not 0.0 <= args.test_fraction < 1.0:
        raise ParameterError(f"--test-fraction must lie in [0, 1), got {args.test_fraction}")
    if args.eval_epsilon <= 0:
        raise ParameterError(f"--eval-epsilon must be > 0, got {args.eval_epsilon:g}")
    screen_opts = {k: getattr(args, k) for k in ("screen_epsilon", "screen_delta", "screen_rho", "n_max")
                   if getattr(args, k) is not None}
    if args.screen_every is not None and args.screen_at is not None:
        raise ParameterError("give --screen-every or --screen-at, not both")
    if screening is None and (screen_opts or args.screen_every is not None or args.screen_at is not None):
        raise ParameterError(f"--screen-* and --n-max are options of --method rnm-screen|adp-screen, "
                             f"not of {args.method}")
    schedule: Any = 1 if args.screen_every is None else args.screen_every
    if args.screen_at is not None:
        try:
            schedule = [int(t) for t in args.screen_at.split(",")]
        except ValueError:
            raise ParameterError(f"--screen-at must be a comma-separated list of iterations, "
                                 f"got {args.screen_at!r}") from None
    store = open_store(args.store)
    acc = Accountant(args.ledger) if private else None
    name = acc.status(store.dataset_id).name if acc is not None else store.name  # no budget: fail before the work
    if args.loss == "logistic" and store.task != "binary":
        raise ParameterError(f"--loss logistic needs a binary store; {args.store} is {store.task}")
    common = dict(epsilon=args.epsilon, delta=args.delta, lam=args.lam, max_iter=args.iters,
                  method="fast-dp-fw" if screening else args.method, calibration=args.calibration,
                  bounds="clip" if args.clip else "check", random_state=args.seed)
    if screening:
        common.update(screening=screening, screen_schedule=schedule, screen_rule=args.screen_rule, **screen_opts)
    model = DPFrankWolfeClassifier(**common) if args.loss == "logistic" else \
        DPFrankWolfeRegressor(**common, y_bound=args.y_bound)  # bad parameters: exit 2 before any work
    chosen = None
    if args.features:
        try:
            chosen = json.loads(open(args.features).read())["features"]
        except (OSError, ValueError, KeyError) as e:
            raise ParameterError(f"--features {args.features}: not a select result ({e})") from None
    if private:  # a refused budget: exit 3 before the data is read
        task = "binary" if args.loss == "logistic" else "regression"
        evaluation = [PrivateEvaluation(task, args.eval_epsilon, y_bound=args.y_bound).privacy_charge()] \
            if args.test_fraction > 0 else []
        acc.check(store.dataset_id, model.privacy_charge(len(chosen) if chosen is not None else store.shape[1]),
                  *evaluation)
    X, y = store.csr(), store_target(store)
    if chosen is not None:
        X = X[:, np.asarray(chosen, dtype=np.int64)]
    # each record's side from its own content and the dataset's secret key (dpdist.data.split)
    split_key = acc.split_key(store.dataset_id) if acc is not None else secrets.token_bytes(32)
    test = record_sides(X, y, split_key, args.test_fraction) if args.test_fraction > 0 else np.zeros(X.shape[0], bool)
    Xtr, ytr, Xte, yte = X[~test], y[~test], X[test], y[test]
    key = args.key or f"train-{args.method}-{uuid.uuid4().hex}"
    print(f"{args.method}: {args.iters} iterations ...", file=sys.stderr)
    t0 = time.perf_counter()
    model.fit(Xtr, ytr, acc, store.dataset_id if acc else None, key if acc else None)
    seconds = time.perf_counter() - t0
    print(f"{args.method}: {seconds:.2f} s, {1e3 * seconds / args.iters:.4f} ms/iteration", file=sys.stderr)
    coef = {"indices": np.flatnonzero(model.coef_).tolist(), "values": model.coef_[model.coef_ != 0].tolist()}
    payload: dict[str, Any] = {"method": args.method, "loss": args.loss, "nnz_weights": len(coef["indices"]),
                               "density": len(coef["indices"]) / X.shape[1], "iterations": args.iters,
                               "dataset": name, "private": private}
    if private:
        charge = model.privacy_charge()
        payload.update(epsilon=args.epsilon, delta=args.delta, true_epsilon=charge.epsilon, key=key,
                       ledger=str(acc.path), rho=charge.loss.rho)
        if screening:
            payload.update(screen_epsilon=args.screen_epsilon, screen_delta=args.screen_delta,
                           screen_rho=args.screen_rho, screen_schedule=schedule, n_max=args.n_max,
                           fw_epsilon=charge.details["fw_epsilon"], screened=len(model.screened_ or []))
    else:  # a non-private run: its timing is the operator's own
        payload.update(seconds=round(seconds, 4), seconds_per_iter=seconds / args.iters)
    if args.test_fraction > 0:
        task = "binary" if args.loss == "logistic" else "regression"
        w = sparse_coef(coef["indices"], coef["values"], X.shape[1])
        path = [int(v) for v in model.path_] if model.path_ is not None else []
        if private:
            ev = PrivateEvaluation(task, args.eval_epsilon, y_bound=args.y_bound, random_state=args.seed)
            screened = model.screened_
            metrics = acc.release(store.dataset_id, ev.privacy_charge(), f"{key}/evaluation",
                                  lambda: ev.evaluate(w, path, args.lam, Xte, yte, screened),
                                  {"model": key, "epsilon": args.eval_epsilon})
            payload.update(eval_epsilon=args.eval_epsilon, eval_key=f"{key}/evaluation")
        else:
            metrics = exact_metrics(task, w, Xte, yte)
        payload.update({k: metrics[k] for k in ("accuracy", "auc", "mse", "r2", "rows") if k in metrics})
    if args.out:
        write_json_atomic(args.out, {**payload, "coef": coef})

    def human() -> str:
        def f(v: float | None, spec: str) -> str:
            return "undefined" if v is None else format(v, spec)

        if "accuracy" in payload:
            metric = f"held-out accuracy {f(payload['accuracy'], '.4f')}, AUC {f(payload['auc'], '.4f')}"
        elif "mse" in payload:
            metric = f"held-out MSE {f(payload['mse'], '.5g')}, R^2 {f(payload['r2'], '.4f')}"
        else:
            metric = "no held-out rows"
        where = f"; recorded in {acc.path} under {key}" if private else " (non-private)"
        return (f"{args.method} ({args.loss}, lam={args.lam:g}, T={args.iters}): {metric}"
                f"{' (private)' if private and args.test_fraction > 0 else ''}, {payload['nnz_weights']} non-zero "
                f"weights (density {payload['density']:.3g}){where}")

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
        lines = [f"flow run {summary['flow_run']}, dataset {summary['dataset']}"]
        lines += [f"  {s['step']:<9} {len(s.get('releases', []))} release(s)" for s in summary["steps"]]
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
    p.add_argument("--name", default=None, help="the store's public name (default: random)")
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
    p.add_argument("--method", required=True, choices=("dp-sis", "two-stage"))
    p.add_argument("--k", required=True, type=int, help="number of features to release")
    p.add_argument("--epsilon", required=True, type=float)
    p.add_argument("--delta", type=float, default=0.0, help="both methods are pure epsilon-DP: must be 0")
    p.add_argument("--alpha", type=float, default=0.1, help="two-stage: LASSO alpha of each block")
    p.add_argument("--clip", action="store_true",
                   help="dp-sis: clip |x_ij| and |y_i| to 1 instead of refusing data outside the bounds")
    p.add_argument("--n-blocks", type=int, default=None,
                   help="two-stage: a public number of blocks (default: floor(sqrt) of a noisy row count)")
    p.add_argument("--stage2", type=float, default=None, metavar="EPSILON",
                   help="also release a model on the selected features by objective perturbation at this epsilon")
    _release_args(p)
    p.set_defaults(func=_select)

    p = sub.add_parser("train", help="L1-constrained (DP) Frank-Wolfe model (charges the ledger before output)")
    p.add_argument("store")
    p.add_argument("--method", required=True, choices=("dp-fw", "fast-dp-fw", "fw", "fast-fw", "rnm-screen",
                                                          "adp-screen"),
                   help="rnm-screen / adp-screen: fast DP-FW with RNM-Screen / ADP-Screen (seeds 000/001)")
    p.add_argument("--loss", required=True, choices=("logistic", "squared"))
    p.add_argument("--lam", type=float, required=True, help="L1-ball radius lambda")
    p.add_argument("--iters", type=int, required=True, help="Frank-Wolfe iterations T")
    p.add_argument("--epsilon", type=float, default=1.0)
    p.add_argument("--delta", type=float, default=1e-6)
    p.add_argument("--y-bound", type=float, default=1.0, help="squared loss: public bound on |y|")
    p.add_argument("--features", default=None, help="JSON written by 'dpdist select --out': train on those columns")
    p.add_argument("--test-fraction", type=float, default=0.2,
                   help="held-out records (each by its keyed hash; 0: train on all, no metrics)")
    p.add_argument("--eval-epsilon", type=float, default=0.1,
                   help="epsilon of the private held-out metrics (charged on top of --epsilon)")
    p.add_argument("--calibration", choices=("safe", "paper"), default="safe",
                   help="safe: eps0 from tight (zCDP) accounting; paper: seed 004's eps/sqrt(8T ln(1/delta))")
    p.add_argument("--clip", action="store_true", help="clip |x_ij| (and |y_i|) to the bounds instead of refusing")
    p.add_argument("--non-private", action="store_true", help="required for fw/fast-fw (no noise, no charge)")
    p.add_argument("--screen-epsilon", type=float, default=None, help="screening: its epsilon (eps2, on top of --epsilon)")
    p.add_argument("--screen-delta", type=float, default=None, help="screening: its delta (delta2)")
    p.add_argument("--screen-rho", type=float, default=None, help="screening: its budget as zCDP rho (instead of "
                                                                      "--screen-epsilon/--screen-delta)")
    p.add_argument("--screen-every", type=int, default=None, help="screen every M-th iteration (default: every one)")
    p.add_argument("--screen-at", default=None, help="screen at these iterations (comma-separated)")
    p.add_argument("--screen-rule", choices=("safe", "seed"), default="safe",
                   help="safe: the corrected safe rule; seed: the seeds' printed rule")
    p.add_argument("--n-max", type=int, default=None,
                   help="screening: a public upper bound on the number of training records (required)")
    _release_args(p)
    p.set_defaults(func=_train)

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
