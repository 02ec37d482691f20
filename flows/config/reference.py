"""The Markdown reference of every run-config key, generated from the schema (the one source).

Each key's type is its annotation in :mod:`dpdist.flows.config.schema`, its meaning the field's
``help`` (a method parameter's comes from the registry, :mod:`dpdist.methods`), and its default
the main job's (``flows/defaults.toml``), else the field's own. The docs site renders it
(``docs/hooks/generated_reference.py``); ``dpdist.flows.config`` exports it.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from dpdist.flows.config.load import TOP_LEVEL, _defaults
from dpdist.flows.config.schema import RunConfig
from dpdist.methods import get, names

__all__ = ["config_reference"]

# each top-level key's section dataclass, or None for a plain key (name, output, ledger, seed)
SECTIONS = {
    name: kind if dataclasses.is_dataclass(kind) else None
    for name, kind in typing.get_type_hints(RunConfig).items()
    if name in TOP_LEVEL
}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|").replace("<", "&lt;")  # a table cell: no tags


def _value(v: Any) -> str:
    """A default as it would be written in TOML (a list for a tuple, none for None)."""
    if v is None or v == ():
        return ""
    if isinstance(v, bool):
        return f"`{str(v).lower()}`"
    if isinstance(v, str):
        return f'`"{v}"`'
    if isinstance(v, (list, tuple)):
        return f"`[{', '.join(_value(x).strip('`') for x in v)}]`"
    return f"`{v!r}`"


def _row(f: dataclasses.Field[Any], default: Any) -> str:
    help = f.metadata.get("help", "")
    return f"| `{f.name}` | `{_cell(str(f.type))}` | {_value(default)} | {_cell(help)} |"


def config_reference() -> str:
    """Markdown: the top-level keys, then each section (``[data]``, ``[budget]``, ...) with every key's
    type, default (the main job's: ``flows/defaults.toml``, else the schema's) and meaning."""
    main = _defaults()
    head = ["| key | type | default | meaning |", "| --- | --- | --- | --- |"]
    lines = ["## Top level", "", *head]
    for f in dataclasses.fields(RunConfig):
        if f.name in TOP_LEVEL and SECTIONS[f.name] is None:
            default = f.default if f.default is not dataclasses.MISSING else None
            lines.append(_row(f, main.get(f.name, default)))
    lines.append("")
    for name in TOP_LEVEL:
        cls = SECTIONS[name]
        if cls is None:
            continue
        given = main.get(name, {})
        lines += [f"## `[{name}]`", "", _cell(cls.__doc__ or ""), "", *head]
        for f in dataclasses.fields(cls):
            default = f.default if f.default is not dataclasses.MISSING else None
            lines.append(_row(f, given.get(f.name, default)))
        lines.append("")
    return "\n".join(lines + _methods())


def _methods() -> list[str]:
    """The registry's methods the run config accepts: what each releases and the keys it takes."""
    lines = [
        "## Methods",
        "",
        "The names `select.methods` and `train.methods` accept (the method registry, `dpdist.methods`).",
        "",
        "| method | kind | what it releases | its keys |",
        "| --- | --- | --- | --- |",
    ]
    for name in names(front_end="run"):
        m = get(name)
        section = "select" if m.kind in ("selection", "best-subset") else "train"
        keys = ", ".join(f"`{section}.{p.name}`" for p in m.params)
        lines.append(f"| `{name}` | {m.kind} | {_cell(m.summary)} | {keys} |")
    return [*lines, ""]
