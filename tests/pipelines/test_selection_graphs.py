"""The Dask graphs give the library's results on a real 2-worker LocalCluster."""

from __future__ import annotations

import numpy as np
import pytest
from distributed import Client, LocalCluster

from dpdist.data.store import open_store, write_store
from dpdist.data.synthetic import make_synthetic
from dpdist.selection.sis import correlation_scores as in_memory_scores
from dpdist.selection.sis import store_scores
from pipelines.sis import correlation_scores, xty_graph
from pipelines.two_stage import block_vote_counts


@pytest.fixture(scope="module")
def client():
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster, \
            Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    X, y = make_synthetic("news20", random_state=0, n=2500, d=5000).materialize()
    path = tmp_path_factory.mktemp("s") / "news20"
    write_store(path, X, y, task="binary", block_rows=300)
    return path, X, y


def test_dask_scores_equal_single_process(client, store):
    path, X, y = store
    got = correlation_scores(path)
    np.testing.assert_allclose(got, in_memory_scores(X, y), rtol=1e-12)
    np.testing.assert_allclose(got, store_scores(open_store(path)), rtol=1e-12)
    # one task per group of row blocks (9 blocks here) and a tree of sums with at most 8 inputs each
    np.testing.assert_allclose(correlation_scores(path, groups=9), got, rtol=1e-12)
    graph = dict(xty_graph(path, groups=9).__dask_graph__())
    assert sum(str(k).startswith("xty-group-") for k in graph) == 9
    assert all(len(v.dependencies) <= 8 for k, v in graph.items() if str(k).startswith("xty-sum-"))
    assert sum(str(k).startswith("xty-group-") for k in dict(xty_graph(path).__dask_graph__())) == 2  # 2 workers


def test_dask_scores_enforce_bounds(client, tmp_path):
    X = np.full((10, 3), 2.0)
    write_store(tmp_path / "big", X, np.ones(10), task="regression")
    with pytest.raises(Exception, match=r"\|X_ij\| <= 1"):
        correlation_scores(tmp_path / "big")
    np.testing.assert_allclose(correlation_scores(tmp_path / "big", bounds="clip"), [10.0, 10.0, 10.0])


def test_dask_votes_equal_sequential_votes(client, store):
    path, X, y = store
    m = 50  # public (e.g. from a released row count)
    counts = block_vote_counts(path, 5, m, alpha=0.01, random_state=7)
    from dpdist.selection.two_stage import assign_blocks, block_votes
    blocks = assign_blocks(X.shape[0], m, 7)
    expected = np.zeros(X.shape[1])
    for rows in blocks:
        expected[block_votes(X[rows], y[rows], 5, 0.01)] += 1
    np.testing.assert_array_equal(counts, expected)
    assert counts.sum() <= 5 * m
