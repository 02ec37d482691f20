"""Private linear models trained by gradient methods, scikit-learn style: DP-SGD, DP-GD, DP-IHT and
select-then-train.

All of them share one shape (``GradientModel``, :mod:`dpdist.gradient_models.base`):

* **Per-record preprocessing** (``row_norm``): each row divided by its l2 norm (``"l2"``, the
  default: cosine-normalised rows, as TF-IDF text is) or its largest |x_ij| (``"max"``), or left
  alone (``None``). A map of one record at a time: no privacy cost, and the released model
  carries it, so ``predict`` applies it again.
* **A public count** of the training records: ``n_records`` when the caller has one (a noisy
  count released earlier, e.g. the run's row counts), else the fit first releases a Laplace
  count of its own (``count_epsilon``, a separate release charged before the model's: the
  model's loss depends on it through q and T, and a loss must be fixed before it is charged).
  The exact n is never used: n is private under ADD/REMOVE.
* **The learner's mechanism**, charged as one release in its strongest form, then the model
  ``{"indices", "values", "intercept", ...}`` (non-zero weights only) recorded by the ledger.

The learners, one module each:

* ``DPSGDClassifier`` / ``DPSGDRegressor``: DP-SGD, Poisson batches of expected size ``batch_size``
  for ``epochs`` passes [ACG+16]; ``DPGDClassifier`` / ``DPGDRegressor``: full-batch
  DP-GD, ``max_iter`` steps (Dask: ``dpdist.pipelines.dp_gd``). ``dpdist.solvers.dp_sgd`` has the algorithm
  and its proof. Dense models (:mod:`.sgd`).
* ``DPIHTClassifier`` / ``DPIHTRegressor``: noisy iterative hard thresholding (Cai, Wang & Zhang
  2021): full-batch DP-GD whose iterate is cut to its ``s`` largest weights after every step
  (``dpdist.solvers.dp_iht``). s-sparse models (:mod:`.iht`).
* ``SelectTrainClassifier`` / ``SelectTrainRegressor``: a private screening of the ``k`` features
  most correlated with y (Gaussian noise on |X^T y| of the normalised rows, then the top k:
  ``dpdist.selection.gaussian``), then DP-SGD on those k columns. k-sparse models (:mod:`.select_train`).
* ``AutoClassifier`` / ``AutoRegressor``: the default learner, select-then-train when its screening's
  noise is small beside the public count of records, DP-SGD on every column otherwise; a choice on
  public values, charged as the chosen learner (:mod:`.auto`).

Without an accountant the same noisy fit runs and nothing is recorded (experiments); with one,
``fit`` charges it first and a retried ``key`` replays the recorded model (the release skeleton of
:mod:`dpdist.base`). ``from_release`` rebuilds a fitted estimator from a recorded model. The method
registry (:mod:`dpdist.methods`) names each learner and builds it.
"""

from __future__ import annotations

from dpdist.gradient_models.auto import AutoClassifier, AutoRegressor
from dpdist.gradient_models.base import GradientModel, SteppedModel, noisy_count
from dpdist.gradient_models.iht import DPIHTClassifier, DPIHTRegressor
from dpdist.gradient_models.select_train import SelectTrainClassifier, SelectTrainRegressor
from dpdist.gradient_models.sgd import DPGDClassifier, DPGDRegressor, DPSGDClassifier, DPSGDRegressor

__all__ = [
    "AutoClassifier",
    "AutoRegressor",
    "DPGDClassifier",
    "DPGDRegressor",
    "DPIHTClassifier",
    "DPIHTRegressor",
    "DPSGDClassifier",
    "DPSGDRegressor",
    "GradientModel",
    "SelectTrainClassifier",
    "SelectTrainRegressor",
    "SteppedModel",
    "noisy_count",
]
