"""Dask graphs over stored data, built on the dpdist library (which never imports them).

Each graph reads the zarr store on the workers (a task gets a path and a block range, never
the data through the scheduler) and returns only what the library's mechanisms need:

* :mod:`dpdist.pipelines.sis` -- X^T y over column ranges of the CSC copy (DP-SIS scores);
* :mod:`dpdist.pipelines.two_stage` -- the sqrt(n) per-block LASSO votes of two-stage, fitted in parallel;
* :mod:`dpdist.pipelines.best_subset` -- DP best subset selection: one-swap evaluations mapped over the
  workers, every MIP (the OA master) on a worker holding the ``mip`` resource.

Block-reading tasks are pinned to workers (:mod:`dpdist.pipelines.placement`), so what a task
keeps in its worker's block cache (DP-SIS: each column range's pointers, y and its codes)
serves the same task in a later step of the run.

The raw aggregates these return are inputs of a mechanism, never results to persist: the
flows pass them straight to a release task that charges the accountant first.
"""
