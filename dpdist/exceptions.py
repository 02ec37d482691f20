"""Exceptions raised by dpdist.

The CLI maps them to exit codes (docs/privacy.md): ``ParameterError``
and other bad input give 2, ``BudgetExceeded`` and ``PlanExceeded`` give 3.
"""

import errno
import os
from pathlib import Path


class DPDistError(Exception):
    """Base class of every error dpdist raises on purpose.

    Every one survives a pickle round trip as itself, with its message and attributes: an error
    raised in a Dask worker reaches the flow as the same class (a ``BudgetExceeded`` refused in a
    worker's release task exits 3, as in the flow's own process), although a subclass's
    ``__init__`` takes other arguments than its message.
    """

    def __reduce__(self) -> tuple[object, ...]:
        state = dict(self.__dict__)
        if isinstance(self, OSError) and self.filename is not None:  # an OSError's file is not in its args
            state["filename"] = self.filename
        return _restore, (type(self), self.args, state)


def _restore(cls: type[DPDistError], args: tuple[object, ...], state: dict[str, object]) -> DPDistError:
    """An error rebuilt from its class, its exception arguments and its attributes, without its ``__init__``."""
    error = cls.__new__(cls, *args)
    Exception.__init__(error, *args)
    for name, value in state.items():
        setattr(error, name, value)
    return error


class ParameterError(DPDistError, ValueError):
    """An impossible or malformed parameter (epsilon <= 0, delta outside [0, 1), NaN, ...)."""


class BudgetExceeded(DPDistError):
    """A charge would overspend a dataset's privacy budget; nothing was charged or released.

    ``epsilon_spent`` / ``epsilon_after`` are the dataset's spend (the budget's privacy filter,
    :class:`dpdist.privacy.filter.PrivacyFilter`) before and with the refused charge.
    """

    def __init__(
        self,
        dataset: str,
        epsilon: float,
        delta: float,
        epsilon_spent: float,
        epsilon_after: float,
        epsilon_total: float,
        delta_total: float,
        deltas_past_basic: float | None = None,
    ) -> None:
        self.dataset = dataset
        self.epsilon = epsilon
        self.delta = delta
        self.epsilon_spent = epsilon_spent
        self.epsilon_after = epsilon_after
        self.epsilon_total = epsilon_total
        self.delta_total = delta_total
        why = (
            ""
            if epsilon_after < float("inf")
            else " (the deltas do not fit the filter: the releases' standalone deltas must add to at most delta/4 for "
            "basic composition, and their approximate parts' deltas to at most delta/4 for Renyi composition)"
        )
        if deltas_past_basic is not None and epsilon_after < float("inf"):  # delta, not epsilon, is the cause
            why = (
                f" (delta is the cause: with it the releases' deltas add to {deltas_past_basic:g}, more than a quarter "
                "of the budget's delta, so their epsilons cannot simply be added and only Renyi composition counts "
                "them; a smaller delta per release -- a command's default is a share of the budget's -- lets them add)"
            )
        super().__init__(
            f"budget refused: dataset {dataset!r} cannot take a release of (epsilon={epsilon:g}, delta={delta:g}): it "
            f"would bring the spend from epsilon={epsilon_spent:.6g} to {epsilon_after:.6g}, above the total "
            f"(epsilon={epsilon_total:g}, delta={delta_total:g}){why}; nothing was charged"
        )


class PlanExceeded(DPDistError):
    """A command's releases would spend more than its own ``--epsilon``/``--delta`` (what it spends in all):
    nothing was read or charged. The CLI exits 3, as for a dataset's budget refused."""


class UnknownDataset(DPDistError):
    """The ledger has no budget for this dataset (run ``dpdist budget init`` first)."""


class ReleaseKeyConflict(DPDistError):
    """A release key was reused with other parameters (mechanism, privacy loss or release parameters)."""


class SolverFailure(DPDistError):
    """A release's computation failed after the charge -- a solver could not certify its answer, or
    ``compute`` raised an exception that is not a public dpdist error (replayed as this class) --:
    nothing is released, the charge stands (whether it fails can depend on the data, so the attempt
    itself costs its budget)."""


class SolverAborted(DPDistError):
    """A release's solver work ran out of a resource (a time limit, an inner solve it could not
    certify) before the release's noise was drawn.

    ``Accountant.release`` records it as the release's outcome, like any failure of the
    computation: the charge made before the computation stands, and a retry under the same key
    raises the recorded abort again instead of re-running the solver. Whether an abort happens
    depends on the data and on the solver's time; re-running under the same charge would measure
    that again at every retry (and a retry loop would condition the release on "no abort"), so
    one charge exposes it once. The ledger keeps, and the caller sees, only the class and a fixed
    message: no limit, time, tolerance or value of the data. Use a new key to try again (a new
    charge), e.g. with a larger time limit.
    """


class ReleaseRefused(DPDistError):
    """A charged mechanism's output is "nothing": a propose-test-release check refused the release.

    The refusal is the mechanism's (private) output: it is recorded as the release and the
    charge stands; its message is a fixed public one, never with a value of the data.
    """


class LedgerUnavailable(DPDistError, OSError):
    """The ledger's file could not be read or written (its disk full or read-only, the file or its
    directory not permitted): SQLite's own error, with the ledger's path.

    The call that met it released nothing (a release is computed only after its charge has been
    committed, and returned only after its outcome has been: :meth:`Accountant.release`); a charge
    it made stands. An ``OSError``: the machine's failure (:func:`dpdist.privacy.accountant.machine_failure`).
    """


# the machine's files refusing a write: no space (the file system matters, not the file) ...
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG})
# ... or a path refused (the path matters: one is named, else it is not a file's failure, e.g. a socket's)
_PATH_ERRNOS = frozenset({errno.EROFS, errno.EACCES, errno.EPERM})


def file_failure(e: BaseException) -> str | None:
    """One line for a failure of the machine's files -- a full disk or quota, a file-size limit, a
    read-only file system, a path without permission, a ledger that cannot be written -- whose
    traceback would tell an operator nothing more; ``None`` for anything else (a bug keeps its
    traceback).

    The line holds the system's message, and for a refused path the path -- up to the store that
    holds it, if one does. Never a file inside a store: its name follows the data (a chunk's number
    counts entries, a bucket's names columns); nor the file that ran out of space (the caller names
    its output instead).
    """
    if isinstance(e, LedgerUnavailable):
        return str(e)
    if isinstance(e, OSError) and e.errno in SPACE_ERRNOS:
        return os.strerror(e.errno)
    if isinstance(e, OSError) and e.errno in _PATH_ERRNOS and e.filename:
        return f"{os.strerror(e.errno)}: {_outside_stores(os.fsdecode(e.filename))}"
    return None


def _outside_stores(path: str) -> str:
    """``path``, or the outermost store holding it: a zarr directory (its ``zarr.json``), or a store's
    temporary being written (``.<name>.tmp-<random>``)."""
    for parent in reversed(Path(path).parents):  # outermost first
        if ".tmp-" in parent.name or (parent / "zarr.json").is_file():
            return str(parent)
    return path


class NonPrivateSelectionWarning(UserWarning):
    """A private estimator is being fitted inside scikit-learn's exact model selection (``GridSearchCV``,
    ``cross_val_score``, ...): the choice made from exact scores of private fits is not private."""


class UnaccountedReleaseWarning(UserWarning):
    """A private estimator was fitted with no accountant, inside ``dpdist.unaccounted()`` (an experiment's
    explicit opt-out): nothing was charged or recorded, and the fit's output is not a release."""
