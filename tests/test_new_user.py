"""The newcomer's own-data path of the README, as scripts/new_user_check.sh walks it (issue 41)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_new_user_script_walks_the_own_data_path():
    env = {k: v for k, v in os.environ.items() if k not in ("DPDIST_LEDGER", "DPDIST_UNACCOUNTED")}
    env["DPDIST"] = str(Path(sys.executable).parent / "dpdist")
    env["PYTHON"] = sys.executable
    r = subprocess.run(
        ["bash", str(REPO / "scripts" / "new_user_check.sh")], env=env, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert "new-user check: ok" in r.stdout
