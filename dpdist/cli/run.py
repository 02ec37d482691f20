"""``dpdist run``: the main job, the end-to-end Prefect flow (dpdist.flows.end_to_end) on a Dask cluster.

Prefect, Dask and the flows are imported only inside the handler, when a run starts: the rest of
the command line works without them.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
from typing import Any

from dpdist.cli._common import EXIT_INTERRUPTED, EXIT_OK, _common_args, _emit
from dpdist.cli.supervise import _RUN_CHILD, _interrupt, _redeliver_swallowed_interrupts, _supervise
from dpdist.utils import run_display

# the run's processes (flow, local workers) print a full disk in one line, not its traceback
_CONSOLE_HANDLER = ("PREFECT_LOGGING_HANDLERS_CONSOLE_CLASS", "dpdist.flows.console.RunConsoleHandler")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The ``run`` command's arguments."""
    p = sub.add_parser("run", help="the main job: the end-to-end Prefect flow on a Dask cluster")
    p.add_argument(
        "config",
        nargs="?",
        default=None,
        help="run config (TOML or YAML; default: the embedded defaults, see flows/defaults.toml)",
    )
    p.add_argument("--output", default=None, help="output directory (overrides the config's)")
    p.add_argument("--seed", type=int, default=None, help="reproducible noise (experiments only)")
    p.add_argument(
        "--plan",
        action="store_true",
        help="print every release the run would make, its cost and whether the budget holds it; run nothing",
    )
    _common_args(p)
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    """The main job: the end-to-end Prefect flow (dpdist.flows.end_to_end) on the config's cluster.

    The config is read and the privacy plan checked against the ledger before Prefect is even
    imported: a bad config exits 2 and a plan the budget cannot hold exits 3 at once.
    """
    os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
    os.environ.setdefault(*_CONSOLE_HANDLER)
    from dpdist.flows.config import load_config
    from dpdist.flows.plan import preflight
    from dpdist.flows.results import check_output

    overrides: dict[str, Any] = {}
    if args.ledger:
        overrides["ledger"] = args.ledger
    if args.output:
        overrides["output"] = args.output
    if args.seed is not None:
        overrides["seed"] = args.seed
    cfg = load_config(args.config, overrides)  # bad config: exit 2 before anything starts
    args.run_output = cfg.output  # for main's line on a full disk
    if os.environ.get(_RUN_CHILD) != "1":
        if not args.plan:
            check_output(cfg)  # results that could not be written: exit 2 before anything starts
        checked = preflight(cfg)  # no budget (exit 2) or not enough (exit 3): before any work
        if args.plan:
            _emit(args, {"plan": checked}, lambda: _format_plan(checked))
            return EXIT_OK
        print(
            f"dpdist run: {cfg.name} ({cfg.source_file}): data {cfg.data.source}, cluster {cfg.cluster.kind}, "
            f"output {cfg.output}; plan: {len(checked['releases'])} releases"
            + (f" ({checked['replayed']} replayed from the ledger)" if checked.get("replayed") else "")
            + (
                ", nothing new to charge"
                if _nothing_new(checked)
                else f", epsilon {checked['epsilon_after']:.4g} of {checked['epsilon_total']:g} after it"
            ),
            file=sys.stderr,
            flush=True,
        )
        if sys.stderr.isatty() and not args.json:  # the child's stderr is a pipe copied to this terminal
            os.environ[run_display.ENV] = str(shutil.get_terminal_size().columns)
        else:  # an inherited setting must not draw into a redirected stderr or beside --json
            os.environ.pop(run_display.ENV, None)
        return _supervise(args.argv, cfg.output)
    signal.signal(signal.SIGTERM, _interrupt)
    _redeliver_swallowed_interrupts()
    from dpdist.flows.end_to_end import end_to_end
    from dpdist.flows.runtime import prefect_api

    try:
        with prefect_api() as api:
            print(f"Prefect API: {api}", file=sys.stderr, flush=True)
            summary = end_to_end(args.config, overrides)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED

    def human() -> str:
        lines = [f"flow run {summary['flow_run']}, dataset {summary['dataset']}"]
        lines += [f"  {s['step']:<9} {len(s.get('releases', []))} release(s)" for s in summary["steps"]]
        lines.append(f"report: {summary['report']} (and {summary['html']}: one page, plots embedded)")
        return "\n".join(lines)

    _emit(args, summary, human)
    return EXIT_OK


def _nothing_new(p: dict[str, Any]) -> bool:
    """Whether a plan (``dpdist.flows.plan.preflight``) only replays releases the ledger holds."""
    return p.get("replayed") == len(p["releases"])


def _format_plan(p: dict[str, Any]) -> str:
    """A run's plan in words: one line a release, then its total and the budget it was checked against."""
    lines = [
        f"  {r['step']:<9} {r['method']:<28} {r['mechanism']:<30} eps={r['epsilon']:<8.4g} "
        f"delta={r['delta']:<8.3g} {r['loss']}"
        for r in p["releases"]
    ]
    lines.append(
        f"{len(p['releases'])} releases; basic composition epsilon={p['epsilon_basic']:.4g}, "
        f"delta={p['delta_basic']:.3g}; "
        + (f"{p['replayed']} already in the ledger (replayed, no charge); " if p.get("replayed") else "")
        + f"checked against the {p['checked_against']} "
        f"(epsilon={p['epsilon_total']:g}, delta={p['delta_total']:g}): "
        + (
            "nothing new to charge"
            if _nothing_new(p)
            else f"spend after the run epsilon={p['epsilon_after']:.4g} (the budget's privacy filter) -- it fits"
        )
    )
    return "\n".join(lines)
