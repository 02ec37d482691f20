"""The command-line options the benchmark scripts share, declared once.

``parser`` builds a script's parser from its options' defaults (``--sets``, ``--iters``, ``--reps``,
``--lam``, ...: each typed by its default); ``SHARED`` is the default of ``--shared``, the folder of the real
data sets, and ``shared_data`` reads it, ``$DPDIST_SHARED_DATA`` first.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

SHARED = str(Path(__file__).resolve().parents[2] / "shared" / "data")


def parser(**defaults: str | int | float) -> argparse.ArgumentParser:
    """A parser with an option ``--<name>`` (``_`` written ``-``) for each keyword, in the order given, whose
    value is of its default's type."""
    ap = argparse.ArgumentParser()
    for name, default in defaults.items():
        ap.add_argument("--" + name.replace("_", "-"), type=type(default), default=default)
    return ap


def shared_data(args: argparse.Namespace) -> Path:
    """The folder of the real data sets: ``$DPDIST_SHARED_DATA`` when set, else ``--shared``."""
    return Path(os.environ.get("DPDIST_SHARED_DATA", args.shared))
