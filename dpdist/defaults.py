"""The public default values the estimators, the method registry, the command line and the run config
share: one value each, imported by all of them (this module imports nothing of dpdist's).

They are the main job's (``flows/defaults.toml``) and the benchmarks' values; ``tests/test_methods.py``
checks that the run config and the estimators agree with them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["BSS_RIDGE", "FW_ITERS", "FW_LAM", "bss_ridge"]

# Frank-Wolfe's L1-ball radius and steps: the main job's and benchmarks/utility.py's (unit-norm rows)
FW_LAM = 500.0
FW_ITERS = 1000
# best subset selection's ridge by loss ([DPBSS25]'s values, benchmarks/bss_experiments.py's)
BSS_RIDGE: Mapping[str, float] = MappingProxyType({"squared": 120.0, "hinge": 100.0})


def bss_ridge(loss: str) -> float:
    """The default ridge of best subset selection for ``loss`` ("squared" or "hinge")."""
    if loss not in BSS_RIDGE:
        raise ValueError(f"loss must be one of {tuple(BSS_RIDGE)}, got {loss!r}")
    return BSS_RIDGE[loss]
