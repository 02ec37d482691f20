"""Where the ledger is when none is named (the CLI contract), without importing the ledger itself: every
command's ``--help`` shows it, and the command line's start-up imports no ledger code (no NumPy)."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["default_ledger_path"]


def default_ledger_path() -> Path:
    """``$DPDIST_LEDGER`` if set, else ``~/.dpdist/ledger.sqlite`` (the CLI contract)."""
    env = os.environ.get("DPDIST_LEDGER")
    return Path(env) if env else Path.home() / ".dpdist" / "ledger.sqlite"
