"""DP best subset selection by mixed-integer optimisation ([DPBSS25]; docs/algorithms.md §6).

* :mod:`.objective` -- F(S) (least squares, hinge), Assumption 1, the ADD/REMOVE sensitivity;
* :mod:`.least_squares`, :mod:`.hinge` -- exact / certified inner solves and OA cuts;
* :mod:`.iht` -- IHT warm start and one-swap local search;
* :mod:`.oa` -- outer approximation on SCIP with lazy cuts;
* :mod:`.samplers` -- the top-R and mistakes samplers in log space;
* :mod:`.top_r`, :mod:`.mistakes` -- the two mechanisms and their selectors;
* :mod:`.brute_force` -- enumeration, the reference for small p;
* :mod:`.mcmc` -- the Roy-Tewari MCMC baseline (experiments only);
* :mod:`.executor` -- where the work units run (in process; Dask in ``dpdist.pipelines.best_subset``).
"""

from dpdist.selection.best_subset.mistakes import BSSMistakesSelector
from dpdist.selection.best_subset.objective import Problem, make_problem, sensitivity
from dpdist.selection.best_subset.top_r import BSSTopRSelector

__all__ = ["BSSMistakesSelector", "BSSTopRSelector", "Problem", "make_problem", "sensitivity"]
