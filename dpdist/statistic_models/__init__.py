"""Private linear models fitted from released noisy statistics of the data, scikit-learn style.

Where :mod:`dpdist.gradient_models` releases a model through noisy gradient steps, these release the
sufficient statistics a model is computed from, once, with calibrated noise, and compute the model
from them (post-processing):

* ``AdaSSPRegressor`` (:mod:`.adassp`, [Wan18]): least squares by adaptive sufficient statistics
  perturbation: noisy X^T X and X^T y, the ridge penalty chosen from a noisy smallest eigenvalue.
  The default learner on a regression.
* ``ScreenedCentroidClassifier`` (:mod:`.noisy_centroid`): a nearest-centroid classifier on k
  privately screened columns (noisy class counts, a peeling top-k of the class-mean differences,
  noisy class sums): the default learner on a small, wide, dense table (p >> n).

Both are :class:`dpdist.base.PrivateLearner` s: they fit and release through the release skeleton
(:mod:`dpdist.base`) and are built by the method registry (``adassp``, ``screened-centroid``).
"""

from dpdist.statistic_models.adassp import AdaSSPRegressor
from dpdist.statistic_models.noisy_centroid import ScreenedCentroidClassifier

__all__ = ["AdaSSPRegressor", "ScreenedCentroidClassifier"]
