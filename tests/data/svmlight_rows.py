"""A small svmlight file of random rows, for the tests of what ingest and split make of one."""

from __future__ import annotations

import numpy as np


def svmlight_rows(path, labels, seed=0, d=8):
    """Write one row per label to ``path``: ``d`` features, each non-zero with probability 0.6 and
    uniform on [-1, 1] (a generator seeded ``seed``); return ``path``."""
    rng = np.random.default_rng(seed)
    lines = []
    for lab in labels:
        x = rng.uniform(-1, 1, d) * (rng.random(d) < 0.6)
        lines.append(f"{lab:g} " + " ".join(f"{j + 1}:{v:.5f}" for j, v in enumerate(x) if v))
    path.write_text("\n".join(lines) + "\n")
    return path
