"""The library and the command line's parser import no flows, pipelines, Prefect or Dask.

The library works on its own (no Prefect server, no cluster); the command line imports the flows
only inside ``dpdist run`` when a run starts. Each check runs in a fresh interpreter, so modules
other tests imported do not count.
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

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


# ---------------------------------------------------------------------------------------------- import order
#
# The shipped packages stand in floors: a module imports only what stands below it, never back up. Two
# graphs are checked, both read from the source (every import statement, module-level or inside a
# function): the modules', and the rooms' -- each folder of dpdist (a subpackage), each top-level module of
# dpdist, the flows and the Dask graphs -- where a circle through folders is an import that runs back up.
# Neither may hold a circle; so the floors exist, and no import runs upward.

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"dpdist": ROOT / "dpdist", "dpdist.flows": ROOT / "flows", "dpdist.pipelines": ROOT / "pipelines"}


def _module_files() -> dict[str, Path]:
    """Every shipped module by its dotted name (a package by its ``__init__``)."""
    out = {}
    for package, folder in PACKAGES.items():
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join([package, *parts])] = path
    return out


def _imported(name: str, path: Path, known: set[str]) -> set[str]:
    """The shipped modules ``name`` (at ``path``) imports, anywhere in it."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[: len(package.split(".")) - node.level + 1], base]).strip(".")
            targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
        else:
            continue
        for target in targets:
            while target and target not in known:  # a name inside a module: the module
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def _room(module: str) -> str:
    """The room a module stands in: the flows, the Dask graphs, a folder of dpdist, or a module of dpdist."""
    parts = module.split(".")
    if parts[:2] in (["dpdist", "flows"], ["dpdist", "pipelines"]):
        return ".".join(parts[:2])
    return ".".join(parts[:2]) if len(parts) > 1 else "dpdist (__init__)"


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The circles of a directed graph: its strongly connected components of two or more nodes (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def import_graphs() -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """(the modules' import graph, the rooms' import graph) of the shipped packages."""
    files = _module_files()
    modules = {name: _imported(name, path, set(files)) for name, path in files.items()}
    rooms: dict[str, set[str]] = {}
    for name, targets in modules.items():
        here = _room(name)
        rooms.setdefault(here, set()).update(_room(t) for t in targets if _room(t) != here)
    return modules, rooms


def test_the_circle_finder_finds_a_circle() -> None:
    """The check can fail: a circle, and one through three nodes, are seen; a chain is not one."""
    assert circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": {"c"}}) == []


def test_no_module_and_no_folder_imports_back_up() -> None:
    modules, rooms = import_graphs()
    assert len(modules) > 100 and {"dpdist.methods", "dpdist.flows.train", "dpdist.pipelines.train"} <= set(modules)
    assert "dpdist.solvers" in rooms["dpdist.linear_model"]  # the graph holds what the files import
    assert circles(modules) == [], "modules that import each other"
    assert circles(rooms) == [], "folders that import each other: an import that runs back up"
    # the library never imports the flows or the Dask graphs (they build on it); the command line stands above
    # them all (``dpdist run`` starts a flow)
    for name, targets in modules.items():
        if not name.startswith(("dpdist.flows", "dpdist.pipelines", "dpdist.cli")):
            assert not {t for t in targets if t.startswith(("dpdist.flows", "dpdist.pipelines"))}, name


def test_the_registry_stands_below_what_it_builds() -> None:
    """The method registry names its estimators by path (it imports none of them), and none of the
    modules it names reads it back."""
    from dpdist.methods import REGISTRY

    modules, _ = import_graphs()
    assert modules["dpdist.methods"] <= {"dpdist.defaults", "dpdist.exceptions"}
    named = {path.partition(":")[0] for entry in REGISTRY.values() for path in entry.estimator if path}
    assert {"dpdist.linear_model", "dpdist.tuning", "dpdist.gradient_models"} <= named
    for module in named:
        below = {module} | {m for m in modules if m.startswith(module + ".")}
        assert not any("dpdist.methods" in modules[m] for m in below), module


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
