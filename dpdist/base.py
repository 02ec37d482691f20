"""The release skeleton every private estimator of dpdist shares: :class:`PrivateEstimator`.

A private fit is one release (two when it first releases a count of its records), always in this order:

1. the parameters, each against its declared constraints (``_parameter_constraints``) and then their
   relations (``_check_params``): a bad value is a ``ParameterError`` naming it, before anything is
   read or charged (``check_params``);
2. the data (scikit-learn's ``validate_data``), a classifier's labels coded by its two public classes;
3. the public count of the records, for an estimator whose charge depends on one (``counted``): its
   ``n_records``, else a Laplace count released first at ``count_epsilon`` (the exact count is private);
4. the charge, :meth:`~PrivateEstimator.privacy_charge`: a function of public values only (the
   parameters, the public count, the number of features), and the one place a charge is computed --
   a command's or a run's check of its budget before any data is read asks the same method, through
   :meth:`~PrivateEstimator.charges`;
5. the release: charged to the accountant, computed, recorded (``Accountant.release``; a retried key
   replays the record), or computed directly where no ledger is asked for (inside a release its caller
   charged, or an experiment's ``dpdist.unaccounted()``);
6. the release attributes: ``release_`` (``{"key", "epsilon", "delta"}`` of the charged release, or
   None), ``charge_`` (its charge), ``release_record_`` (what was released, as recorded) and
   ``n_public_`` (the public count).

**Parameters.** An estimator's parameters are keyword-only fields of a dataclass (:data:`PARAMETERS`):
each is declared once, in a parameter group its estimators share (:class:`PrivacyParams`,
:class:`CountParams`, :class:`ClassesParam`, :class:`YBoundParam`, ...), and an estimator
re-declares only a default of its own. scikit-learn's ``get_params`` reads them from the generated
``__init__``; the estimators keep scikit-learn's ``repr`` and identity (no generated ``repr`` or ``==``).

**No rows.** The release of a mechanism is its output on whatever the data holds, an empty set
included: the keyed split's training half of a small data set is empty with a probability that
depends on the data, and a refusal then would be an outcome of its own. So a fit that is a release
(:func:`is_release`: an accountant is given, or the fit runs inside a release its caller charged, as
the flows' workers do) takes 0 rows and releases the mechanism's output on none: its noise. A fit
that is not (an experiment) refuses 0 rows as scikit-learn's estimators do.
"""

from __future__ import annotations

import time
import uuid
import warnings
from abc import ABCMeta, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.utils.validation import validate_data

from dpdist.exceptions import ParameterError, UnaccountedReleaseWarning
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.guard import require_accountant
from dpdist.privacy.loss import Charge, PrivacyLoss
from dpdist.released import widen
from dpdist.utils.classifier import BinaryLinearClassifierMixin, plain_classes
from dpdist.utils.model_selection import warn_if_exact_model_selection
from dpdist.utils.operator_log import timing
from dpdist.utils.random import RandomState, check_random_state
from dpdist.utils.validation import check_count, validate_params

__all__ = [
    "PARAMETERS",
    "PLANNED_RECORDS",
    "ClassesParam",
    "CountParams",
    "Ledger",
    "ModelPlan",
    "PrivateClassifierMixin",
    "PrivateEstimator",
    "PrivateLearner",
    "PrivacyParams",
    "PrivateRegressorMixin",
    "Progress",
    "PurePrivacyParams",
    "ReleaseFitMixin",
    "ReleaseRun",
    "YBoundParam",
    "charged_to",
    "is_release",
    "noisy_count",
]

# The public count a charge that depends on one is planned at before the count is released (a
# command's or a run's check of its budget before any data is read). The calibration meets the
# estimator's (epsilon, delta) at every count, so the planned charge is what the ledger will be asked
# for, up to the count; the ledger checks the exact charge again when it is made.
PLANNED_RECORDS = 100_000

Ledger = tuple[Accountant, str]  # the accountant a fit charges and the dataset it charges
Progress = Callable[[int, int], None]  # progress(done, total) of a fit's steps, for the operator's terminal


@dataclass(frozen=True)
class ModelPlan:
    """The model a count is released for (:meth:`PrivateEstimator._release_count`): its public width, and
    its charge and release parameters at a released count (``at``)."""

    n_features: int
    at: Callable[[Any], tuple[Charge, dict[str, Any]]]

    def after(self, public: Callable[[Any], int]) -> ModelPlan:
        """This plan at the public count ``public(result)`` of a count released as more than one number."""
        return ModelPlan(self.n_features, lambda result: self.at(public(result)))


