"""Exceptions raised by dpdist.

The CLI maps them to exit codes (``../shared/spec/cli.md``): ``ParameterError``
and other bad input give 2, ``BudgetExceeded`` gives 3.
"""


class DPDistError(Exception):
    """Base class of every error dpdist raises on purpose."""


class ParameterError(DPDistError, ValueError):
    """An impossible or malformed parameter (epsilon <= 0, delta outside [0, 1), NaN, ...)."""


class BudgetExceeded(DPDistError):
    """A charge would overspend a dataset's privacy budget; nothing was charged or released.

    ``epsilon_spent`` / ``epsilon_after`` are the dataset's spend (tight composition at the
    budget's delta) before and with the refused charge.
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
    ) -> None:
        self.dataset = dataset
        self.epsilon = epsilon
        self.delta = delta
        self.epsilon_spent = epsilon_spent
        self.epsilon_after = epsilon_after
        self.epsilon_total = epsilon_total
        self.delta_total = delta_total
        super().__init__(
            f"privacy budget of dataset {dataset!r} refused: a release of (epsilon={epsilon:g}, delta={delta:g}) "
            f"would bring the spend from epsilon={epsilon_spent:.6g} to {epsilon_after:.6g}, above the total "
            f"(epsilon={epsilon_total:g}, delta={delta_total:g}); nothing was charged"
        )


class UnknownDataset(DPDistError):
    """The ledger has no budget for this dataset (run ``dpdist budget init`` first)."""


class ReleaseKeyConflict(DPDistError):
    """A release key was reused with other parameters (mechanism, privacy loss or release parameters)."""


class SolverFailure(DPDistError):
    """A solver could not certify its answer after the charge: nothing is released, the charge stands
    (whether a solver fails can depend on the data, so the attempt itself costs its budget)."""


class SolverAborted(DPDistError):
    """A release's solver work ran out of a resource (a time limit, an inner solve it could not
    certify) *before any noise was drawn*: an operator abort, not a release.

    ``Accountant.release`` does not record it: the charge stands, the ledger keeps no outcome
    for the key, and a retry under the same key recomputes. That is safe only because nothing
    random was drawn yet -- the aborted attempt released nothing and the retry draws the
    release's noise for the first time -- so raise it only before the mechanism's first draw.
    Whether an abort happens can depend on the data, like a solver's time; it goes to the
    operator, never into the ledger, and its message names public parameters only (a limit, a
    tolerance), never a value of the data.
    """


class ReleaseRefused(DPDistError):
    """A charged mechanism's output is "nothing": a propose-test-release check refused the release.

    The refusal is the mechanism's (private) output: it is recorded as the release and the
    charge stands; the message says why, never with a value of the data.
    """
