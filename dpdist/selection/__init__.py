"""Private feature selection: top-k mechanisms, DP-SIS, and the two-stage baseline."""

from dpdist.selection.baselines import JointTopK, LaplaceTopK, PeelingTopK
from dpdist.selection.sis import DPSIS, correlation_scores, store_scores
from dpdist.selection.topk import CanonicalTopK
from dpdist.selection.two_stage import TwoStageRegression, TwoStageSelector

__all__ = [
    "DPSIS",
    "CanonicalTopK",
    "JointTopK",
    "LaplaceTopK",
    "PeelingTopK",
    "TwoStageRegression",
    "TwoStageSelector",
    "correlation_scores",
    "store_scores",
]
