"""No private fit without an accountant, unless the caller says why.

A private estimator's ``fit`` with no accountant computes a private result and records nothing: used on
real data, that is a release nobody charged. So ``fit`` without an accountant raises, except

* inside ``dpdist.unaccounted()`` (or with ``$DPDIST_UNACCOUNTED=1`` in the environment): an
  experiment's explicit opt-out on data that needs no ledger (synthetic sets, benchmarks, tests); the
  fit warns with ``UnaccountedReleaseWarning``;
* inside a release the caller already charged: ``Accountant.release`` runs its computation in
  ``charged_by_caller()``, and so do the cluster tasks of a flow's central release (``pipelines``).
"""

from __future__ import annotations

import contextvars
import os
import warnings
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager

from dpdist.exceptions import ParameterError, UnaccountedReleaseWarning

__all__ = ["charged_by_caller", "require_accountant", "unaccounted"]

ENV = "DPDIST_UNACCOUNTED"
_MODE: contextvars.ContextVar[str | None] = contextvars.ContextVar("dpdist_accounting_mode", default=None)


@contextmanager
def _mode(mode: str) -> Iterator[None]:
    token = _MODE.set(mode)
    try:
        yield
    finally:
        _MODE.reset(token)


def unaccounted() -> AbstractContextManager[None]:
    """Allow private fits without an accountant in this context (experiments only; each fit warns)."""
    return _mode("experiment")


def charged_by_caller() -> AbstractContextManager[None]:
    """The computation runs inside a release its caller charged first (no warning)."""
    return _mode("charged")


def require_accountant(estimator: object) -> None:
    """Raise unless a fit with no accountant is allowed here (module docstring)."""
    mode = _MODE.get() or ("experiment" if os.environ.get(ENV) == "1" else None)
    if mode == "charged":
        return
    if mode is None:
        raise ParameterError(
            f"{type(estimator).__name__}.fit without an accountant would compute a private result and record "
            "nothing: pass the ledger (fit(X, y, accountant, dataset), accountant = dpdist.privacy.Accountant(...)); "
            "for an experiment on data that needs no ledger, fit inside `with dpdist.unaccounted():`"
        )
    warnings.warn(
        f"{type(estimator).__name__} fitted without an accountant (dpdist.unaccounted()): nothing was "
        "charged or recorded",
        UnaccountedReleaseWarning,
        stacklevel=3,
    )
