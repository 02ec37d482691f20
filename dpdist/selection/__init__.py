"""Private feature selection: top-k mechanisms (DP-SIS and the rest arrive with issue 6)."""

from dpdist.selection.topk import CanonicalTopK

__all__ = ["CanonicalTopK"]
