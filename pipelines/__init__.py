"""Dask graphs over stored data, built on the dpdist library (which never imports them).

Each graph reads the zarr store on the workers (a task gets a path and a row range, never
the data through the scheduler) and returns only what the library's mechanisms need:

* :mod:`pipelines.sis` -- X^T y as a tree reduction over row blocks (DP-SIS scores);
* :mod:`pipelines.two_stage` -- the sqrt(n) per-block LASSO votes of two-stage, fitted in parallel;
* :mod:`pipelines.best_subset` -- DP best subset selection: one-swap evaluations mapped over the
  workers, every MIP (the OA master) on a worker holding the ``mip`` resource.

The raw aggregates these return are inputs of a mechanism, never results to persist: the
flows pass them straight to a release task that charges the accountant first.
"""
