"""Logging and warnings of the command line: one line each on stderr, at WARNING unless ``-v``."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any


class _StderrHandler(logging.StreamHandler):
    """Writes to whatever ``sys.stderr`` is when a record is emitted (not the one at creation)."""

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


def _one_line_warning(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, line: str | None = None
) -> str:
    """A warning as one line naming its kind, without the Python source line that raised it."""
    return f"dpdist: warning ({category.__name__}): {message}\n"


def _logging(verbose: bool) -> None:
    """stderr logs at WARNING (INFO with -v), for dpdist, Prefect and Dask, in this process and its children."""
    level = "INFO" if verbose else "WARNING"
    # -v asks for INFO whatever the environment says; without it the environment's own choice stands
    put = os.environ.__setitem__ if verbose else os.environ.setdefault
    put("PREFECT_LOGGING_LEVEL", level)
    put("DASK_LOGGING__DISTRIBUTED", level.lower())
    logger = logging.getLogger("dpdist")
    logger.setLevel(getattr(logging, level))
    if not any(isinstance(h, _StderrHandler) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)
