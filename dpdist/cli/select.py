"""``dpdist select``: private feature selection (DP-SIS, two-stage, best subset selection).

``--epsilon``/``--delta`` are what the command spends in all (:class:`dpdist.cli._common.CommandPlan`):
``--stage2 E2`` also releases a model on the selected features by objective perturbation at E2, a part of
``--epsilon``, and the selection gets the rest. The whole plan is checked against the command's own budget
and the dataset's before the store's data is read or anything is charged; the ledger is charged before
anything is printed.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from dpdist.cli._common import (
    EXIT_OK,
    CommandPlan,
    _emit,
    _noise_seed,
    _progress_bar,
    _release_args,
    _release_key,
    _write_out,
    command_delta,
)
from dpdist.exceptions import ParameterError
from dpdist.methods import BSS_RIDGE, bss_ridge, get, names
from dpdist.utils.operator_log import timing

if TYPE_CHECKING:
    import numpy as np

    from dpdist.data.store import SparseStore
    from dpdist.privacy.accountant import Accountant
    from dpdist.selection.best_subset.base import BSSSelectorBase

BSS_METHODS = names("best-subset", front_end="cli")
SECOND_STAGE = names(family="objective-perturbation")[0]  # --stage2: a model on the released features


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``select`` command's arguments."""
    p = sub.add_parser("select", help="private feature selection (charges the ledger before printing)")
    p.add_argument("store", help="store written by ingest/synth")
    p.add_argument("--method", required=True, choices=names(("selection", "best-subset"), front_end="cli"))
    p.add_argument("--k", required=True, type=int, help="number of features to release (bss: the support size s)")
    p.add_argument(
        "--epsilon",
        required=True,
        type=float,
        help="what the command spends in all: --stage2 takes its epsilon out of it, the selection the rest (the "
        "split is shown before anything is charged)",
    )
    p.add_argument(
        "--delta",
        type=float,
        default=None,
        help="bss-mistakes: the command's delta in all (the propose-test-release runs at a quarter of it; default: "
        "a tenth of the budget's delta); the others are pure: 0",
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
        help="also release a model on the selected features by objective perturbation at this epsilon, taken out "
        "of --epsilon (which must be larger)",
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


def _bss_selector(args: argparse.Namespace, plan: CommandPlan) -> BSSSelectorBase:
    """The best subset selector the options describe, at the plan's share of the command's budget (bad options:
    a ParameterError, before any data)."""
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
        epsilon=plan.model_epsilon,
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
    if entry.param("delta") is None:  # pure epsilon-DP
        return entry.build(**common)
    return entry.build(**common, delta=plan.model_delta, ptr_fraction=args.ptr_fraction)


def _check_options(args: argparse.Namespace) -> None:
    """Refuse, before anything is read, a delta for a pure method and a ``--stage2`` that is not a part of
    ``--epsilon``."""
    if get(args.method).param("delta") is None:
        if args.delta is not None and args.delta != 0.0:
            raise ParameterError(f"--delta: {args.method} is pure epsilon-DP, so delta must be 0 (got {args.delta:g})")
        args.delta = 0.0  # (as the release key has always been derived)
    if args.stage2 is None:
        return
    if not args.stage2 > 0:
        raise ParameterError(f"--stage2 must be an epsilon > 0, got {args.stage2:g}")
    if not args.stage2 < args.epsilon:
        raise ParameterError(
            f"--stage2 {args.stage2:g} must be smaller than --epsilon {args.epsilon:g}: --epsilon is what the "
            "command spends in all, the stage-2 model a part of it and the selection the rest"
        )


def _plan(args: argparse.Namespace, budget_delta: float) -> CommandPlan:
    """The command's ``--epsilon``/``--delta`` split: its stage-2 model (``--stage2``) and the selection, which
    gets the rest (shown on stderr before anything is charged). A pure method's delta is 0; one that takes a
    delta (bss-mistakes) runs at the plan's quarter of the command's, ``--delta`` or a share of the budget's."""
    delta = get(args.method).param("delta")
    command = 0.0 if delta is None else command_delta(args, budget_delta)
    if delta is not None and not command > 0:
        raise ParameterError(f"--delta: {args.method} takes {delta.help}; pass --delta > 0, e.g. 1e-6")
    fixed = [] if args.stage2 is None else [("its stage-2 model", float(args.stage2))]
    plan = CommandPlan(args.epsilon, command, fixed, main="the selection")
    print(plan.text(), file=sys.stderr)
    return plan


def _select(args: argparse.Namespace) -> int:
    """``dpdist select``: check the options and the whole plan, release the selection (and ``--stage2``'s model),
    print it."""
    import time

    from dpdist.data.store import check_schema, column_ids, columns_named, open_store

    _check_options(args)
    store = open_store(args.store)
    check_schema(store)
    from dpdist.privacy.accountant import Accountant

    acc = Accountant(args.ledger)
    status = acc.status(acc.budget_of(store))  # fail before any computation when the dataset has no budget
    plan = _plan(args, status.delta_total)
    selector = _selector(args, plan)  # bad parameters: exit 2 before the data is read
    stage2 = _stage2_model(args, store, plan)
    key = _release_key(args, "select", args.method, status.name)
    replayed = acc.recorded(store.budget_id, key)
    _precheck(plan, acc, store.budget_id, [(key, selector)] + ([(f"{key}/stage2", stage2)] if stage2 else []))
    t0 = time.perf_counter()
    extra: dict[str, Any] = {}
    if args.method in BSS_METHODS:
        features = _select_bss(args, selector, store, acc, key)
    elif get(args.method).family == "sis":
        features = _select_dp_sis(args, selector, store, acc, key)
    else:
        features = _select_two_stage(selector, store, acc, key, extra)
    if stage2 is not None:
        extra["stage2"] = _stage2(stage2, store, features, acc, key)
    timing("%s: %.2f s", args.method, time.perf_counter() - t0)
    ids = column_ids(store.meta, features)
    payload = {
        "method": args.method,
        "k": args.k,
        "features": [int(i) for i in features],
        "epsilon": args.epsilon,
        "delta": plan.delta,
        "plan": plan.to_dict(),
        "dataset": status.name,
        "key": key,
        "ledger": str(acc.path),
        "replayed": replayed,
        "file_columns": ids,
        **extra,
    }

    def human() -> str:
        shown = ids.get("names") or ids["ids"]
        where = columns_named(ids)
        cost = plan.charged_text(replayed, key, plan.model_epsilon)
        return f"{args.method}: {args.k} features, as {where}: {shown} ({status.name}; {cost})"

    _write_out(args, payload)
    _emit(args, payload, human)
    return EXIT_OK


def _selector(args: argparse.Namespace, plan: CommandPlan) -> Any:
    """The selector of ``--method`` at the plan's share of the command's budget, its parameters checked."""
    entry = get(args.method)
    if args.method in BSS_METHODS:
        selector: Any = _bss_selector(args, plan)
    elif entry.family == "sis":
        selector = entry.build(
            k=args.k,
            epsilon=plan.model_epsilon,
            bounds="clip" if args.clip else "check",
            random_state=_noise_seed(args, "select/dp-sis"),
        )
    else:
        selector = entry.build(
            k=args.k,
            epsilon=plan.model_epsilon,
            alpha=args.alpha,
            n_blocks=args.n_blocks,
            random_state=_noise_seed(args, "select/two-stage"),
        )
    selector.check_params()
    return selector


def _precheck(plan: CommandPlan, acc: Accountant, dataset: str, releases: list[tuple[str, Any]]) -> None:
    """Check the whole plan -- every release's charges, (key, estimator) pairs -- against the command's own budget
    and the releases not recorded yet against the dataset's (a replay charges nothing): exit 3 before the data is
    read, and a budget that cannot pay the stage-2 model leaves the selection uncharged too."""
    plan.check([c.loss for _, est in releases for c in est.charges()])
    pending = [c for key, est in releases if not acc.recorded(dataset, key) for c in est.charges()]
    if pending:
        acc.check(dataset, *pending)


def _select_bss(
    args: argparse.Namespace, selector: BSSSelectorBase, store: SparseStore, acc: Accountant, key: str
) -> Any:
    """bss-top-r / bss-mistakes in this process: the released support."""
    from dpdist.selection.best_subset.executor import LocalExecutor
    from dpdist.selection.best_subset.objective import store_problem

    problem = store_problem(store, **selector.instance_params())  # Assumption 1 checked before the charge
    print(f"{args.method}: s={args.k} of {problem.p:,} features, {selector.loss} loss", file=sys.stderr)
    return selector.fit_executor(LocalExecutor(problem), acc, store.budget_id, key).support_


def _select_dp_sis(args: argparse.Namespace, sis: Any, store: SparseStore, acc: Accountant, key: str) -> Any:
    """DP-SIS: the released top-k of the private marginal scores X^T y."""
    from dpdist.selection.sis import store_scores

    with _progress_bar(args, "dp-sis: X^T y", None) as update:
        scores = store_scores(store, bounds=sis.bounds, progress=lambda done, total: update(done))
    return sis.fit_scores(scores, acc, store.budget_id, key).features_


def _select_two_stage(sel: Any, store: SparseStore, acc: Accountant, key: str, extra: dict[str, Any]) -> Any:
    """The two-stage selector: the released features; its number of blocks goes into ``extra``."""
    from dpdist.selection.sis import store_target

    features = sel.fit(store.csr(), store_target(store), acc, store.budget_id, key).features_
    extra["n_blocks"] = sel.n_blocks_
    return features


def _stage2_model(args: argparse.Namespace, store: SparseStore, plan: CommandPlan) -> Any:
    """``--stage2``'s model (None without it): objective perturbation at its part of the plan."""
    if args.stage2 is None:
        return None
    ((_, epsilon),) = plan.fixed
    model = get(SECOND_STAGE).build(
        store.task,
        epsilon=epsilon,
        random_state=_noise_seed(args, "select/stage2"),
        classes=[-1.0, 1.0],  # store_target's (dropped for a regression)
    )
    model.check_params()
    return model


def _stage2(model: Any, store: SparseStore, features: np.ndarray, acc: Accountant, key: str) -> dict[str, Any]:
    """``--stage2``: a model on the selected features by objective perturbation, released under ``key/stage2``."""
    from dpdist.selection.sis import store_target
    from dpdist.selection.two_stage import fit_on_support

    coef = fit_on_support(model, store.csr(), store_target(store), features, acc, store.budget_id, f"{key}/stage2")
    return {
        "key": f"{key}/stage2",
        "epsilon": float(model.epsilon),
        "loss": model.loss,
        "indices": [int(i) for i in features],
        "values": coef.tolist(),
    }
