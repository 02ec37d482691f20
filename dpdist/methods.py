"""The registry of dpdist's methods: one entry per name the CLI, the run config and the plan accept,
and the one factory of their estimators (:meth:`Method.build`).

Each entry (:class:`Method`) says what the name is (its ``kind``: a selection, a best subset
selection, a learner or a screening learner), which estimator it builds (by import path: this module
imports no estimator, so it stays light -- the CLI's parser and the run config's checks read it before
any numerical library is loaded -- and stands below everything it names), the parameters it sets on
that estimator by default, the public parameters it takes from ``[select]`` / ``[train]`` (and the
CLI), and the flags the command line, the flows and the pipelines act on instead of method names.
Every estimator then charges through the release skeleton's ``privacy_charge`` (:mod:`dpdist.base`).
A new method is one entry in :data:`REGISTRY` (docs/contributing.md).

The defaults are those of :mod:`dpdist.defaults` (the main job's and the benchmarks' values).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from dpdist.defaults import BSS_RIDGE, FW_ITERS, FW_LAM, bss_ridge
from dpdist.exceptions import ParameterError

__all__ = [
    "BSS_RIDGE",
    "DEFAULT_LEARNER",
    "FW_ITERS",
    "FW_LAM",
    "GRADIENT_METHODS",
    "KINDS",
    "REGISTRY",
    "SEARCH",
    "Method",
    "Param",
    "bss_ridge",
    "get",
    "names",
]

KINDS = ("selection", "best-subset", "learner", "screening")
FRONT_ENDS = ("cli", "run")  # `dpdist select` / `dpdist train`, and the run config ([select], [train])


@dataclass(frozen=True)
class Param:
    """A public parameter a method takes: its run-config key (in the method's section, ``[select]`` /
    ``[train]``, or in ``section``), its type, what it means, and the estimator's parameter it sets
    (``estimator_name``, default the same name)."""

    name: str
    type: type
    help: str
    estimator_name: str | None = None
    section: str | None = None

    @property
    def target(self) -> str:
        """The estimator parameter this key sets."""
        return self.estimator_name or self.name


def _frozen(mapping: Mapping[str, Any] | None = None) -> Mapping[str, Any]:
    return MappingProxyType(dict(mapping or {}))


@dataclass(frozen=True)
class Method:
    """One registered method.

    Parameters
    ----------
    name : str
        The name the CLI and the run config accept.
    kind : str
        One of :data:`KINDS`.
    summary : str
        One line: what it releases.
    estimator : tuple of str
        Import paths ``"module:Class"`` of its estimator for a classification (binary) and a
        regression task (the same class twice when it has one for both; "" for a task it does not do).
    family : str
        The solver family ("frank-wolfe", "gradient", "search", "objective-perturbation", "sis", "ssp", "centroid",
        "two-stage", "bss").
    defaults : mapping
        The estimator parameters the method sets over the estimator's own defaults.
    params : tuple of Param
        The public parameters it takes from the run config (and the CLI).
    private : bool
        False for the non-private baselines (the CLI only: they release an un-noised model and
        refuse an accountant).
    front_ends : frozenset of str
        Where the name is accepted: "cli" (``dpdist select`` / ``dpdist train --method``), "run"
        (the run config's ``select.methods`` / ``train.methods``).
    task_defaults : mapping
        Parameters set for one task only (``{"binary": {...}, "regression": {...}}``).
    counted : bool
        Whether its charge depends on a public count of the training records (its estimator takes
        ``n_records``: the gradient learners and the search).
    row_blocks : bool
        Whether the flow runs its fit as a Dask reduction over the train store's row blocks
        (full-batch steps, :mod:`dpdist.pipelines.dp_gd`: it scales past one worker's memory) rather
        than on one solver worker.
    column_copy : bool
        Whether its solver reads the columns of the data: a fit on a store's every column reads the
        store's CSC copy instead of converting the rows.
    path : bool
        Whether it releases a Frank-Wolfe path (``dpdist train`` takes its ``--lam`` and ``--iters``).
    curve : bool
        Whether the private evaluation of its models releases a loss curve (along the Frank-Wolfe
        path; objective perturbation's evaluation has the curve part it was planned and charged with).
    on_selection : bool
        Whether it fits only the columns of a released selection (the run's ``train.features``).
    secret_duration : bool
        Whether its duration reveals a secret of its guarantee (the private search's number of runs):
        never timed, no progress shown.
    own_split : bool
        Whether it splits its training records itself, by a secret key of its own (the search's
        validation side).
    sparsity : str or None
        The estimator parameter a learner's ``--k`` sets (the released model's number of non-zero
        weights), or None when the learner takes no such bound.
    preflight : bool
        Whether ``dpdist train`` shows the pre-flight estimate (:mod:`dpdist.preflight`) of its plan
        before the model is charged (the default learner, whose plan the estimate simulates).
    """

    name: str
    kind: str
    summary: str
    estimator: tuple[str, str]
    family: str
    defaults: Mapping[str, Any] = field(default_factory=_frozen)
    params: tuple[Param, ...] = ()
    private: bool = True
    front_ends: frozenset[str] = frozenset(FRONT_ENDS)
    task_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=_frozen)
    counted: bool = False
    row_blocks: bool = False
    column_copy: bool = False
    path: bool = False
    curve: bool = False
    on_selection: bool = False
    secret_duration: bool = False
    own_split: bool = False
    sparsity: str | None = None
    preflight: bool = False

    def param(self, target: str) -> Param | None:
        """Its public parameter that sets the estimator parameter ``target``, if any."""
        return next((p for p in self.params if p.target == target), None)

    @property
    def tasks(self) -> tuple[str, ...]:
        """The tasks it has an estimator for ("binary", "regression")."""
        return tuple(task for task, path in zip(("binary", "regression"), self.estimator, strict=True) if path)

    def estimator_class(self, task: str = "binary") -> Any:
        """The estimator class for ``task``, imported now."""
        path = self.estimator[1 if task == "regression" else 0]
        if not path:
            raise ParameterError(f"method {self.name!r} has no estimator for a {task} task (it does {self.tasks})")
        module, _, attr = path.partition(":")
        return getattr(importlib.import_module(module), attr)

    def build(self, task: str = "binary", **params: Any) -> Any:
        """The estimator of this method for ``task`` ("binary" or "regression"): the method's defaults
        updated by ``params``. ``classes`` (a classification's public labels) is dropped for a regression."""
        kwargs = {**self.defaults, **self.task_defaults.get(task, {}), **params}
        if task == "regression":
            kwargs.pop("classes", None)
        return self.estimator_class(task)(**kwargs)

    def estimator_params(self, *sections: Any) -> dict[str, Any]:
        """The estimator parameters set by config sections (``[select]`` / ``[train]``, then ``[data]``):
        each of :attr:`params`, from the first section that holds it, under the estimator's name."""
        out: dict[str, Any] = {}
        for p in self.params:
            section = next((sec for sec in sections if hasattr(sec, p.name)), None)
            if section is not None:
                out[p.target] = getattr(section, p.name)
        return out


# ---------------------------------------------------------------------------------------- parameters

_EPS = Param("epsilon", float, "the release's epsilon")
_DELTA = Param("delta", float, "the release's delta")
_K = Param("k", int, "the number of features released")
_FW = (
    Param("lam", float, f"Frank-Wolfe's L1-ball radius lambda (default {FW_LAM:g}: unit-norm rows)"),
    Param("iters", int, f"Frank-Wolfe's number of steps T (default {FW_ITERS})", "max_iter"),
    Param("calibration", str, '"safe" (the tight accountant) or "paper" ([RKL23]\'s eps0, charged its true loss)'),
)
_SCREEN = (
    Param("screen_epsilon", float, "the screening's epsilon (with screen_delta; or screen_rho)"),
    Param("screen_delta", float, "the screening's delta"),
    Param("screen_rho", float, "the screening's budget as zCDP rho, instead of screen_epsilon/screen_delta"),
    Param("screen_schedule", object, "screen at every m-th iteration (an integer m) or at the listed iterations"),
    Param("screen_rule", str, '"safe" (the corrected rule, docs/algorithms.md §3) or "seed" (the printed one)'),
    Param("n_max", int, "a public upper bound on the number of train rows (the score's sensitivity)"),
)
_COUNT = Param("n_records", int, "the public count of the train rows (the batch rate and number of steps)")
_BSS = (
    Param("k", int, "the support size s", "s"),
    _EPS,
    Param("bss_loss", str, '"squared" (least squares, a regression store) or "hinge" (a binary one)', "loss"),
    Param("bss_r", float, "the l2-ball radius of the coefficients", "r"),
    Param(
        "bss_ridge",
        float,
        f"the ridge (default {BSS_RIDGE['squared']:g} squared, {BSS_RIDGE['hinge']:g} hinge)",
        "ridge",
    ),
    Param("bss_x_bound", float, "the public bound on |x_ij| (Assumption 1)", "x_bound"),
    Param("bss_y_bound", float, "the public bound on |y_i| (Assumption 1)", "y_bound"),
    Param(
        "bss_tol",
        float,
        "the certified tolerance of the inner solves, a fraction of the sensitivity (1e-6 to 0.05)",
        "tol",
    ),
    Param(
        "bss_nonprivate_time_limit",
        float,
        "seconds per MIP past which the release aborts: an operator's guard OUTSIDE the privacy guarantee "
        "(whether a solve hits it depends on the data; the ledger marks the release covered: false)",
        "nonprivate_time_limit",
    ),
)
_PTR = (
    Param(
        "bss_delta", float, "the delta of the propose-test-release gap check (charged: (epsilon, delta)-DP)", "delta"
    ),
    Param("bss_ptr_fraction", float, "the share of epsilon spent on the gap check", "ptr_fraction"),
)

_BOUNDS = Param(
    "bounds", str, '"check" refuses records outside the bounds before any charge, "clip" clips each', section="data"
)

_LM = ("dpdist.linear_model:DPFrankWolfeClassifier", "dpdist.linear_model:DPFrankWolfeRegressor")
_GM = "dpdist.gradient_models:"
_BSS_PATH = "dpdist.selection.best_subset:"


def _gradient(
    name: str, cls: str, summary: str, row_blocks: bool = False, sparsity: str | None = None, preflight: bool = False
) -> Method:
    return Method(
        name,
        "learner",
        summary,
        (f"{_GM}{cls}Classifier", f"{_GM}{cls}Regressor"),
        "gradient",
        params=(_EPS, _DELTA, _COUNT),
        counted=True,
        row_blocks=row_blocks,
        sparsity=sparsity,
        preflight=preflight,
    )


def _statistic(name: str, summary: str, estimator: tuple[str, str], family: str) -> Method:
    """A learner of one task (``dpdist.statistic_models``): the command line's; a run reaches it through
    auto's rule. It releases k-sparse models."""
    return Method(
        name, "learner", summary, estimator, family, params=(_EPS, _DELTA), front_ends=frozenset({"cli"}), sparsity="k"
    )


def _fw(name: str, summary: str, private: bool = True, screening: str | None = None) -> Method:
    defaults: dict[str, Any] = {"method": name, "lam": FW_LAM, "max_iter": FW_ITERS}
    if screening is not None:
        defaults.update(method="fast-dp-fw", screening=screening)
    return Method(
        name,
        "screening" if screening else "learner",
        summary,
        _LM,
        "frank-wolfe",
        _frozen(defaults),
        ((_EPS, _DELTA) if private else ()) + _FW + (_SCREEN if screening else ()) + (_BOUNDS,),
        private,
        frozenset(FRONT_ENDS) if private else frozenset({"cli"}),
        column_copy=defaults["method"] in ("fast-dp-fw", "fast-fw"),  # the fast solvers read columns
        path=True,
        curve=True,
    )


_METHODS = (
    Method(
        "dp-sis",
        "selection",
        "the top k of the private sure-independence-screening scores |X^T y| ([SKDRR24])",
        ("dpdist.selection.sis:DPSIS",) * 2,
        "sis",
        params=(_K, _EPS, _BOUNDS),
    ),
    Method(
        "two-stage",
        "selection",
        "LASSO supports of disjoint blocks, aggregated by noisy votes (sample and aggregate)",
        ("dpdist.selection.two_stage:TwoStageSelector",) * 2,
        "two-stage",
        params=(
            _K,
            _EPS,
            Param("alpha", float, "the LASSO penalty of each block"),
            Param("n_blocks", int, "the public number of disjoint blocks m"),
        ),
    ),
    Method(
        "bss-top-r",
        "best-subset",
        "best subset selection, the exponential mechanism over the top R supports ([DPBSS25])",
        (f"{_BSS_PATH}BSSTopRSelector",) * 2,
        "bss",
        params=_BSS + (_BOUNDS,),
    ),
    Method(
        "bss-mistakes",
        "best-subset",
        "best subset selection by the mistakes method with propose-test-release ([DPBSS25])",
        (f"{_BSS_PATH}BSSMistakesSelector",) * 2,
        "bss",
        params=_BSS + _PTR + (_BOUNDS,),
    ),
    _gradient(
        "auto",
        "Auto",
        "the learner the public rule picks for the kind of data (dpdist.gradient_models.default_learner)",
        preflight=True,
    ),
    _gradient("dp-sgd", "DPSGD", "DP-SGD with Poisson-sampled batches ([ACG+16])"),
    _gradient("select-train", "SelectTrain", "a private screening of k columns, then DP-SGD on them", sparsity="k"),
    _gradient("dp-gd", "DPGD", "full-batch DP gradient descent", row_blocks=True),
    _gradient("dp-iht", "DPIHT", "DP iterative hard thresholding", row_blocks=True, sparsity="s"),
    _statistic(
        "adassp",
        "least squares by perturbed sufficient statistics with an adaptive ridge ([Wan18])",
        ("", "dpdist.statistic_models.adassp:AdaSSPRegressor"),
        "ssp",
    ),
    _statistic(
        "screened-centroid",
        "a nearest-centroid classifier on k privately screened columns, for p >> n",
        ("dpdist.statistic_models.noisy_centroid:ScreenedCentroidClassifier", ""),
        "centroid",
    ),
    Method(
        "private-search",
        "learner",
        "the private choice among the default grid of learners ([PS22])",
        ("dpdist.tuning:PrivateSearchClassifier", "dpdist.tuning:PrivateSearchRegressor"),
        "search",
        params=(_EPS, _DELTA, _COUNT),
        front_ends=frozenset({"run"}),  # `dpdist train --tune`
        counted=True,
        secret_duration=True,  # its duration tells how many runs it made (dpdist.tuning)
        own_split=True,
    ),
    _fw("fast-dp-fw", "fast DP Frank-Wolfe: exponential-mechanism steps by the BSLS sampler ([RKL23])"),
    _fw("dp-fw", "DP Frank-Wolfe with Laplace report-noisy-max steps ([TTZ15])"),
    _fw("fw", "non-private Frank-Wolfe (a baseline)", private=False),
    _fw("fast-fw", "non-private fast Frank-Wolfe (a baseline)", private=False),
    _fw("rnm-screen", "fast DP-FW with RNM-Screen ([KLR23])", screening="rnm"),
    _fw("adp-screen", "fast DP-FW with ADP-Screen ([KLR25])", screening="adp"),
    Method(
        "objective-perturbation",
        "learner",
        "objective perturbation on a released selection ([KST12])",
        ("dpdist.solvers.objective_perturbation:ObjectivePerturbation",) * 2,
        "objective-perturbation",
        _frozen({"delta": 0.0}),  # pure epsilon-DP
        (_EPS,),
        front_ends=frozenset({"run"}),
        task_defaults=_frozen({"binary": _frozen({"loss": "logistic"}), "regression": _frozen({"loss": "squared"})}),
        curve=True,
        on_selection=True,
    ),
)

REGISTRY: Mapping[str, Method] = MappingProxyType({m.name: m for m in _METHODS})
if len(REGISTRY) != len(_METHODS):
    raise RuntimeError("dpdist.methods: a method name is registered twice")


def get(name: str) -> Method:
    """The registered method ``name``; ``ParameterError`` naming the registered ones otherwise."""
    try:
        return REGISTRY[name]
    except KeyError:
        raise ParameterError(f"unknown method {name!r} (one of {', '.join(REGISTRY)})") from None


def names(
    kind: str | tuple[str, ...] | None = None,
    *,
    family: str | tuple[str, ...] | None = None,
    front_end: str | None = None,
    private: bool | None = None,
    counted: bool | None = None,
) -> tuple[str, ...]:
    """The registered names, in registry order, of the given kind(s), family(ies), front end, privacy
    and need of a public count of the records."""
    kinds = (kind,) if isinstance(kind, str) else kind
    families = (family,) if isinstance(family, str) else family
    for k in kinds or ():
        if k not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {k!r}")
    return tuple(
        m.name
        for m in _METHODS
        if (kinds is None or m.kind in kinds)
        and (families is None or m.family in families)
        and (front_end is None or front_end in m.front_ends)
        and (private is None or m.private == private)
        and (counted is None or m.counted == counted)
    )


# the gradient learners; the first is the default learner of `dpdist train` and of the main job: the best
# mean held-out accuracy at epsilon = 1 over benchmarks/utility.py's data sets, each learner at its defaults
# (tests/test_benchmark_results.py checks it against the newest results file)
GRADIENT_METHODS = names(family="gradient")
DEFAULT_LEARNER = GRADIENT_METHODS[0]
SEARCH = names(family="search")[0]  # the private choice among the default grid (dpdist.tuning)
