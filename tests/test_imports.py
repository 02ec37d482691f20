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


# what the command line's start-up and `dpdist --help` leave out (issue 56: 3.9 s before; each of these is
# imported by the command that needs it)
START_UP = ("numpy", "scipy", "dp_accounting", "psycopg", "zarr", "pandas", "sklearn", "numba")


def test_cli_start_up_imports_no_numerics_ledger_driver_or_store() -> None:
    code = (
        "import json, sys, contextlib, io\nimport dpdist.cli\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    dpdist.cli.main(['--help'])\n"
        f"print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in {START_UP!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_budget_show_imports_no_rdp_accountant_or_postgres_driver(tmp_path) -> None:
    from dpdist.cli import main

    assert main(["ledger", "init", "--ledger", str(tmp_path / "l.sqlite")]) == 0  # a ledger to show
    code = (
        "import json, sys, contextlib, io\nimport dpdist.cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    assert dpdist.cli.main(['budget', 'show', '--ledger', {str(tmp_path / 'l.sqlite')!r}]) == 0\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & {'dp_accounting', 'psycopg', 'zarr'})))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=300)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_stated_lists_equal_the_modules_they_spare_importing() -> None:
    """The lists kept beside the parser and the privacy loss (so start-up imports neither) equal their sources."""
    from dp_accounting.rdp.rdp_privacy_accountant import DEFAULT_RDP_ORDERS

    from dpdist.cli.synth import SETS
    from dpdist.data.synthetic import GENERATORS
    from dpdist.privacy.loss import ORDERS

    assert list(SETS) == sorted(GENERATORS)
    assert ORDERS[: len(DEFAULT_RDP_ORDERS)] == tuple(float(a) for a in DEFAULT_RDP_ORDERS)
