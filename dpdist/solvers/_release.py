"""The release step the self-contained estimators share: charge the ledger, then compute once.

``release_once`` runs ``compute`` inside ``Accountant.release`` (charged first, recorded, a retried
key replayed) when an accountant is given, else directly, after the guard allows a fit without one
(``dpdist.unaccounted()``). It returns the released result and the release's public description.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from dpdist.exceptions import ParameterError
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.guard import require_accountant
from dpdist.privacy.loss import Charge

__all__ = ["release_once"]


def release_once(
    estimator: object,
    charge: Charge,
    compute: Callable[[], dict[str, Any]],
    params: dict[str, Any],
    accountant: Accountant | None,
    dataset: str | None,
    key: str | None,
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """(the released result, ``{"key", "epsilon", "delta"}`` of the charged release or None)."""
    if accountant is None:
        require_accountant(estimator)
        return compute(), None
    if dataset is None:
        raise ParameterError("dataset is required to charge the accountant")
    key = key or f"{charge.mechanism.split('/')[0]}-{uuid.uuid4().hex}"
    out = accountant.release(dataset, charge, key, compute, params)
    return out, {"key": key, "epsilon": charge.epsilon, "delta": charge.delta}
