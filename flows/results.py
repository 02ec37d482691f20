"""The files a run leaves in ``<output>``: one JSON per stage, written atomically."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from dpdist.exceptions import ParameterError
from flows.config import RunConfig

__all__ = ["write_json", "write_stage", "read_stage"]


def write_json(path: str | os.PathLike[str], payload: Any) -> Path:
    """Write ``payload`` as JSON to ``path`` atomically (temporary file, fsync, rename)."""
    target = Path(path).resolve()
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-", suffix=".json")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(payload, f, indent=1, sort_keys=True, allow_nan=True, default=str)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def write_stage(cfg: RunConfig, stage: str, payload: Any) -> Path:
    return write_json(Path(cfg.output) / f"{stage}.json", payload)


def read_stage(cfg: RunConfig, stage: str) -> Any:
    path = Path(cfg.output) / f"{stage}.json"
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        raise ParameterError(f"{path} does not exist: run the stage {stage!r} first (or the end-to-end flow)") \
            from None
