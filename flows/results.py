"""The files a run leaves in ``<output>``: one JSON per stage, written atomically."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from dpdist.exceptions import ParameterError
from dpdist.flows.config import RunConfig
from dpdist.privacy.ledger import artefacts
from dpdist.utils.io import check_directory, write_json_atomic

__all__ = ["RUN_FILES", "check_output", "read_models", "read_stage", "write_models", "write_stage"]

ARTEFACTS = "artefacts"  # the directory of the models' weights (write_models)

# the files a run writes into <output> (its stores aside), each atomically
RUN_FILES = (
    "selection.json",
    "models.json",
    "evaluation.json",
    "results.json",
    "report.md",
    "report.html",
    "privacy_utility.png",
    "convergence.png",
    "selected_features.png",
)


def check_output(cfg: RunConfig) -> None:
    """Refuse, before anything is charged, an output directory the run could not write its results into:
    a path where no directory can be made, or one that takes no new file (read-only, no permission), or
    one of :data:`RUN_FILES` that is a directory there. A ParameterError names the config key and path."""
    out = Path(cfg.output)
    try:
        check_directory(out)  # made (with its parents) and a file made in it, then removed
    except OSError as e:
        reason = os.strerror(e.errno) if e.errno else type(e).__name__
        raise ParameterError(
            f"{cfg.source_file}: output: {cfg.output}: the run could not write its results there ({reason}); "
            "nothing was charged"
        ) from None
    models = out / ARTEFACTS
    if models.exists() and not (models.is_dir() and os.access(models, os.W_OK | os.X_OK)):
        raise ParameterError(
            f"{cfg.source_file}: output: {models} is not a directory the run can write its models' weights into; "
            "nothing was charged"
        )
    for name in RUN_FILES:
        if (out / name).is_dir():
            raise ParameterError(
                f"{cfg.source_file}: output: {out / name} is a directory, where the run writes its {name}; "
                "nothing was charged"
            )


def write_stage(cfg: RunConfig, stage: str, payload: Any) -> Path:
    return write_json_atomic(Path(cfg.output) / f"{stage}.json", payload)


def write_models(cfg: RunConfig, models: list[dict[str, Any]]) -> Path:
    """``models.json``: each released model as its ledger row holds it, its weights in a binary,
    content-addressed file ``artefacts/<sha256>.npz`` of the output (written first, atomically; float64,
    a sparse model as indices and values) and the reference to it in their place
    (:mod:`dpdist.privacy.ledger.artefacts`): a model of 20M weights is a 162 MB file, not 0.8 GB of JSON
    written in a minute. :func:`read_models` (or ``dpdist.released.model_result``) reads them back whole,
    the digest checked."""
    root = Path(cfg.output) / ARTEFACTS
    rows = []
    for rec in models:
        row, found = artefacts.split_models(rec["result"], root)
        if found:
            root.mkdir(parents=True, exist_ok=True)
        for artefact in found:
            artefacts.write(root, artefact)
        rows.append({**rec, "result": row})
    return write_stage(cfg, "models", rows)


def read_models(cfg: RunConfig) -> list[dict[str, Any]]:
    """``models.json`` whole (:func:`write_models`): each model's weights read from its artefact."""
    root = Path(cfg.output) / ARTEFACTS  # looked in first: an output moved or mounted elsewhere still reads
    return [{**rec, "result": artefacts.expand(rec["result"], root)} for rec in read_stage(cfg, "models")]


def read_stage(cfg: RunConfig, stage: str) -> Any:
    path = Path(cfg.output) / f"{stage}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ParameterError(f"{path} does not exist: run the stage {stage!r} first (or the end-to-end flow)") from None
