"""What the two BSS selectors share: parameters, validation, the charge-then-compute release.

``fit`` validates the parameters and the data (Assumption 1) *before* anything is charged:
bad input is a ``ParameterError`` and costs nothing. Then, with an accountant, the release
goes through ``Accountant.release`` with ``privacy_charge()`` and every release parameter
(``release_params``): the charge is recorded first, the MIP pipeline and the sampler run
inside ``compute``, and the ledger records the released support -- or the refusal. The only
refusal is a failed propose-test-release check (mistakes method), a charged output of the
mechanism: it is raised inside ``compute`` as ``ReleaseRefused``, the accountant records it as
the release's outcome, the charge stands, and a retry with the same key raises it again.

No data-dependent stop: nothing stops the solver work (no time limit, iteration or list cap; every solve runs
to its certificate, a master in numerical trouble is solved again), so every run ends in the mechanism's own
output distribution and the charged loss covers it. The claim and why it holds:
[docs/proofs/selection-best_subset-no-stop.md][proof-bss-no-stop].

The operator's opt-in guard. ``nonprivate_time_limit`` (seconds per MIP; None by default) is
for an operator who prefers a bounded wait to the guarantee. A MIP that hits it aborts the
release before any noise is drawn (``SolverAborted``), recorded as the release's outcome with a
fixed public message (the charge stands; a retry under the key replays it). The abort is not
private, so such a release's charge is marked ``covered=False``: the ledger records the mark
(``budget history``, the run report show it) and the README says what it means.

The solvers' timings and diagnostics (``seconds_``, ``top_r_``, ``buckets_``) stay on the
estimator for the operator; they are statistics of the data and are never part of the release.
"""

from __future__ import annotations

import time
from abc import ABCMeta, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
from sklearn.feature_selection import SelectorMixin

from dpdist.base import PARAMETERS, PrivateEstimator, PurePrivacyParams, charged_to
from dpdist.defaults import bss_ridge
from dpdist.exceptions import DPDistError, ParameterError, ReleaseRefused, SolverAborted, SolverFailure
from dpdist.privacy.loss import Charge
from dpdist.selection.best_subset.executor import LocalExecutor
from dpdist.selection.best_subset.objective import BOUND_MODES, LOSSES, make_problem
from dpdist.utils.random import check_random_state
from dpdist.utils.validation import Between, Count, Epsilon, Options, Positive, check_positive

__all__ = ["BSSSelectorBase", "Refusal"]


class Refusal(DPDistError):
    """Raised inside a release when its mechanism's output is "nothing": a failed privacy test
    ("test", recorded as ``ReleaseRefused``). Solver limits are ``SolverAborted`` instead (also
    recorded as the outcome; they happen before any noise is drawn)."""

    def __init__(self, message: str, kind: str = "solver") -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(**PARAMETERS)
