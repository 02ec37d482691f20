"""Prefect flows over Dask: ingest, select, train, evaluate, and the end-to-end job (``dpdist run``).

The flows build on ``dpdist`` (the library) and ``pipelines`` (the Dask graphs); nothing in
the library imports them.
"""
