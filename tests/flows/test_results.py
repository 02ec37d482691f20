"""The run's models.json: each model's weights in a binary, content-addressed file beside it."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from dpdist.exceptions import ParameterError
from dpdist.flows.results import check_output, read_models, write_models


def _model(n: int, dense: bool) -> dict:
    rng = np.random.default_rng(0)
    idx = np.arange(n) if dense else np.sort(rng.choice(n, 5, replace=False))
    return {
        "indices": idx.tolist(),
        "values": rng.standard_normal(idx.size).tolist(),
        "intercept": 0.25,
        "n_features": n,
        "path": [],
        "iterations": 3,
    }


def test_models_json_refers_to_binary_weights_read_back_whole(tmp_path: Path) -> None:
    cfg = SimpleNamespace(output=str(tmp_path / "out"))
    models = [
        {"key": "a", "method": "dp-gd", "result": _model(100_000, dense=True)},
        {"key": "b", "method": "dp-fw", "result": _model(50, dense=False)},
    ]
    write_models(cfg, models)
    raw = json.loads((tmp_path / "out" / "models.json").read_text())
    for rec in raw:
        ref = rec["result"]["__dpdist_artefact__"]
        assert "values" not in rec["result"] and rec["result"]["iterations"] == 3
        path = tmp_path / "out" / "artefacts" / ref["file"]
        assert path.stat().st_size == ref["bytes"]
    dense = raw[0]["result"]["__dpdist_artefact__"]
    assert dense["layout"] == "dense" and dense["bytes"] <= 1.1 * 8 * 100_000  # float64 weights, no indices
    assert read_models(cfg) == models  # whole again: the same numbers
    path = tmp_path / "out" / "artefacts" / dense["file"]
    path.write_bytes(path.read_bytes()[:-8] + b"\0" * 8)  # a changed file is refused (its digest)
    with pytest.raises(ParameterError):
        read_models(cfg)


def test_an_output_whose_artefacts_cannot_be_written_is_refused_before_any_charge(tmp_path: Path) -> None:
    cfg = SimpleNamespace(output=str(tmp_path / "out"), source_file="run.toml")
    check_output(cfg)  # a fresh output: accepted
    (tmp_path / "out").mkdir(exist_ok=True)
    (tmp_path / "out" / "artefacts").write_text("not a directory")
    with pytest.raises(ParameterError, match="artefacts is not a directory the run can write"):
        check_output(cfg)


def test_models_json_reads_from_the_output_where_it_lies_now(tmp_path: Path) -> None:
    cfg = SimpleNamespace(output=str(tmp_path / "out"))
    models = [{"key": "a", "method": "dp-gd", "result": _model(1000, dense=True)}]
    write_models(cfg, models)
    (tmp_path / "out").rename(tmp_path / "moved")  # the output copied or mounted elsewhere
    assert read_models(SimpleNamespace(output=str(tmp_path / "moved"))) == models