# The dataclass options of an estimator's parameters (``@dataclass(**PARAMETERS)``): each annotated class
# attribute (a ``ClassVar`` is none) is a keyword-only parameter, with those of the parameter groups the class
# is built from; the generated ``__init__`` sets each one as given, as scikit-learn's estimators do, and
# nothing else. No ``repr`` or ``==`` is generated: an estimator keeps scikit-learn's and its identity.
PARAMETERS: dict[str, Any] = {"kw_only": True, "repr": False, "eq": False}


@dataclass(**PARAMETERS)
class PurePrivacyParams:
    """The parameters of every release: its budget ``epsilon`` and its noise's source ``random_state``
    (None: OS entropy, every release; a seed for experiments only)."""

    epsilon: float = 1.0
    random_state: RandomState = None


@dataclass(**PARAMETERS)
class PrivacyParams(PurePrivacyParams):
    """An (epsilon, delta) release's parameters: :class:`PurePrivacyParams` and ``delta``."""

    delta: float = 1e-6


@dataclass(**PARAMETERS)
class CountParams:
    """The public count of the records a ``counted`` estimator's charge depends on: ``n_records`` (a count
    released earlier), or None: the fit releases a Laplace count of its own at ``count_epsilon`` first."""

    n_records: int | None = None
    count_epsilon: float = 0.01


@dataclass(**PARAMETERS)
class ClassesParam:
    """A binary classifier's two labels ``classes``, public (required in a release; None: an experiment's
    fit reads them from y)."""

    classes: Any = None


@dataclass(**PARAMETERS)
class YBoundParam:
    """A regressor's public bound ``y_bound`` on |y| (targets clipped to it: a per-record map)."""

    y_bound: float = 1.0


@dataclass(frozen=True, eq=False)
class ReleaseRun:
    """What one run of a mechanism reads besides its records (:meth:`PrivateLearner.release_on`): the
    public count ``n_public`` (None for an estimator that takes none), the ``charge`` it runs under (its
    calibration's noise scales in ``charge.details``, computed by ``privacy_charge`` at ``n_public``), the
    noise source ``rng``, the operator's ``progress`` and ``extra``, the public values the released model
    carries besides (a classifier's classes)."""

    n_public: int | None
    charge: Charge
    rng: np.random.Generator
    progress: Progress | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def count(self) -> int:
        """The public count of a ``counted`` estimator's run (it always has one)."""
        assert self.n_public is not None
        return self.n_public


def charged_to(accountant: Accountant | None, dataset: str | None) -> Ledger | None:
    """(accountant, dataset) a fit charges, or None without an accountant (the dataset is required
    with one)."""
    if accountant is None:
        return None
    if dataset is None:
        raise ParameterError("dataset is required to charge the accountant")
    return accountant, dataset


def noisy_count(n: int, epsilon: float, rng: np.random.Generator) -> int:
    """A public count of ``n`` records: n + Laplace(1/epsilon) (sensitivity 1 under ADD/REMOVE),
    rounded, at least 1 (post-processing)."""
    return max(1, int(round(n + rng.laplace(scale=1.0 / epsilon))))


def is_release(estimator: object, accountant: Accountant | None) -> bool:
    """Whether a fit of ``estimator`` is a release: it charges ``accountant``, or it runs inside a
    release its caller charged (``dpdist.privacy.guard.charged_by_caller``). Without either, inside
    ``dpdist.unaccounted()``, it is an experiment (which the guard lets through with a warning, given
    again when the fit runs); anywhere else the guard refuses the fit here."""
    if accountant is not None:
        return True
    with warnings.catch_warnings():
        warnings.simplefilter("error", UnaccountedReleaseWarning)
        try:
            require_accountant(estimator)
        except UnaccountedReleaseWarning:
            return False
    return True


