"""``dpdist select``: private feature selection (DP-SIS, two-stage, best subset selection).

The ledger is charged before anything is printed; ``--stage2`` also releases a model on the
selected features by objective perturbation.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from dpdist.cli._common import (
    EXIT_OK,
    _charged_text,
    _emit,
    _noise_seed,
    _progress_bar,
    _release_args,
    _release_key,
    _write_out,
)
from dpdist.exceptions import ParameterError
from dpdist.methods import BSS_RIDGE, bss_ridge, get, names
from dpdist.privacy.accountant import Accountant
from dpdist.utils.operator_log import timing

if TYPE_CHECKING:
    import numpy as np

    from dpdist.data.store import SparseStore
    from dpdist.selection.best_subset.base import BSSSelectorBase

BSS_METHODS = names("best-subset", front_end="cli")
SECOND_STAGE = names(family="objective-perturbation")[0]  # --stage2: a model on the released features


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``select`` command's arguments."""
    p = sub.add_parser("select", help="private feature selection (charges the ledger before printing)")
    p.add_argument("store", help="store written by ingest/synth")
    p.add_argument("--method", required=True, choices=names(("selection", "best-subset"), front_end="cli"))
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
    _add_bss_args(p)
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


def _add_bss_args(p: argparse.ArgumentParser) -> None:
    """The options of best subset selection, in a group of their own."""
    g = p.add_argument_group("best subset selection (bss-top-r, bss-mistakes; [DPBSS25])")
    g.add_argument(
        "--loss",
        choices=("squared", "hinge"),
        default="squared",
        help="least squares with ridge, or hinge (binary stores, labels mapped to -1/+1)",
    )
    g.add_argument("--r", type=float, default=1.1, help="l2-ball radius of the coefficients")
    g.add_argument(
        "--ridge",
        type=float,
        default=None,
        help=f"ridge (default {BSS_RIDGE['squared']:g} squared, {BSS_RIDGE['hinge']:g} hinge)",
    )
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


