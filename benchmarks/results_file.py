"""What every committed reproduction under ``benchmarks/results/<topic>/`` states about its run.

A results file names the command that made it (a line starting ``Command:``), the machine (cores,
RAM) and its load, and the trial counts; its files carry the run's date so a later run sits beside
an earlier one instead of replacing it. Orderings the papers claim are tested with Welch's t-test.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"


def topic_dir(topic: str) -> Path:
    """``benchmarks/results/<topic>``, created."""
    out = RESULTS / topic
    out.mkdir(parents=True, exist_ok=True)
    return out


def today() -> str:
    """The run's date (UTC), the prefix of its files."""
    return _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d")


def command() -> str:
    """The command line that is running, relative to the repository root."""
    script = Path(sys.argv[0]).resolve()
    try:
        shown = str(script.relative_to(RESULTS.parents[1]))
    except ValueError:
        shown = sys.argv[0]
    return " ".join([".venv/bin/python", shown, *map(shlex.quote, sys.argv[1:])])


def _ram_gib() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) / 2**20
    except OSError:
        pass
    return math.nan


def machine() -> str:
    """Cores, RAM and the 1/5/15-minute load averages now."""
    load = " / ".join(f"{v:.2f}" for v in os.getloadavg())
    return f"{os.cpu_count()} cores, {_ram_gib():.0f} GiB RAM, load average {load} (1/5/15 min)"


def header(title: str, trials: str, started_load: float | None = None) -> list[str]:
    """The lines that open a results file: title, command, machine, trial counts."""
    lines = [
        f"# {title}",
        "",
        f"Command: `{command()}`",
        "",
        f"Run: {today()} (UTC); machine: {machine()} at the end of the run"
        + (f", {started_load:.2f} at its start" if started_load is not None else "")
        + f". The experiments ran at niceness {os.nice(0)} beside other work on the same cores.",
        "",
        f"Trials: {trials}",
        "",
    ]
    return lines


def write_md(path: Path, lines: Sequence[str]) -> None:
    """Write the results file ``path``: ``lines``, each ended by a newline (UTF-8); then say where."""
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {path}")


def write_one_table(
    stem: Path, lines: Sequence[str], columns: Sequence[str], rows: Sequence[Sequence[object]], after: Sequence[str]
) -> None:
    """Write a results file whose data is one table: ``<stem>.md`` holds ``lines`` (its header and claim), the
    table of ``rows`` under ``columns``, a blank line and ``after`` (the verdict); ``<stem>.csv`` the table's
    cells."""
    write_md(stem.with_suffix(".md"), [*lines, *table(columns, rows, stem.with_suffix(".csv")), "", *after])


def welch(a, b, alternative: str = "greater") -> float:
    """One-sided Welch p-value of ``mean(a) > mean(b)`` (``alternative="greater"``) or ``<`` ("less").

    Two constant samples give 0 when the ordering holds strictly and 1 otherwise (the t statistic is
    undefined there).
    """
    from scipy import stats

    x, y = np.asarray(a, float), np.asarray(b, float)
    x, y = x[np.isfinite(x)], y[np.isfinite(y)]
    if x.size < 2 or y.size < 2:
        return math.nan
    if np.std(x) == 0 and np.std(y) == 0:
        better = x.mean() > y.mean() if alternative == "greater" else x.mean() < y.mean()
        return 0.0 if better else 1.0
    return float(stats.ttest_ind(x, y, equal_var=False, alternative=alternative).pvalue)


def verdict(p: float, level: float = 0.05) -> str:
    """``holds`` when the one-sided test is significant at ``level``, else ``does not hold``."""
    if p != p:
        return "not tested (fewer than 2 trials)"
    return "holds" if p < level else "does not hold"


def table(columns: Sequence[str], rows: Sequence[Sequence[object]], csv_path: Path | None = None) -> list[str]:
    """The markdown lines of a table of ``rows`` under ``columns``; with ``csv_path``, the same cells as a CSV."""
    if csv_path is not None:
        import csv

        with open(csv_path, "w", newline="", encoding="utf-8") as f:
            w = csv.writer(f)
            w.writerow(columns)
            w.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    return lines + ["| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |" for r in rows]
