"""The fast sparse (DP) Frank-Wolfe solver of [RKL23] (Alg. 2 with the queue of Alg. 3 and the
sampler of Alg. 4), as numba kernels over grouped state.

Modules: :mod:`~dpdist.solvers.fast_fw.solver` (the public :func:`fast_frank_wolfe`: checks, the
kernel's arguments, the timed run), :mod:`~dpdist.solvers.fast_fw.kernel` (the main loop),
:mod:`~dpdist.solvers.fast_fw.select` (vertex selection), :mod:`~dpdist.solvers.fast_fw.heap`
(the lazy max-queue), :mod:`~dpdist.solvers.fast_fw.weights` (the exponential mechanism's
weights), :mod:`~dpdist.solvers.fast_fw.move` (a step's update by rows or by columns),
:mod:`~dpdist.solvers.fast_fw.columns` and :mod:`~dpdist.solvers.fast_fw.layout` (the column
passes and the row-order copies they read), :mod:`~dpdist.solvers.fast_fw.screen` (screening
inside the kernel), :mod:`~dpdist.solvers.fast_fw.checks` (X^T y and the X_csc check),
:mod:`~dpdist.solvers.fast_fw.threads` (serial and threaded builds) and
:mod:`~dpdist.solvers.fast_fw.state` (the grouped state).
"""

from dpdist.solvers.fast_fw.solver import FAST_SELECTIONS, fast_frank_wolfe

__all__ = ["FAST_SELECTIONS", "fast_frank_wolfe"]
