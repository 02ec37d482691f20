"""The ``dpdist`` command line: one module per command, each with its arguments and its handler.

Exit codes: 0 success; 2 bad arguments or input; 3 privacy budget refused; 130 interrupted
(Ctrl-C or SIGTERM); 1 anything else.
With ``--json`` exactly one JSON object is printed on stdout; messages go to stderr.

Building the parser imports no Prefect, Dask or flows: ``dpdist run`` imports them when a run starts.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from dpdist.cli import budget, evaluate, ingest, ledger, models, predict, run, select, synth, train
from dpdist.cli._common import EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_ERROR, EXIT_INTERRUPTED, EXIT_OK, _prepared_out
from dpdist.cli._logs import _logging, _one_line_warning
from dpdist.exceptions import (
    SPACE_ERRNOS,
    BudgetExceeded,
    DPDistError,
    ParameterError,
    PlanExceeded,
    ReleaseKeyConflict,
    UnknownDataset,
    file_failure,
)
from dpdist.utils import operator_log

__all__ = [
    "EXIT_BAD_INPUT",
    "EXIT_BUDGET",
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "build_parser",
    "main",
]

# the commands, in the order ``dpdist --help`` lists them
COMMANDS = (ingest, synth, select, train, evaluate, predict, budget, models, run, ledger)


def _version() -> str:
    """The installed distribution's version (``dpdist --version``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dpdist")
    except PackageNotFoundError:  # a source tree that was never installed
        return "unknown (not installed)"


class _Version(argparse.Action):
    """``--version``: the version read from the installed metadata when asked (importlib.metadata is 30 ms
    of every command's start-up otherwise)."""

    def __call__(self, parser: argparse.ArgumentParser, *args: object, **kwargs: object) -> None:
        sys.stdout.write(f"{parser.prog} {_version()}\n")
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The ``dpdist`` parser: every command's subparser, each set to call its handler (``args.func``)."""
    parser = argparse.ArgumentParser(
        prog="dpdist", description="Differentially private sparse regression and selection."
    )
    parser.add_argument("--version", action=_Version, nargs=0, help="show the installed version and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.add_parser(sub)
    _show_defaults(parser)
    return parser


class _Defaults(argparse.HelpFormatter):
    """Help that states each option's default, unless its text already says it (or it has none)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            not action.option_strings
            or default in (None, False, argparse.SUPPRESS)
            or action.nargs == 0
            or "default" in text.lower()
        ):
            return action.help
        shown = (",".join(map(str, default)) if isinstance(default, (list, tuple)) else str(default)).replace("%", "%%")
        return f"{text} (default: {shown})" if text else f"default: {shown}"


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every parser and subparser's help states the options' defaults (``_Defaults``)."""
    parser.formatter_class = _Defaults
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                _show_defaults(child)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``dpdist`` command; its exit code (the errors the library raises mapped to 1, 2, 3 or 130)."""
    parser = build_parser()
    args = parser.parse_args(argv)  # exits 2 on bad arguments
    args.argv = list(sys.argv[1:] if argv is None else argv)
    _logging(args.verbose)
    if not args.verbose:
        import warnings

        warnings.formatwarning = _one_line_warning
    if args.verbose:  # timings of private work on this terminal (and its children's), when the operator asks
        os.environ[operator_log.ON_ENV] = "1"
    try:
        with _prepared_out(args):  # an output that cannot be written: refused before anything is read or charged
            return int(args.func(args))
    except KeyboardInterrupt:
        print("dpdist: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except (BudgetExceeded, PlanExceeded) as e:
        print(f"dpdist: {e}", file=sys.stderr)
        return EXIT_BUDGET
    except (ParameterError, UnknownDataset, ReleaseKeyConflict) as e:
        print(f"dpdist: error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except DPDistError as e:
        print(f"dpdist: error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except OSError as e:  # a full disk, a read-only or forbidden path: one line; any other OSError is a bug's
        line = file_failure(e)
        if line is None:
            raise
        if e.errno in SPACE_ERRNOS and getattr(args, "out", None):  # (the file that ran out is not named)
            line += f" (writing {args.out})"  # the one file or store the command writes
        elif e.errno in SPACE_ERRNOS and getattr(args, "run_output", None):
            line += f" (the run's output: {args.run_output})"  # one of the places a run writes
        print(f"dpdist: error: {line}", file=sys.stderr)
        return EXIT_ERROR
