"""MkDocs hook: the command-line and run-config references, generated from the code at build time.

``docs/reference/cli.md`` and ``docs/reference/config.md`` hold the prose around a marker line;
the marker is replaced when the site is built:

- ``<!-- dpdist:cli-reference -->`` by every subcommand of ``dpdist.cli.build_parser()``: its
  help line, usage and a table of its arguments (flags, what they do, their default);
- ``<!-- dpdist:config-reference -->`` by ``dpdist.flows.config.config_reference()``, the
  Markdown reference of every run-config section and key.

So the pages cannot drift from the parser and the config schema. A missing function or marker
fails the build: there is no fallback text.
"""

from __future__ import annotations

import argparse
import contextlib
import os
from collections.abc import Iterator
from typing import Any

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

CLI_MARKER = "<!-- dpdist:cli-reference -->"
CONFIG_MARKER = "<!-- dpdist:config-reference -->"
HELP_WIDTH = "100"  # argparse wraps usage lines at $COLUMNS
READER_HOME = "/dpdist-reader-home"  # $HOME while the parser is built; shown as ~


def subcommands(
    parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ("dpdist",)
) -> Iterator[tuple[tuple[str, ...], str, argparse.ArgumentParser]]:
    """Each subcommand (nested ones too) as (its words, its one-line help, its parser), depth first."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
            for name, sub in action.choices.items():
                words = (*prefix, name)
                yield words, helps.get(name, ""), sub
                yield from subcommands(sub, words)


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _argument_rows(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    rows = []
    for action in parser._actions:
        if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if action.help == argparse.SUPPRESS:
            continue
        invocation = formatter._format_action_invocation(action)
        text = formatter._expand_help(action) if action.help else ""
        default = action.default
        shown = "" if default in (None, False, argparse.SUPPRESS) or action.required else f"`{default}`"
        rows.append(f"| `{_cell(invocation)}` | {_cell(text)} | {shown} |")
    return rows


@contextlib.contextmanager
def reader_environment() -> Iterator[None]:
    """The environment the parser's help is written for, whoever builds the site.

    argparse wraps usage lines at ``$COLUMNS``, and the ledger's default names ``$DPDIST_LEDGER`` or
    the builder's home: fixed here (a width of 100, no ``$DPDIST_LEDGER``, a stand-in home that
    ``cli_reference`` writes as ``~``), so the page shows ``~/.dpdist/ledger.sqlite``, not a path of
    the machine that built it.
    """
    fixed = {"COLUMNS": HELP_WIDTH, "HOME": READER_HOME, "DPDIST_LEDGER": None}
    previous = {name: os.environ.get(name) for name in fixed}
    try:
        _set_environment(fixed)
        yield
    finally:
        _set_environment(previous)


def _set_environment(values: dict[str, str | None]) -> None:
    """Set each named environment variable to its value; unset those whose value is None."""
    for name, value in values.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def cli_reference() -> str:
    """Markdown for every subcommand of ``dpdist``: help line, usage, arguments."""
    from dpdist.cli import build_parser

    with reader_environment():
        parser = build_parser()
        lines = ["## `dpdist`", "", _cell(parser.description or ""), "", "```text", parser.format_usage().strip()]
        lines += ["```", ""]
        for words, help_line, sub in subcommands(parser):
            command = " ".join(words)
            lines += [f"## `{command}`", "", _cell(help_line), ""]
            if sub.description:
                lines += [sub.description.strip(), ""]
            lines += ["```text", sub.format_usage().strip(), "```", ""]
            rows = _argument_rows(sub)
            if rows:
                lines += ["| argument | meaning | default |", "| --- | --- | --- |", *rows, ""]
            if sub.epilog:
                lines += [sub.epilog.strip(), ""]
    return "\n".join(lines).replace(f"{READER_HOME}/", "~/")


def config_reference() -> str:
    """The run-config reference from ``dpdist.flows.config.config_reference()`` (Markdown)."""
    from dpdist.flows.config import config_reference as reference

    text = reference()
    if not isinstance(text, str):
        raise TypeError(f"dpdist.flows.config.config_reference() returned {type(text).__name__}, not Markdown text")
    return text


GENERATORS = {"reference/cli.md": (CLI_MARKER, cli_reference), "reference/config.md": (CONFIG_MARKER, config_reference)}


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files, **kwargs: Any) -> str:
    entry = GENERATORS.get(page.file.src_uri)
    if entry is None:
        return markdown
    marker, generate = entry
    if markdown.count(marker) != 1:
        raise ValueError(f"docs/{page.file.src_uri} must hold the line {marker} exactly once")
    return markdown.replace(marker, generate())
