"""Installed as one package: ``pip install .`` adds the top-level name dpdist and nothing else."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_wheel_installs_only_dpdist(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    (wheel,) = tmp_path.glob("dpdist-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    top = {n.split("/")[0] for n in names}
    assert {t for t in top if not t.endswith(".dist-info")} == {"dpdist"}
    assert "dpdist/flows/defaults.toml" in names and "dpdist/pipelines/dp_gd.py" in names
    assert not any(n.startswith(("flows/", "pipelines/", "tests/", "benchmarks/")) for n in names)


def test_installed_names_work_outside_the_checkout(tmp_path):
    # run from elsewhere, so the checkout's folders are not on sys.path: only the installed names
    # resolve (a resource looked up as "flows" once passed here and failed in a fresh clone)
    code = (
        "import importlib.util, dpdist.flows.config as c, dpdist.pipelines;"
        "assert importlib.util.find_spec('flows') is None and importlib.util.find_spec('pipelines') is None;"
        "assert c._defaults()"
    )
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-2000:]


def test_every_package_folder_is_listed_in_pyproject():
    # the package list is explicit (the flows and pipelines folders map to dpdist.*): a new sub-package
    # missing from it would be left out of the wheel while an editable install still finds it
    import tomllib

    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    roots = {"dpdist": REPO / "dpdist"} | {name: REPO / path for name, path in cfg["package-dir"].items()}
    found = set()
    for name, root in roots.items():
        for init in root.rglob("__init__.py"):
            rel = init.parent.relative_to(root).parts
            found.add(".".join((name, *rel)))
    assert found == set(cfg["packages"])
