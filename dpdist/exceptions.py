"""Exceptions raised by dpdist.

The CLI maps them to exit codes (``../shared/spec/cli.md``): ``ParameterError``
and other bad input give 2, ``BudgetExceeded`` gives 3.
"""


class DPDistError(Exception):
    """Base class of every error dpdist raises on purpose."""


class ParameterError(DPDistError, ValueError):
    """An impossible or malformed parameter (epsilon <= 0, delta outside [0, 1), NaN, ...)."""


class BudgetExceeded(DPDistError):
    """A charge would overspend a dataset's privacy budget; nothing was charged or released."""

    def __init__(
        self,
        dataset: str,
        epsilon: float,
        delta: float,
        epsilon_spent: float,
        delta_spent: float,
        epsilon_total: float,
        delta_total: float,
    ) -> None:
        self.dataset = dataset
        self.epsilon = epsilon
        self.delta = delta
        self.epsilon_spent = epsilon_spent
        self.delta_spent = delta_spent
        self.epsilon_total = epsilon_total
        self.delta_total = delta_total
        super().__init__(
            f"privacy budget of dataset {dataset!r} refused: charging "
            f"(epsilon={epsilon:g}, delta={delta:g}) on top of spent "
            f"(epsilon={epsilon_spent:g}, delta={delta_spent:g}) would exceed the total "
            f"(epsilon={epsilon_total:g}, delta={delta_total:g}); nothing was charged"
        )


class UnknownDataset(DPDistError):
    """The ledger has no budget for this dataset (run ``dpdist budget init`` first)."""


class ReleaseKeyConflict(DPDistError):
    """A release key was reused for a different charge (other epsilon, delta or mechanism)."""


class ReleaseRefused(DPDistError):
    """A charged release published nothing: a solver limit or a privacy test refused it.

    The charge stays in the ledger (the refusal depends on the data and is recorded as the
    release); the message says why, never with a value of the data.
    """
