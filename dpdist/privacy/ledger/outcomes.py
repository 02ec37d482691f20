"""What a ledger records as a release's outcome: its result, or its failure by class and a fixed message.

:meth:`dpdist.privacy.accountant.Accountant.release` records the outcome of every release's
computation. A failure is recorded as ``{"__dpdist_failure__": {"type", "raised", "message"}}``: the
public dpdist class it is replayed as, the name of the exception's class, and a fixed public message
chosen by that class -- never the exception's own text, which can hold values, counts, shapes or times
of the data. A replay raises the recorded failure again, built from the record alone. The machine's
own failures (:func:`machine_failure`) are not an outcome: they propagate unrecorded, as an interrupted
run.

Claim: with every outcome recorded and replayed under its key, one charge never yields two draws of its
mechanism nor measures a data-dependent failure twice, and nothing of the data leaves but the
mechanism's output and which of a fixed list of outcomes occurred. Proof:
[docs/proofs/recorded-outcomes.md][proof-recorded-outcomes].
"""

from __future__ import annotations

import concurrent.futures
import json
from typing import Any

from dpdist.exceptions import DPDistError, ParameterError, ReleaseRefused, SolverAborted, SolverFailure

__all__ = [
    "FAILURE",
    "UNRECORDABLE",
    "UNWRITTEN",
    "failure_record",
    "machine_failure",
    "public_result",
    "replay",
]

FAILURE = "__dpdist_failure__"

# The fixed public message of each failure a release can be replayed as (no value, count, index,
# shape or time of the data: the message depends on the exception's class only). A class not named
# here (or a non-dpdist exception) is replayed as ``SolverFailure`` with the generic message.
_PUBLIC_MESSAGES: dict[type[DPDistError], str] = {
    SolverAborted: "the release's solver work stopped before its certificate (the operator's nonprivate time "
    "limit, or an inner solve that rounding kept from its certificate)",
    ReleaseRefused: "the release was refused by its propose-test-release check: nothing was released",
    ParameterError: "the release's computation refused its input: a parameter, or a bound the data must meet "
    "(the values of X and y within their bounds; bounds='clip', data.bounds = \"clip\" or --clip "
    "clips each record instead)",
    SolverFailure: "the release's computation failed: nothing was released",
}
UNRECORDABLE = "the release's result cannot be recorded (not JSON-serialisable, or not finite): nothing was released"
UNWRITTEN = "the release's result could not be written to the ledger (its disk refused it): nothing was released"
_MESSAGES = frozenset(_PUBLIC_MESSAGES.values()) | {UNRECORDABLE, UNWRITTEN}


def machine_failure(e: BaseException) -> bool:
    """Whether ``e`` is the machine's failure rather than the computation's: an ``OSError`` (lost
    connections, files, Dask's ``CommClosedError``), ``MemoryError``, an ``ImportError`` (a
    worker's environment), a cancelled future, or Dask's ``KilledWorker`` / ``ClosedClientError``
    (named: the privacy core does not import distributed). None depends on the noise drawn."""
    if isinstance(e, (OSError, MemoryError, ImportError, concurrent.futures.CancelledError)):
        return True
    return any(
        c.__name__ in ("KilledWorker", "ClosedClientError") and c.__module__.partition(".")[0] == "distributed"
        for c in type(e).__mro__
    )


def public_class(raised: type[BaseException] | None) -> type[DPDistError]:
    """The public dpdist class a failure of class ``raised`` is replayed as: its nearest ancestor
    with a public message (``ConfigError`` is a ``ParameterError``), else ``SolverFailure``."""
    for cls in raised.__mro__ if raised is not None else ():
        if cls in _PUBLIC_MESSAGES:
            return cls
    return SolverFailure


def failure_record(raised: type[BaseException] | None, unrecorded: str = UNRECORDABLE) -> str:
    """The JSON record of a failed release: built from the exception's *class* only, never its message.

    ``raised=None`` is a result that could not be recorded, for the fixed reason ``unrecorded``.
    """
    cls = public_class(raised)
    message = _PUBLIC_MESSAGES[cls] if raised is not None else unrecorded
    doc = {"type": cls.__name__, "raised": raised.__name__ if raised is not None else None, "message": message}
    return json.dumps({FAILURE: doc}, sort_keys=True)


def public_failure(failure: Any) -> tuple[type[DPDistError], dict[str, Any]]:
    """The class to raise and the public record of a stored failure.

    A record written by an older dpdist may hold the exception's own message (``str(e)``, possibly
    data-derived): only a message from the fixed list is kept, anything else is replaced by the fixed
    message of its class, and the class name is kept only if it is an identifier.
    """
    failure = failure if isinstance(failure, dict) else {}
    by_name = {c.__name__: c for c in _PUBLIC_MESSAGES}
    cls = by_name.get(failure.get("type"), SolverFailure)
    raised = failure.get("raised")
    raised = raised if isinstance(raised, str) and raised.isidentifier() and len(raised) <= 100 else None
    message = failure.get("message")
    message = message if message in _MESSAGES else _PUBLIC_MESSAGES[cls]
    return cls, {"type": cls.__name__, "raised": raised, "message": message}


def public_result(encoded: str) -> Any:
    """The recorded result as the audit trail shows it (a failure in its public form)."""
    result = json.loads(encoded)
    if isinstance(result, dict) and FAILURE in result:
        return {FAILURE: public_failure(result[FAILURE])[1]}
    return result


def replay(encoded: str) -> Any:
    """The recorded result, or the recorded failure raised again (the same class, the same public message)."""
    result = json.loads(encoded)
    if isinstance(result, dict) and FAILURE in result:
        cls, failure = public_failure(result[FAILURE])
        raised = f" ({failure['raised']})" if failure["raised"] else ""
        raise cls(
            f"{failure['message']}{raised} [recorded as this release's outcome: its charge stands, and a "
            "retry raises it again rather than drawing new noise]"
        )
    return result