def _bss_selector(args: argparse.Namespace) -> BSSSelectorBase:
    """The best subset selector the options describe (bad options: a ParameterError, before any data)."""
    if args.time_limit is not None:
        raise ParameterError(
            "--time-limit was removed: a time limit made a release's abort depend on the data, "
            "unprotected. Best subset selection now runs every solve to its certificate; an operator "
            "who wants a wall-clock guard anyway passes --nonprivate-time-limit SECONDS (outside the "
            "privacy guarantee, marked so in the ledger)"
        )
    ridge = args.ridge if args.ridge is not None else bss_ridge(args.loss)
    common: dict[str, Any] = dict(
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
    entry = get(args.method)
    delta = entry.param("delta")
    if delta is None:  # pure epsilon-DP
        return entry.build(**common)
    if not args.delta:
        raise ParameterError(f"--delta: {args.method} takes {delta.help}; pass --delta > 0, e.g. 1e-6")
    return entry.build(**common, delta=args.delta, ptr_fraction=args.ptr_fraction)


def _select(args: argparse.Namespace) -> int:
    """``dpdist select``: check the options, release the selection (and ``--stage2``'s model), print it."""
    import time

    from dpdist.data.store import check_schema, column_ids, columns_named, open_store

    if args.delta is None:
        args.delta = 0.0
    if args.delta != 0.0 and get(args.method).param("delta") is None:
        raise ParameterError(f"--delta: {args.method} is pure epsilon-DP, so delta must be 0 (got {args.delta:g})")
    if args.stage2 is not None and args.stage2 <= 0:
        raise ParameterError(f"--stage2 must be an epsilon > 0, got {args.stage2:g}")
    selector = _bss_selector(args) if args.method in BSS_METHODS else None
    if selector is not None:
        selector.check_params()  # bad parameters: exit 2 before the store is read
    store = open_store(args.store)
    check_schema(store)
    acc = Accountant(args.ledger)
    status = acc.status(acc.budget_of(store))  # fail before any computation when the dataset has no budget
    key = _release_key(args, "select", args.method, status.name)
    replayed = acc.recorded(store.budget_id, key)
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if selector is not None:
        features = _select_bss(args, selector, store, acc, key)
    elif get(args.method).family == "sis":
        features = _select_dp_sis(args, store, acc, key)
    else:
        features = _select_two_stage(args, store, acc, key, extra)
    if args.stage2 is not None:
        extra["stage2"] = _stage2(args, store, features, acc, key)
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

    also = () if args.stage2 is None else (("its stage-2 model", float(args.stage2)),)

    def human() -> str:
        shown = ids.get("names") or ids["ids"]
        where = columns_named(ids)
        return (
            f"{args.method}: {args.k} features, as {where}: {shown} ({status.name}; "
            f"{_charged_text(replayed, key, args.epsilon, args.delta, also, 'the selection')})"
        )

    _write_out(args, payload)
    _emit(args, payload, human)
    return EXIT_OK


def _select_bss(
    args: argparse.Namespace, selector: BSSSelectorBase, store: SparseStore, acc: Accountant, key: str
) -> Any:
    """bss-top-r / bss-mistakes in this process: the released support."""
    from dpdist.selection.best_subset.executor import LocalExecutor
    from dpdist.selection.best_subset.objective import store_problem

    acc.check(store.budget_id, *selector.charges())  # a refusal before any work
    problem = store_problem(
        store,
        selector.s,
        selector.loss,
        selector.r,
        selector.ridge_value(),
        selector.x_bound,
        selector.y_bound,
        selector.bounds,
    )  # Assumption 1 checked before the charge
    print(f"{args.method}: s={args.k} of {problem.p:,} features, {selector.loss} loss", file=sys.stderr)
    return selector.fit_executor(LocalExecutor(problem), acc, store.budget_id, key).support_


def _select_dp_sis(args: argparse.Namespace, store: SparseStore, acc: Accountant, key: str) -> Any:
    """DP-SIS: the released top-k of the private marginal scores X^T y."""
    from dpdist.selection.sis import store_scores

    sis = get(args.method).build(
        k=args.k,
        epsilon=args.epsilon,
        bounds="clip" if args.clip else "check",
        random_state=_noise_seed(args, "select/dp-sis"),
    )
    acc.check(store.budget_id, *sis.charges())  # a refusal before any work
    with _progress_bar(args, "dp-sis: X^T y", None) as update:
        scores = store_scores(store, bounds=sis.bounds, progress=lambda done, total: update(done))
    return sis.fit_scores(scores, acc, store.budget_id, key).features_


def _select_two_stage(
    args: argparse.Namespace, store: SparseStore, acc: Accountant, key: str, extra: dict[str, Any]
) -> Any:
    """The two-stage selector: the released features; its number of blocks goes into ``extra``."""
    from dpdist.selection.sis import store_target

    sel = get(args.method).build(
        k=args.k,
        epsilon=args.epsilon,
        alpha=args.alpha,
        n_blocks=args.n_blocks,
        random_state=_noise_seed(args, "select/two-stage"),
    )
    features = sel.fit(store.csr(), store_target(store), acc, store.budget_id, key).features_
    extra["n_blocks"] = sel.n_blocks_
    return features


def _stage2(
    args: argparse.Namespace, store: SparseStore, features: np.ndarray, acc: Accountant, key: str
) -> dict[str, Any]:
    """``--stage2``: a model on the selected features by objective perturbation, released under ``key/stage2``."""
    from dpdist.selection.sis import store_target
    from dpdist.selection.two_stage import fit_on_support

    model = get(SECOND_STAGE).build(
        store.task,
        epsilon=args.stage2,
        random_state=_noise_seed(args, "select/stage2"),
        classes=[-1.0, 1.0],  # store_target's (dropped for a regression)
    )
    coef = fit_on_support(model, store.csr(), store_target(store), features, acc, store.budget_id, f"{key}/stage2")
    return {
        "key": f"{key}/stage2",
        "epsilon": args.stage2,
        "loss": model.loss,
        "indices": [int(i) for i in features],
        "values": coef.tolist(),
    }
