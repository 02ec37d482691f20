"""Griffe extension: show griffe the subpackages that pyproject.toml maps to other folders.

``dpdist.flows`` and ``dpdist.pipelines`` are installed from ``flows/`` and ``pipelines/``
(``[tool.setuptools.package-dir]``), not from folders inside ``dpdist/``, so griffe, which
reads ``dpdist`` from its folder, would not find them. When griffe has visited a package whose
subpackage is mapped elsewhere, this loads that folder as a package of its own and attaches it
under its installed name, so ``::: dpdist.flows.config`` resolves like any other module.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import griffe


class PackageDirExtension(griffe.Extension):
    """Attach the folders of ``[tool.setuptools.package-dir]`` under their package names."""

    def __init__(self, pyproject: str = "pyproject.toml") -> None:
        super().__init__()
        path = Path(pyproject).resolve()
        table = tomllib.loads(path.read_text(encoding="utf-8"))
        mapped = table.get("tool", {}).get("setuptools", {}).get("package-dir", {})
        self.mapped = {name: path.parent / folder for name, folder in mapped.items() if "." in name and folder}

    def on_module_members(self, *, node: Any, mod: griffe.Module, agent: Any, **kwargs: Any) -> None:
        """Once a package's own members are read, load and attach its subpackages mapped elsewhere."""
        for name, folder in self.mapped.items():
            parent, _, child = name.rpartition(".")
            if parent != mod.path or child in mod.members:
                continue
            loader = griffe.GriffeLoader(
                extensions=agent.extensions,
                search_paths=[folder.parent],
                docstring_parser=agent.docstring_parser,
                docstring_options=agent.docstring_options,
                lines_collection=agent.lines_collection,
            )
            sub = loader.load(folder.name)
            if not isinstance(sub, griffe.Module):
                raise TypeError(f"{folder} did not load as a package")
            sub.name = child
            mod.set_member(child, sub)
