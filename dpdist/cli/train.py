"""``dpdist train``: a private linear model, charged to the ledger before anything is printed.

The gradient learners and ``--tune`` are in :mod:`dpdist.cli.train_gradient`, the Frank-Wolfe
methods (with or without DP screening) in :mod:`dpdist.cli.train_frank_wolfe`.
"""

from __future__ import annotations

import argparse

from dpdist.cli._common import _release_args
from dpdist.cli.train_frank_wolfe import _train_frank_wolfe
from dpdist.cli.train_gradient import _train_gradient
from dpdist.defaults import FW_ITERS, FW_LAM
from dpdist.exceptions import ParameterError
from dpdist.methods import DEFAULT_LEARNER, get, names


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``train`` command's arguments."""
    p = sub.add_parser("train", help="a private linear model (charges the ledger before output)")
    p.add_argument("store")
    learners = names(("learner", "screening"), front_end="cli")
    p.add_argument(
        "--method",
        default=DEFAULT_LEARNER,
        choices=learners,
        help=f"the learner, one of {', '.join(learners)} (docs/reference/config.md: what each releases); default "
        f"{DEFAULT_LEARNER}, the best measured over the benchmark's data sets (benchmarks/utility.py); the "
        "Frank-Wolfe ones need --lam and --iters",
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
    _add_model_args(p)
    _add_screening_args(p)
    _release_args(p)
    p.set_defaults(func=_train)


def _add_model_args(p: argparse.ArgumentParser) -> None:
    """Frank-Wolfe's parameters, the privacy loss, the features and the held-out metrics."""
    p.add_argument(
        "--lam",
        type=float,
        default=None,
        help=f"Frank-Wolfe: L1-ball radius lambda (required; the main job's {FW_LAM:g} suits unit-norm rows of "
        "~50k features; benchmarks/utility.py measures it)",
    )
    p.add_argument(
        "--iters",
        type=int,
        default=None,
        help=f"Frank-Wolfe: iterations T (required; the main job's {FW_ITERS}; more steps, more noise per step)",
    )
    p.add_argument(
        "--epsilon",
        type=float,
        default=None,
        help="what the command spends in all (required): its record count, held-out metrics and screening take "
        "their own epsilons out of it, the model the rest (the split is shown before anything is charged)",
    )
    p.add_argument(
        "--delta",
        type=float,
        default=None,
        help="the command's delta in all (default: a tenth of the budget's delta, so several commands fit in it)",
    )
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
        help="epsilon of the private held-out metrics (taken out of --epsilon)",
    )
    p.add_argument(
        "--calibration",
        choices=("safe", "paper"),
        default="safe",
        help="safe: eps0 from tight (zCDP) accounting; paper: [RKL23]'s eps/sqrt(8T ln(1/delta))",
    )
    p.add_argument("--clip", action="store_true", help="clip |x_ij| (and |y_i|) to the bounds instead of refusing")
    p.add_argument("--non-private", action="store_true", help="required for fw/fast-fw (no noise, no charge)")


def _add_screening_args(p: argparse.ArgumentParser) -> None:
    """The options of DP screening (rnm-screen, adp-screen)."""
    p.add_argument(
        "--screen-epsilon", type=float, default=None, help="screening: its epsilon (eps2, taken out of --epsilon)"
    )
    p.add_argument("--screen-delta", type=float, default=None, help="screening: its delta (delta2)")
    p.add_argument(
        "--screen-rho",
        type=float,
        default=None,
        help="screening: its budget as zCDP rho (instead of --screen-epsilon/--screen-delta; taken out of --epsilon as "
        "the epsilon it converts to at an eighth of --delta)",
    )
    p.add_argument("--screen-every", type=int, default=None, help="screen every M-th iteration (default: every one)")
    p.add_argument("--screen-at", default=None, help="screen at these iterations (comma-separated)")
    p.add_argument(
        "--screen-rule",
        choices=("safe", "seed"),
        default="safe",
        help="safe: the corrected safe rule; seed: the rule as [KLR23] and [KLR25] print it",
    )
    p.add_argument(
        "--n-max",
        type=int,
        default=None,
        help="screening: a public upper bound on the number of training records (required)",
    )


def _train(args: argparse.Namespace) -> int:
    """``dpdist train``: the privacy loss is required (or ``--non-private``); then the learner's own command."""
    if args.epsilon is None and not args.non_private:
        raise ParameterError(
            "--epsilon is required: the privacy loss of a release is the user's choice, never a "
            "default (a non-private baseline takes --non-private instead)"
        )
    if args.tune or not get(args.method).path:  # every learner but the Frank-Wolfe ones (--tune: the search)
        return _train_gradient(args)
    return _train_frank_wolfe(args)
