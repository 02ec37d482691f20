"""scikit-learn's own estimator checks on dpdist's estimators.

The non-private configurations pass every check, and so does the private classifier with
per-record clipping (``bounds="clip"``: scikit-learn's test data is not scaled to |x_ij| <= 1,
and the default ``bounds="check"`` refuses such data by design, naming the bound). The one
documented exception contradicts DP: the private regressor at epsilon = 1 on scikit-learn's
30-row regression set is too noisy for the check's R^2 threshold.
"""

from __future__ import annotations

from sklearn.utils.estimator_checks import parametrize_with_checks

from dpdist.linear_model import DPFrankWolfeClassifier, DPFrankWolfeRegressor

ESTIMATORS = [DPFrankWolfeClassifier(method="fast-fw", lam=5.0, max_iter=200),
              DPFrankWolfeClassifier(method="fw", lam=5.0, max_iter=100),
              DPFrankWolfeRegressor(method="fast-fw", lam=5.0, max_iter=200),
              DPFrankWolfeClassifier(bounds="clip"),
              DPFrankWolfeRegressor(bounds="clip")]


def expected_failures(estimator) -> dict[str, str]:
    if isinstance(estimator, DPFrankWolfeRegressor) and estimator.method == "fast-dp-fw":
        return {"check_regressors_train": "a private fit at epsilon=1 on a 30-row set is too noisy for the "
                                          "check's R^2 > 0.5 threshold (its noise is the point)"}
    return {}


@parametrize_with_checks(ESTIMATORS, expected_failed_checks=expected_failures)
def test_scikit_learn_estimator_checks(estimator, check) -> None:
    check(estimator)
