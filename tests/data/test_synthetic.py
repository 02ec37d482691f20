"""Synthetic generators: each reproduces the data-generating process its seed describes."""

from __future__ import annotations

import json

import numpy as np
import pytest

from dpdist.cli import main
from dpdist.data import open_store
from dpdist.data.synthetic import SPARSE_PROFILES, make_synthetic, write_synthetic
from dpdist.exceptions import ParameterError


def test_raj():
    s = make_synthetic("raj", random_state=0)
    X, y = s.materialize()
    X = X.toarray()
    assert X.shape == (3000, 600) and np.abs(X).max() == pytest.approx(1.0)
    assert len(s.true_support) == 70 and sorted(s.true_coef) == [-1.0] * 35 + [1.0] * 35
    w = np.zeros(600)
    w[s.true_support] = s.true_coef
    np.testing.assert_allclose(y, X @ w)
    Xc, yc = make_synthetic("raj", random_state=0, correlated=True, task="binary").materialize()
    Xc = Xc.toarray()
    r = np.mean([np.corrcoef(Xc[:, j], Xc[:, j + 1])[0, 1] for j in range(0, 599, 7)])
    assert r == pytest.approx(0.5, abs=0.03)
    assert set(np.unique(yc)) == {0.0, 1.0}


def test_fan_lv():
    s = make_synthetic("fan-lv", random_state=1, n=20000)
    X, y = s.materialize()
    a = 4 * np.log(20000) / np.sqrt(20000)
    assert X.shape == (20000, 2000) and len(s.true_support) == 8
    assert np.all(np.abs(s.true_coef) >= a)
    w = np.zeros(2000)
    w[s.true_support] = s.true_coef
    assert np.var(y - X @ w) == pytest.approx(1.5, rel=0.05)
    # default n = 100: a = 4 ln(100)/10 = 1.842 (spec)
    assert make_synthetic("fan-lv", random_state=2).params["a"] == pytest.approx(1.842, abs=1e-3)


@pytest.mark.parametrize("name", ["stability-w1", "stability-w1w2"])
def test_stability_sets(name):
    s = make_synthetic(name, random_state=3)
    X, y = s.materialize()
    X = X.toarray()
    assert X.shape == (100, 100) and s.true_support == [0, 1, 2, 3, 4]
    r1 = y - X[:, :5].sum(axis=1)
    r2 = y - X[:, -5:].sum(axis=1)
    outlier = np.arange(100) % 10 == 9
    assert np.std(r1[~outlier]) < 0.5
    if name == "stability-w1":
        assert np.std(r1[outlier]) < 0.5
    else:
        assert np.std(r2[outlier]) < 0.5 and np.std(r1[outlier]) > 1.0


def test_bss():
    s = make_synthetic("bss", random_state=4)
    X, y = s.materialize()
    X = X.toarray()
    assert s.true_support == [1, 3, 5, 7, 9] and np.allclose(s.true_coef, 1 / np.sqrt(5))
    signal = X[:, s.true_support] @ np.array(s.true_coef)
    assert (signal @ signal) / ((y - signal) @ (y - signal)) == pytest.approx(5.0)
    _, yh = make_synthetic("bss", random_state=4, hinge=True).materialize()
    assert set(np.unique(yh)) == {-1.0, 1.0}


@pytest.mark.parametrize(
    ("name", "scale"), [("rcv1", 0.2), ("news20", 0.05), ("url", 0.001), ("webspam", 0.0006), ("kdda", 0.002)]
)
def test_sparse_profiles(name, scale):
    prof = SPARSE_PROFILES[name]
    s = make_synthetic(name, random_state=5, scale=scale)
    X, y = s.materialize()
    assert X.shape == (round(prof.n * scale), prof.d)
    assert X.nnz / X.shape[0] == pytest.approx(prof.row_nnz, rel=0.12)
    assert set(np.unique(y)) == {-1.0, 1.0} and 0.3 < np.mean(y > 0) < 0.7
    if prof.values == "tfidf":
        np.testing.assert_allclose(np.sqrt(X.multiply(X).sum(axis=1)).A.ravel(), 1.0)
    counts = np.sort(np.bincount(X.indices, minlength=prof.d))[::-1]
    assert counts[: prof.d // 100].sum() > 0.25 * X.nnz  # heavy-headed column frequencies
    # the recorded support carries the signal: labels agree with the logistic model's sign
    w = np.zeros(prof.d)
    w[s.true_support] = s.true_coef
    score = X @ w
    assert np.corrcoef(score, y)[0, 1] > 0.5


def test_write_synthetic_records_support_and_is_reproducible(tmp_path):
    a = write_synthetic("fan-lv", tmp_path / "a", seed=7)
    b = write_synthetic("fan-lv", tmp_path / "b", seed=7)
    c = write_synthetic("fan-lv", tmp_path / "c")
    assert a["dataset_id"] == b["dataset_id"] != c["dataset_id"]
    meta = open_store(tmp_path / "a").meta
    assert meta["true_support"] == a["true_support"] and len(meta["true_support"]) == 8
    assert meta["synthetic"] == "fan-lv" and meta["seed"] == 7


def test_cli_synth(tmp_path, capsys):
    code = main(["synth", "kdda", "--out", str(tmp_path / "k"), "--seed", "1", "--n", "500", "--d", "100000", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert set(out) == {"store", "name", "n_features", "task", "true_support", "schema"}
    assert out["n_features"] == 100000 and open_store(out["store"]).shape == (500, 100000)
    assert main(["synth", "kdda", "--out", str(tmp_path / "k"), "--n", "10"]) == 2  # exists
    assert main(["synth", "raj", "--out", str(tmp_path / "r"), "--d", "10"]) == 2
    assert "d must be >= 70" in capsys.readouterr().err


def test_bad_parameters():
    with pytest.raises(ParameterError, match="unknown synthetic set"):
        make_synthetic("nope")
    with pytest.raises(ParameterError, match="n must be"):
        make_synthetic("rcv1", n=0)
    with pytest.raises(ParameterError, match="unexpected keyword"):
        make_synthetic("fan-lv", correlated=True)
