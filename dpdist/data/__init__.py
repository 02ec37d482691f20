"""Sparse data: svmlight ingest into zarr stores, loading, and the transforms privacy bounds need."""

from dpdist.data.store import SparseStore, StoreWriter, open_store, write_store

__all__ = ["SparseStore", "StoreWriter", "open_store", "write_store"]
