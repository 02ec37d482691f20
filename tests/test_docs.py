"""The documentation: the site builds in strict mode, the README stays short and its links resolve,
nothing shipped points outside the repository, and CI runs the README's own test command."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
README_LIMIT = 10_000
SHIPPED = ["dpdist", "flows", "pipelines", "docs", "README.md"]  # the grep -rn "\.\./shared" over these
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def _hook(name: str) -> ModuleType:
    """A module of docs/hooks, imported from its file (the hooks are not a package)."""
    spec = importlib.util.spec_from_file_location(f"docs_hooks_{name}", ROOT / "docs" / "hooks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _slug(heading: str) -> str:
    """The anchor Python-Markdown's toc extension gives a heading (its default slugify)."""
    text = re.sub(r"[^\w\s-]", "", heading.strip().lower())
    return re.sub(r"[-\s]+", "-", text).strip("-")


def _anchors(markdown: Path) -> set[str]:
    headings = re.findall(r"^#{1,6}\s+(.+?)\s*#*\s*$", markdown.read_text(encoding="utf-8"), flags=re.M)
    return {_slug(h) for h in headings}


def test_readme_is_at_most_10000_characters() -> None:
    size = len(README.read_text(encoding="utf-8"))
    assert size <= README_LIMIT, f"README.md has {size} characters (limit {README_LIMIT}): move prose to docs/"


def test_every_relative_link_in_the_readme_resolves() -> None:
    missing = []
    for target in _LINK.findall(README.read_text(encoding="utf-8")):
        if "://" in target or target.startswith(("#", "mailto:")):
            continue
        path, _, anchor = target.partition("#")
        file = (ROOT / path).resolve()
        if not file.exists():
            missing.append(f"{target}: no {path}")
        elif anchor and file.suffix == ".md" and anchor not in _anchors(file):
            missing.append(f"{target}: no heading with the anchor #{anchor} in {path}")
    assert not missing, "README.md links that do not resolve:\n" + "\n".join(missing)


def test_nothing_shipped_refers_to_files_outside_the_repository() -> None:
    found = []
    for name in SHIPPED:
        top = ROOT / name
        for file in [top] if top.is_file() else sorted(top.rglob("*")):
            if not file.is_file() or "__pycache__" in file.parts:  # compiled files are not shipped from here
                continue
            for number, line in enumerate(file.read_bytes().splitlines(), 1):
                if b"../shared" in line:
                    found.append(f"{file.relative_to(ROOT)}:{number}: {line.decode(errors='replace').strip()}")
    assert not found, "references to ../shared (the papers and data live outside the repository):\n" + "\n".join(found)


def _readme_test_command() -> str:
    blocks = re.findall(r"```bash\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)
    commands = [b.strip() for b in blocks if "pytest" in b]
    assert len(commands) == 1, f"README.md should give one test command (a bash block running pytest): {commands}"
    return commands[0]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    command = _readme_test_command()
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.rstrip().splitlines()[-1] == command, f".ci/run's command differs from the README's: {command}"
    assert "bash scripts/check.sh" in command  # ruff, mypy and the strict docs build before the tests


def _nav_pages(item: object) -> list[str]:
    if isinstance(item, str):
        return [item]
    if isinstance(item, dict):
        return [page for value in item.values() for page in _nav_pages(value)]
    if isinstance(item, list):
        return [page for value in item for page in _nav_pages(value)]
    return []


def test_every_docs_page_is_in_the_nav() -> None:
    import yaml

    nav = _nav_pages(yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))["nav"])
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages - set(nav) == set(), "pages under docs/ that the nav of mkdocs.yml leaves out"
    generated = {page for page in nav if not (ROOT / "docs" / page).is_file()}
    assert generated == {"reference/api/index.md"}, "nav entries with no page (only the API index is generated)"


def test_api_pages_cover_every_public_module_wherever_it_lives() -> None:
    modules = _hook("api_pages").public_modules(ROOT)
    assert {"dpdist", "dpdist.flows", "dpdist.pipelines", "dpdist.flows.config", "dpdist.privacy.loss"} <= set(modules)
    assert not [m for m in modules if any(part.startswith("_") for part in m.split("."))]
    expected = {
        p
        for p in (ROOT / "dpdist").rglob("*.py")
        if not any(part.startswith("_") for part in p.relative_to(ROOT).parts[:-1])
        and (p.name == "__init__.py" or not p.name.startswith("_"))
    }
    assert expected <= set(modules.values()), sorted(str(p) for p in expected - set(modules.values()))


def test_config_reference_names_every_key() -> None:
    from dpdist.flows import config

    text = _hook("generated_reference").config_reference()
    missing = []
    for section in dataclasses.fields(config.RunConfig):
        kind = section.type if isinstance(section.type, type) else getattr(config, str(section.type), None)
        keys = [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else [section.name]
        for key in keys:
            if key != "source_file" and not re.search(rf"`(?:{section.name}\.)?{key}`", text):
                missing.append(f"{section.name}.{key}")
    assert not missing, f"keys the run-config reference does not describe: {missing}"


def test_cli_reference_lists_every_subcommand() -> None:
    hook = _hook("generated_reference")
    text = hook.cli_reference()
    from dpdist.cli import build_parser

    for words, _, _ in hook.subcommands(build_parser()):
        assert f"## `{' '.join(words)}`" in text
    assert "/dpdist-reader-home" not in text and str(Path.home()) + "/.dpdist" not in text


@pytest.mark.slow
def test_readme_example_runs(tmp_path: Path) -> None:
    """The README's example as a reader runs it: its shell commands, then its Python, on a fresh ledger."""
    text = README.read_text(encoding="utf-8")
    example = text[text.index("## Example") :]
    shell = re.search(r"```bash\n(.*?)```", example, flags=re.S)
    python = re.search(r"```python\n(.*?)```", example, flags=re.S)
    assert shell and python, "README.md's example: a bash block, then a python block"
    bindir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}", "HOME": str(tmp_path)}
    env["DPDIST_LEDGER"] = str(tmp_path / "ledger.sqlite")
    for command in shell.group(1).strip().splitlines():
        done = subprocess.run(command, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, f"{command}\n{done.stderr}"
    done = subprocess.run(
        [sys.executable, "-c", python.group(1)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert "selected:" in done.stdout and "spent epsilon" in done.stdout


@pytest.mark.slow
def test_site_builds_in_strict_mode(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},  # mkdocs-material's banner about MkDocs 2.0
        capture_output=True,
        text=True,
        timeout=600,
    )
    problems = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not problems, "mkdocs build --strict:\n" + "\n".join(
        problems or [done.stderr[-6000:]]
    )
    for page in ["index.html", "getting-started/index.html", "gallery/index.html", "reference/cli/index.html"]:
        assert (site / page).is_file(), page
    for module in _hook("api_pages").public_modules(ROOT):
        assert (site / "reference" / "api" / module / "index.html").is_file(), f"no API page for {module}"
    assert (site / "javascripts" / "mathjax" / "tex-svg.js").is_file()  # formulas render offline
    gallery = (site / "gallery" / "index.html").read_text(encoding="utf-8")
    for figure in (ROOT / "benchmarks" / "results").rglob("*.png"):
        assert figure.name in gallery, f"{figure.name} is not in the gallery"
