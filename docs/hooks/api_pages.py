"""MkDocs hook: one API reference page per public module of dpdist, found at build time.

The modules are read from the source tree, not from a list kept in the docs, so a module that
is added, moved or split (``dpdist/cli.py`` into ``dpdist/cli/``, say) is documented at its new
place without editing the docs. Public means: no part of the dotted name starts with ``_``.
``dpdist.flows`` and ``dpdist.pipelines`` live in their own folders (``[tool.setuptools.package-dir]``
in pyproject.toml); they are walked there, and ``griffe_package_dir.py`` shows griffe the same map.

Each page holds one ``::: module`` block that mkdocstrings renders from the numpydoc docstrings;
``reference/api/index.md`` lists every module with its docstring's first line, and the nav's
``API`` entry is expanded into one section per subpackage.
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files

ROOT_PACKAGE = "dpdist"
API_DIR = "reference/api"
API_INDEX = f"{API_DIR}/index.md"


def package_dirs(repo: Path) -> dict[str, Path]:
    """Map each top package name to its folder: ``dpdist`` and the package-dir entries of pyproject."""
    dirs = {ROOT_PACKAGE: repo / ROOT_PACKAGE}
    pyproject = tomllib.loads((repo / "pyproject.toml").read_text(encoding="utf-8"))
    mapped = pyproject.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    for name, folder in mapped.items():
        if name.startswith(f"{ROOT_PACKAGE}.") and folder:
            dirs[name] = repo / folder
    return dirs


def _walk(name: str, folder: Path, found: dict[str, Path]) -> None:
    found[name] = folder / "__init__.py"
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith(("_", ".")):
            continue
        if entry.is_dir() and (entry / "__init__.py").is_file():
            _walk(f"{name}.{entry.name}", entry, found)
        elif entry.suffix == ".py" and entry.stem.isidentifier():
            found[f"{name}.{entry.stem}"] = entry


def public_modules(repo: Path) -> dict[str, Path]:
    """Every public module and package of dpdist, by dotted name, with the file that holds it."""
    found: dict[str, Path] = {}
    for name, folder in package_dirs(repo).items():
        if not (folder / "__init__.py").is_file():
            raise FileNotFoundError(f"package {name}: no {folder / '__init__.py'}")
        _walk(name, folder, found)
    return dict(sorted(found.items()))


def summary(path: Path) -> str:
    """The first line of a module's docstring (read without importing it)."""
    doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
    return doc.strip().splitlines()[0] if doc else ""


def page_uri(module: str) -> str:
    return f"{API_DIR}/{module}.md"


def api_nav(modules: dict[str, Path]) -> list[Any]:
    """The API section of the nav: the index, then one section per subpackage of dpdist.

    A module directly under ``dpdist`` goes to the ``dpdist`` section; anything inside a
    subpackage (``dpdist.data``, ``dpdist.flows``, ...) to that subpackage's section, whose
    first page is the subpackage's own.
    """
    groups: dict[str, list[Any]] = {}
    for module, path in modules.items():
        parts = module.split(".")
        top = ".".join(parts[:2])
        in_subpackage = len(parts) > 2 or (len(parts) == 2 and path.name == "__init__.py")
        group = top if in_subpackage else ROOT_PACKAGE
        if module == group:  # titled by its name: mkdocs cannot read the heading mkdocstrings renders
            groups.setdefault(group, []).append({module: page_uri(module)})
        else:
            title = module[len(group) + 1 :] if group != ROOT_PACKAGE else module
            groups.setdefault(group, []).append({title: page_uri(module)})
    return [API_INDEX, *({group: entries} for group, entries in groups.items())]


def _expand(items: list[Any], modules: dict[str, Path]) -> bool:
    for i, item in enumerate(items):
        if isinstance(item, dict):
            for title, value in item.items():
                if value == API_INDEX:
                    items[i] = {title: api_nav(modules)}
                    return True
                if isinstance(value, list) and _expand(value, modules):
                    return True
    return False


def index_page(modules: dict[str, Path]) -> str:
    lines = [
        "# API reference",
        "",
        "Generated from the numpydoc docstrings of every public module (a module whose dotted name has",
        "no part starting with `_`), found in the source tree when the site is built.",
        "`dpdist` works on its own; `dpdist.pipelines` (Dask graphs) and `dpdist.flows` (Prefect flows)",
        "build on it.",
        "",
        "| module | what it holds |",
        "| --- | --- |",
    ]
    for module, path in modules.items():
        text = summary(path).replace("|", "\\|")
        lines.append(f"| [`{module}`]({module}.md) | {text} |")
    return "\n".join(lines) + "\n"


def module_page(module: str, modules: dict[str, Path]) -> str:
    lines = [f"::: {module}", ""]
    children = [m for m in modules if m.rpartition(".")[0] == module]
    if children:
        lines += ["## Modules", "", "| module | what it holds |", "| --- | --- |"]
        for child in children:
            text = summary(modules[child]).replace("|", "\\|")
            lines.append(f"| [`{child}`]({child}.md) | {text} |")
    return "\n".join(lines) + "\n"


_MODULES: dict[str, Path] = {}


def on_config(config: MkDocsConfig) -> MkDocsConfig:
    repo = Path(config.config_file_path).resolve().parent
    _MODULES.clear()
    _MODULES.update(public_modules(repo))
    if not config.nav or not _expand(config.nav, _MODULES):
        raise ValueError(f"mkdocs.yml: the nav has no entry for {API_INDEX}")
    return config


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    files.append(File.generated(config, API_INDEX, content=index_page(_MODULES)))
    for module in _MODULES:
        files.append(File.generated(config, page_uri(module), content=module_page(module, _MODULES)))
    return files
