"""The files a run leaves in ``<output>``: one JSON per stage, written atomically."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dpdist.exceptions import ParameterError
from dpdist.flows.config import RunConfig
from dpdist.utils.io import write_json_atomic

__all__ = ["write_stage", "read_stage"]


def write_stage(cfg: RunConfig, stage: str, payload: Any) -> Path:
    return write_json_atomic(Path(cfg.output) / f"{stage}.json", payload)


def read_stage(cfg: RunConfig, stage: str) -> Any:
    path = Path(cfg.output) / f"{stage}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ParameterError(f"{path} does not exist: run the stage {stage!r} first (or the end-to-end flow)") from None
