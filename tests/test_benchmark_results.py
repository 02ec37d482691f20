"""The committed benchmark results are readable: each results file has a table, names the command
that made it, and its CSVs and figures are there and load. Nothing is rerun (the runs take hours)."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
MARKDOWN = sorted(RESULTS.rglob("*.md"))
CSVS = sorted(RESULTS.rglob("*.csv"))
DATED = re.compile(r"^(\d{4}-\d{2}-\d{2})-")
# the papers' reproductions: each dated results file has the CSV of its run beside it
REPRODUCTIONS = ("screening", "bss", "sis", "fw")
# a line that names the command: "Command: `... benchmarks/x.py ...`" (or "Written by `benchmarks/x.py`")
COMMAND = re.compile(r"^(?:Command|Written by)\b.*?\bbenchmarks/([\w-]+\.py)\b")


def _ids(paths: list[Path]) -> list[str]:
    return [str(p.relative_to(RESULTS)) for p in paths]


def test_there_are_results() -> None:
    assert MARKDOWN and CSVS


@pytest.mark.parametrize("path", MARKDOWN, ids=_ids(MARKDOWN))
def test_results_file_has_a_table(path: Path) -> None:
    lines = path.read_text(encoding="utf-8").splitlines()
    header_rows = [
        i for i, line in enumerate(lines[:-1]) if line.startswith("|") and re.match(r"^\|\s*:?-", lines[i + 1])
    ]
    assert header_rows, f"{path.name}: no markdown table"
    for i in header_rows:  # the separator row has as many cells as the header
        assert lines[i].count("|") - lines[i].count("\\|") == lines[i + 1].count("|"), f"{path.name}: line {i + 1}"


@pytest.mark.parametrize("path", MARKDOWN, ids=_ids(MARKDOWN))
def test_results_file_names_its_command(path: Path) -> None:
    scripts = [m.group(1) for line in path.read_text(encoding="utf-8").splitlines() if (m := COMMAND.match(line))]
    assert scripts, f"{path.name}: no line 'Command: ... benchmarks/<script>.py'"
    for script in scripts:
        assert (ROOT / "benchmarks" / script).is_file(), f"{path.name} names benchmarks/{script}, which is missing"


@pytest.mark.parametrize("path", MARKDOWN, ids=_ids(MARKDOWN))
def test_results_file_has_its_csv_and_figures(path: Path) -> None:
    text = path.read_text(encoding="utf-8")
    for image in re.findall(r"!\[[^\]]*\]\(([^)\s]+\.png)\)", text):
        assert (path.parent / image).is_file(), f"{path.name} shows {image}, which is missing"
    m = DATED.match(path.name)
    if m is None or path.parent.name not in REPRODUCTIONS:
        pytest.skip("not a dated reproduction of a paper")
    beside = list(path.parent.glob(f"{m.group(1)}-*.csv"))
    assert beside, f"{path.name}: no CSV of the same run beside it"


@pytest.mark.parametrize("path", CSVS, ids=_ids(CSVS))
def test_csv_loads(path: Path) -> None:
    with path.open(newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    assert len(rows) >= 2, f"{path.name}: no data rows"
    width = len(rows[0])
    assert width >= 2 and all(len(r) == width for r in rows[1:]), f"{path.name}: ragged rows"


def test_the_default_learner_is_the_newest_utility_benchmarks_winner() -> None:
    """``dpdist train``'s default learner is the one the newest utility results file names as the best
    at epsilon = 1 over its data sets (a default is the best measured one, not a guess)."""
    from dpdist.methods import DEFAULT_LEARNER

    named = [
        (p.name, m.group(1))
        for p in sorted((RESULTS / "utility").glob("*.md"))
        if DATED.match(p.name) and (m := re.search(r"^Default learner: \*\*([\w-]+)\*\*", p.read_text(), re.M))
    ]
    assert named, "no utility results file names its default learner"
    assert DEFAULT_LEARNER == named[-1][1], (
        f"{named[-1][0]} measures {named[-1][1]} best, the registry says {DEFAULT_LEARNER}"
    )