class PrivateEstimator(BaseEstimator, metaclass=ABCMeta):
    """The release skeleton (module docstring): parameters, count, charges, release, attributes.

    A subclass declares ``_parameter_constraints`` (merged along its bases: :meth:`declared_constraints`),
    its ``mechanism`` (its charges' name and the default release key's prefix), whether its charge
    depends on a public count of its records (``counted``: it then takes ``n_records`` and
    ``count_epsilon``), and computes its charge in ``_charge`` (abstract: every private estimator states its own). The
    learners' fit (:class:`ReleaseFitMixin`: :class:`PrivateClassifierMixin`, :class:`PrivateRegressorMixin`)
    runs on :class:`PrivateLearner` (steps 3-6, ``_fit_release``), whose subclass gives the mechanism
    (``release_on``) and reads the released model back (``_set_released``).
    """

    mechanism: str = "release"
    counted: ClassVar[bool] = False
    _count_of: ClassVar[str | None] = "training records"  # the count release's "of" parameter
    _parameter_constraints: ClassVar[dict[str, Any]] = {}

    # ------------------------------------------------------------------ parameters

    def check_params(self) -> None:
        """Check every parameter (its declared constraints, then their relations): ``ParameterError``
        naming the parameter, before anything is read or charged."""
        validate_params(self, self.declared_constraints())
        self._check_params()

    @classmethod
    def declared_constraints(cls) -> dict[str, Any]:
        """Every parameter's declared constraints: the ``_parameter_constraints`` of the class and of
        the classes and mixins it is built from (a subclass's declaration of a parameter wins), for the
        parameters its ``__init__`` takes."""
        out: dict[str, Any] = {}
        for klass in reversed(cls.__mro__):
            out.update(vars(klass).get("_parameter_constraints", {}))
        taken = set(cls._get_param_names())
        return {name: rules for name, rules in out.items() if name in taken}

    def _check_params(self) -> None:
        """The relations between parameters (each one alone is declared in ``_parameter_constraints``)."""

    def check_width(self, n_features: int) -> None:
        """Check the parameters that depend on the (public) number of features, before any charge."""

    # ------------------------------------------------------------------ charges

    def privacy_charge(self, n_public: int | None = None, n_features: int | None = None, **options: Any) -> Charge:
        """What one release is charged, from public values only: the parameters, the public count
        ``n_public`` of the records (for a ``counted`` estimator: default its ``n_records``, else
        :data:`PLANNED_RECORDS` until the count is released), the number of features, and the
        ``options`` a subclass's ``_charge`` takes besides (a gradient learner's ``noise_scale``)."""
        self.check_params()
        return self._charge(self._planned_count(n_public), n_features, **options)

    @abstractmethod
    def _charge(self, n_public: int | None, n_features: int | None) -> Charge:
        """The charge of one release at the (planned) public count and the number of features."""

    def _planned_count(self, n_public: int | None) -> int | None:
        if not self.counted:
            return None
        if n_public is None:
            n_public = getattr(self, "n_records", None) or PLANNED_RECORDS
        return check_count(n_public, "n_public")

    def count_charge(self) -> Charge:
        """The release of the public count (a ``counted`` estimator with no ``n_records``)."""
        return Charge(PrivacyLoss.laplace(float(getattr(self, "count_epsilon"))), "count/laplace")

    def charges(self, n_features: int | None = None) -> list[Charge]:
        """Every charge a fit makes, in order, planned from public values before any data is read: the
        count's own release (when it makes one), then :meth:`privacy_charge`."""
        own_count = self.counted and getattr(self, "n_records", None) is None
        return ([self.count_charge()] if own_count else []) + [self.privacy_charge(n_features=n_features)]

    # ------------------------------------------------------------------ the fit's steps

    def _check_data(self, X: Any, y: Any, accountant: Accountant | None, **options: Any) -> tuple[Any, Any]:
        """(X, y) validated as scikit-learn validates them; a release takes 0 rows (module docstring)."""
        releasing = self.private and is_release(self, accountant)
        return validate_data(self, X, y, ensure_min_samples=0 if releasing else 1, **options)

    @property
    def private(self) -> bool:
        """Whether a fit is a private release (a non-private baseline computes without a charge)."""
        return True

    def _key_prefix(self) -> str:
        return self.mechanism.replace("/", "-")

    def _release_key(self, key: str | None) -> str:
        """``key``, else a random key of its own (a fit nobody will replay)."""
        return key or f"{self._key_prefix()}-{uuid.uuid4().hex}"

    def _public_count(
        self, n_rows: int, ledger: Ledger | None, key: str, rng: np.random.Generator, model: ModelPlan | None = None
    ) -> int | None:
        """The public count of the records: ``n_records``, or a Laplace count of the ``n_rows`` rows,
        released first (charged when a ledger is given; ``model``: :meth:`_release_count`'s); None for an
        estimator that takes none."""
        if not self.counted:
            return None
        n_records = getattr(self, "n_records", None)
        if n_records is not None:
            return int(n_records)
        epsilon = float(getattr(self, "count_epsilon"))
        return int(self._release_count(ledger, key, lambda: noisy_count(n_rows, epsilon, rng), model=model))

    def _release_count(
        self,
        ledger: Ledger | None,
        key: str,
        compute: Callable[[], Any],
        of: str | None = None,
        model: ModelPlan | None = None,
    ) -> Any:
        """Release the count ``compute`` draws (at :meth:`count_charge`, key ``{key}/count``; ``of``: what it
        counts, default ``_count_of``) and the charge of its model (key ``key``) as one plan: a budget that
        cannot take both charges neither, and with ``model`` (:meth:`_model_plan`) the model is charged in the
        count's transaction (:meth:`dpdist.privacy.accountant.Accountant.release_first`), so no concurrent
        release can leave the count charged and the model refused. Without ``model`` (the counts released
        alone, for a front end's estimate) the plan is checked, not held."""
        if ledger is None:
            return compute()
        acc, dataset = ledger
        of = of or self._count_of
        params = {"count_epsilon": getattr(self, "count_epsilon"), **({"of": of} if of else {})}
        first = (self.count_charge(), f"{key}/count", compute, params)
        if model is not None:
            return acc.release_first(dataset, first, self.charges(model.n_features)[-1], (key, model.at))
        if not acc.recorded(dataset, f"{key}/count"):
            acc.check(dataset, *self.charges())  # refused, nothing is charged: not the count alone
        return acc.release(dataset, *first)

    def _model_plan(self, n_features: int, held: Any = None) -> ModelPlan:
        """The model a fit releases on ``n_features`` columns (``held``: which columns of a wider matrix)."""

        def at(n_public: int | None) -> tuple[Charge, dict[str, Any]]:
            params = self.release_params(n_features, n_public)
            if held is not None:
                params["columns"] = [int(j) for j in held]
            return self.privacy_charge(n_public, n_features=n_features), params

        return ModelPlan(n_features, at)

    def _release(
        self,
        charge: Charge | None,
        key: str,
        compute: Callable[[], Any],
        params: dict[str, Any],
        ledger: Ledger | None,
        private: bool = True,
    ) -> Any:
        """Charge ``ledger`` (when given) and compute; sets ``release_``, ``charge_`` (the charge made, or
        None) and ``release_record_``. Without a ledger a private computation runs only where the guard
        allows it."""
        self.charge_ = charge if ledger is not None else None
        if ledger is None:
            if private:
                require_accountant(self)
            out = compute()
            self.release_ = None
        else:
            if charge is None:
                raise ParameterError(f"{type(self).__name__}: a release through an accountant needs its charge")
            out = ledger[0].release(ledger[1], charge, key, compute, params)
            self.release_ = {"key": key, "epsilon": charge.epsilon, "delta": charge.delta}
        self.release_record_ = out  # the release as recorded (public)
        return out

    def release_params(self, n_features: int | None = None, n_public: int | None = None) -> dict[str, Any]:
        """Every parameter of a fit, for the ledger's release identity (a retried key with other
        parameters is refused)."""
        params = self.get_params(deep=False)
        params.pop("random_state", None)
        if params.get("classes") is not None:
            params["classes"] = plain_classes(params["classes"])
        return {**params, "method": self.mechanism, "n_features": n_features, "n_public": n_public}


