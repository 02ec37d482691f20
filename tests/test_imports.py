"""The library and the command line's parser import no flows, pipelines, Prefect or Dask.

The library works on its own (no Prefect server, no cluster); the command line imports the flows
only inside ``dpdist run`` when a run starts. Each check runs in a fresh interpreter, so modules
other tests imported do not count.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = ("prefect", "dask", "distributed", "dpdist.flows", "dpdist.pipelines")


def _imported_after(code: str) -> list[str]:
    """The modules of HEAVY (or under them) in ``sys.modules`` after ``code`` runs in a new interpreter."""
    probe = (
        f"{code}\nimport json, sys\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy))))"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=300)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize(
    "code",
    [
        "import dpdist",
        "import dpdist, dpdist.cli; dpdist.cli.build_parser()",
    ],
    ids=["library", "cli-parser"],
)
def test_no_flows_pipelines_prefect_or_dask(code: str) -> None:
    assert _imported_after(code) == []


def test_the_probe_sees_a_flow_import() -> None:
    """The check can fail: importing a flow module is seen."""
    assert "dpdist.flows.config" in _imported_after("import dpdist.flows.config")