class BSSSelectorBase(SelectorMixin, PrivateEstimator, PurePrivacyParams, metaclass=ABCMeta):
    """Shared parameters (``BSSTopRSelector``'s) and the release logic of the top-R and mistakes selectors."""

    mechanism = "bss"
    s: int = 5
    loss: str = "squared"
    r: float = 1.1
    ridge: float | None = None
    x_bound: float = 0.5
    y_bound: float = 0.5
    bounds: str = "check"
    tol: float = 1e-3
    nonprivate_time_limit: float | None = None
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "s": [Count()],
        "epsilon": [Epsilon()],
        "loss": [Options(*LOSSES)],
        "r": [Positive()],
        "ridge": [None, Positive()],
        "x_bound": [Positive()],
        "y_bound": [Positive()],
        "bounds": [Options(*BOUND_MODES)],
        # the floor keeps every certificate above the inner solves' rounding
        "tol": [Positive(), Between(1e-6, 0.05, closed=True, text="[1e-6, 0.05] (a fraction of Delta)")],
        "nonprivate_time_limit": [None, Positive()],
        "random_state": "no_validation",
    }

    # ------------------------------------------------------------------ validation

    def _check_params(self) -> None:
        check_positive(self.ridge_value(), "ridge")

    def ridge_value(self) -> float:
        """The ridge of F: ``ridge``, or the loss's default when it is None (120 squared, 100 hinge:
        ``dpdist.defaults.BSS_RIDGE``, [DPBSS25]'s values)."""
        return bss_ridge(self.loss) if self.ridge is None else self.ridge

    def instance_params(self) -> dict[str, Any]:
        """The parameters of the instance this selector solves, by ``make_problem``'s names (the
        ridge as the value used): what a problem is built from, here, from a store or on a worker."""
        return {
            "s": self.s,
            "loss": self.loss,
            "r": self.r,
            "ridge": self.ridge_value(),
            "x_bound": self.x_bound,
            "y_bound": self.y_bound,
            "bounds": self.bounds,
        }

    def make_problem(self, X: Any, y: Any) -> Any:
        """The validated instance (Assumption 1 enforced); raises ParameterError before any charge."""
        self.check_params()
        return make_problem(X, y, **self.instance_params())

    @property
    def private(self) -> bool:
        """Whether a release is private: not in the mistakes method's paper mode (no guarantee)."""
        return getattr(self, "mode", "ptr") != "paper"

    @property
    def covered(self) -> bool:
        """Whether a release is covered by its charge: not with the opt-in ``nonprivate_time_limit``."""
        return self.nonprivate_time_limit is None

    # --------------------------------------------------------------------- release

    @abstractmethod
    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """What one release costs (top-R: bounded-range epsilon; mistakes: (epsilon, delta))."""

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        """Every parameter of a release, for the ledger's release identity."""
        params = self.get_params()
        params.pop("random_state", None)
        params["ridge"] = self.ridge_value()  # the value the release used, whether given or the loss's default
        return {**params, "method": self.mechanism, "n_features": n_features}

    @abstractmethod
    def _mechanism(self, executor: Any, rng: np.random.Generator) -> tuple[int, ...]:
        """The mechanism: all solver work on ``executor`` first, then every draw from ``rng``."""

    def fit(
        self, X: Any, y: Any, accountant: Any = None, dataset: str | None = None, key: str | None = None
    ) -> BSSSelectorBase:
        """Select s features of (X, y); charged to ``accountant`` (when given) before computing.

        X and y are validated (scikit-learn's ``validate_data``: finite, numeric, 2-d X) before
        anything is charged; a failure is a ``ParameterError``.
        """
        self.check_params()
        try:
            X, y = self._check_data(X, y, accountant, accept_sparse=("csr", "csc"), dtype=np.float64, y_numeric=True)
        except ParameterError:
            raise
        except ValueError as e:
            raise ParameterError(str(e)) from None
        return self.fit_executor(LocalExecutor(self.make_problem(X, y)), accountant, dataset, key)

    def __sklearn_tags__(self) -> Any:
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = True
        tags.target_tags.required = True
        return tags

    def fit_executor(
        self, executor: Any, accountant: Any = None, dataset: str | None = None, key: str | None = None
    ) -> BSSSelectorBase:
        """Release from an instance behind ``executor`` (in-process or a Dask cluster)."""
        self.check_params()
        ledger = charged_to(accountant, dataset)
        if executor.meta.s != self.s or executor.meta.loss != self.loss:
            raise ParameterError("the executor's instance was built with other parameters than this selector's")
        rng = check_random_state(self.random_state)
        t0 = time.perf_counter()

        charged = "; the charge stands" if accountant is not None else ""

        def compute() -> dict[str, Any]:
            try:
                support = self._mechanism(executor, rng)
            except Refusal as e:  # raised inside the release: the accountant records it as the outcome
                error = ReleaseRefused if e.kind == "test" else SolverFailure
                raise error(
                    f"{self.mechanism}: no support released: {e}{charged} (whether this happens depends "
                    "on the data, so the refusal is recorded as the release)"
                ) from None
            except SolverAborted as e:  # before any noise; the accountant records it (its public message only)
                raise SolverAborted(f"{self.mechanism}: aborted before any noise was drawn: {e}{charged}") from None
            return {"support": [int(j) for j in support]}

        self.support_ = None
        # a refusal or abort recorded by an earlier attempt under this key is raised again here (never
        # redrawn, never re-solved); paper mode has no guarantee (and refuses an accountant): no guard
        charge = self.privacy_charge() if ledger is not None else None
        params = self.release_params(executor.meta.p)
        out = self._release(charge, self._release_key(key), compute, params, ledger, private=self.private)
        self.seconds_ = time.perf_counter() - t0
        self.n_features_in_ = int(executor.meta.p)
        self.support_ = np.asarray(sorted(out["support"]), dtype=np.int64)
        return self

    def _get_support_mask(self) -> np.ndarray:
        mask = np.zeros(self.n_features_in_, dtype=bool)
        mask[self.support_] = True
        return mask