class PrivateLearner(PrivateEstimator):
    """A private estimator whose fit is the skeleton's steps 3-6 (:meth:`_fit_release`): it gives its
    mechanism's output on the mapped records (:meth:`release_on`) and reads its released model back
    (:meth:`_set_released`); its ``fit`` is :class:`ReleaseFitMixin`'s (steps 1-2)."""

    def map_records(self, X: Any, y: np.ndarray) -> tuple[Any, np.ndarray]:
        """The records as the mechanism reads them (maps of one record at a time: no privacy cost); as
        given, unless the learner bounds them itself."""
        return X, y

    @abstractmethod
    def release_on(self, X: Any, y: np.ndarray, run: ReleaseRun) -> dict[str, Any]:
        """The mechanism's output on mapped records (:meth:`map_records`) under ``run.charge``: the released
        model, a dict of public values with ``run.extra`` in it. It charges nothing: its caller does."""

    @abstractmethod
    def _set_released(self, out: dict[str, Any]) -> None:
        """The fitted attributes (``coef_``, ...) from the released model."""

    def _fit_release(
        self,
        X: Any,
        y: np.ndarray,
        ledger: Ledger | None,
        key: str | None,
        extra: dict[str, Any],
        progress: Progress | None = None,
        columns: tuple[Any, int] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> None:
        """Steps 3-6 of a fit (module docstring) on checked (X, y), y coded: the public count, the charge,
        the release of :meth:`release_on` (stated in a wider matrix's columns with ``columns`` = (the
        columns X holds, the width); with ``schema``, the public facts a model needs to read new records:
        ``dpdist.released.widen``), the release attributes."""
        warn_if_exact_model_selection(self)
        rng = check_random_state(getattr(self, "random_state", None))
        key = self._release_key(key)
        X, y = self.map_records(X, y)
        self.check_width(int(X.shape[1]))  # the public width: before anything is charged
        held, width = columns if columns is not None else (None, None)
        model = self._model_plan(int(X.shape[1]), held)
        n_public = self._public_count(X.shape[0], ledger, key, rng, model)
        charge, params = model.at(n_public)

        run = ReleaseRun(n_public, charge, rng, progress, extra)

        def compute() -> dict[str, Any]:
            return widen(self.release_on(X, y, run), held, width, schema)

        t0 = time.perf_counter()
        out = self._release(charge, key, compute, params, ledger)
        timing("%s: fit in %.3f s", self.mechanism, time.perf_counter() - t0)  # the operator's, never released
        self.n_public_ = n_public
        self._set_released(out)


class ReleaseFitMixin:
    """The skeleton's ``fit`` of a learner (steps 1-6, module docstring); its targets coded by
    ``_targets`` (:class:`PrivateClassifierMixin`, :class:`PrivateRegressorMixin`)."""

    _y_numeric = False

    def fit(
        self,
        X: Any,
        y: Any,
        accountant: Accountant | None = None,
        dataset: str | None = None,
        key: str | None = None,
        progress: Progress | None = None,
        columns: tuple[Any, int] | None = None,
        schema: dict[str, Any] | None = None,
    ) -> Any:
        """Fit and release (charged to ``accountant`` first when given; :mod:`dpdist.base`): ``columns``
        = (the columns X holds of a wider matrix, its width): the released model is stated in the wider
        matrix's columns; ``schema``: public facts the model needs to read new records
        (``dpdist.released.widen``); ``progress(done, total)``: the fit's steps, for the operator."""
        est: Any = self  # a PrivateEstimator (the mixin comes first in a learner's bases)
        est.check_params()
        ledger = charged_to(accountant, dataset)
        dtypes = [np.float64, np.float32]
        X, y = est._check_data(X, y, accountant, accept_sparse="csr", dtype=dtypes, y_numeric=self._y_numeric)
        coded, extra = self._targets(y, accountant)
        est._fit_release(X, coded, ledger, key, extra, progress, columns, schema)
        return self

    @abstractmethod
    def _targets(self, y: Any, accountant: Accountant | None) -> tuple[np.ndarray, dict[str, Any]]:
        """(y as the mechanism reads it, the public values the released model carries besides)."""


class PrivateClassifierMixin(ReleaseFitMixin, BinaryLinearClassifierMixin, ClassesParam):
    """The skeleton's ``fit`` of a binary classifier: two public ``classes``, coded ``_negative`` / 1.0
    (with an accountant the classes must be given: read from y, the released model's would be a
    function of the data)."""

    _negative = -1.0

    def _targets(self, y: Any, accountant: Accountant | None) -> tuple[np.ndarray, dict[str, Any]]:
        return self._coded_labels(y, is_release(self, accountant), negative=self._negative)


class PrivateRegressorMixin(ReleaseFitMixin, RegressorMixin, YBoundParam):
    """The skeleton's ``fit`` of a regressor: real targets (the learner clips them to ``y_bound``)."""

    _y_numeric = True

    def _targets(self, y: Any, accountant: Accountant | None) -> tuple[np.ndarray, dict[str, Any]]:
        return np.asarray(y, dtype=np.float64).ravel(), {}
