"""dpdist: differentially private sparse regression and feature selection at scale.

The library (``dpdist.privacy``, ...) works on its own: no Prefect server and no
cluster are needed to use it. ``pipelines`` and ``flows`` build on it.
"""

from dpdist.exceptions import (
    BudgetExceeded,
    DPDistError,
    ParameterError,
    ReleaseKeyConflict,
    UnknownDataset,
)
from dpdist.privacy.guard import unaccounted

__version__ = "0.1.0"

__all__ = [
    "BudgetExceeded",
    "DPDistError",
    "ParameterError",
    "ReleaseKeyConflict",
    "UnknownDataset",
    "__version__",
    "unaccounted",
]
