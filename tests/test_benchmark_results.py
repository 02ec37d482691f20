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


# --- the tables beside their papers (issue 54) -------------------------------------------------------

BENCHMARKS = ROOT / "benchmarks"
# a figure quoted with decimals (0.824, 172.3x, 2.32 s) or a count of a total ("16 of 24", "16/24")
QUOTED = re.compile(r"(?<![\d.])(\d+(?:,\d{3})*\.\d+|\d+ of \d+(?:,\d{3})*|\d+/\d+)(?!\d)")
TOKEN = re.compile(r"(?<![\d.])-?\d+(?:\.\d+)?(?:e-?\d+)?")


def _plain(text: str) -> str:
    return re.sub(r"(?<=\d),(?=\d{3})", "", text)


def _found(quoted: str, corpus: str, values: list[float]) -> bool:
    q = _plain(quoted)
    if re.search(r"(?<![\d.])" + re.escape(q) + r"(?!\d)", corpus):
        return True
    if "." not in q or " of " in q or "/" in q:
        return False
    digits = len(q.split(".")[1])  # a CSV's full-precision value that rounds to the quoted one
    target = float(q)
    return any(abs(v - target) <= 0.5 * 10**-digits + 1e-12 for v in values)


def _readme_rows() -> list[tuple[str, str, list[Path]]]:
    """(script, latest figure, the results files it links) of each benchmarks/README.md table row."""
    rows = []
    for line in (BENCHMARKS / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        links = [BENCHMARKS / p for p in re.findall(r"\]\(([^)\s]+)\)", cells[3])]
        rows.append((cells[0], cells[2], links))
    return rows


README_ROWS = _readme_rows()


def test_the_benchmarks_readme_has_rows() -> None:
    assert len(README_ROWS) >= 20


@pytest.mark.parametrize("script,figure,links", README_ROWS, ids=[f"{i}-{r[0]}" for i, r in enumerate(README_ROWS)])
def test_every_figure_the_readme_quotes_is_in_its_results_files(script: str, figure: str, links: list[Path]) -> None:
    """Each decimal figure or "k of n" count in a row's 'latest figure' is in the results files that row links
    (their text, or a value in their CSVs that rounds to it): no number in the README without a file behind it."""
    files = [p for p in links if p.suffix == ".md"]
    assert files and all(p.is_file() for p in files), f"{script}: links {links}"
    corpus, values = "", []
    for md in files:
        corpus += _plain(md.read_text(encoding="utf-8")) + "\n"
        for csv_path in md.parent.glob(md.stem + "*.csv"):
            text = _plain(csv_path.read_text(encoding="utf-8"))
            corpus += text + "\n"
    values = [float(t) for t in TOKEN.findall(corpus)]
    missing = [q for q in QUOTED.findall(figure) if not _found(q, corpus, values)]
    assert not missing, f"{script}: {missing} are in benchmarks/README.md but not in {[p.name for p in files]}"


def test_the_readme_quote_check_catches_a_figure_with_no_file() -> None:
    corpus = "speed-up 156.54 / 295.45; better at 16 of 24 points"
    values = [float(t) for t in TOKEN.findall(corpus)]
    assert _found("156.5", corpus, values) and _found("16 of 24", corpus, values)
    assert not _found("172.3", corpus, values) and not _found("17 of 24", corpus, values)


DOC_PAGES = sorted((ROOT / "docs").rglob("*.md"))


def test_docs_quote_no_results_figure_without_a_file() -> None:
    """The documentation pages quote results only through links to committed results files: each speed-up
    ('123.4x') or accuracy figure they print is in a file under benchmarks/results/."""
    corpus = "\n".join(_plain(p.read_text(encoding="utf-8", errors="replace")) for p in MARKDOWN + CSVS)
    missing = []
    for page in DOC_PAGES:
        for q in re.findall(r"(?<![\d.])(\d+(?:\.\d+)?)x\b", _plain(page.read_text(encoding="utf-8"))):
            if q not in corpus:
                missing.append(f"{page.relative_to(ROOT)}: {q}x")
    assert not missing, missing


def _sentences_citing_results(text: str) -> list[tuple[str, list[str]]]:
    """(sentence, the results files it cites) of each sentence of ``text`` naming a benchmarks/results file."""
    out = []
    for sentence in re.split(r"(?<=[.:;])\s+(?=[A-Z(`*])|\n\n", _plain(text)):
        paths = re.findall(r"benchmarks/results/[\w./-]+\.md", sentence)
        if paths:
            out.append((sentence, paths))
    return out


def test_every_figure_a_docs_sentence_cites_is_in_that_results_file() -> None:
    """A documentation sentence that names a results file quotes only figures that file (or its CSVs) holds;
    a projection from them goes in a sentence of its own."""
    missing = []
    for page in DOC_PAGES:
        for sentence, paths in _sentences_citing_results(page.read_text(encoding="utf-8")):
            files = [ROOT / p for p in paths]
            assert all(f.is_file() for f in files), f"{page.relative_to(ROOT)} cites a missing file: {paths}"
            corpus = ""
            for f in files:
                corpus += _plain(f.read_text(encoding="utf-8")) + "\n"
                corpus += "\n".join(_plain(c.read_text(encoding="utf-8")) for c in f.parent.glob(f.stem + "*.csv"))
            values = [float(t) for t in TOKEN.findall(corpus)]
            missing += [
                f"{page.relative_to(ROOT)}: {q}"
                for q in re.findall(r"(?<![\d.])(\d+\.\d+)(?!\d)", sentence)
                if not _found(q, corpus, values)
            ]
    assert not missing, missing


def test_every_results_file_has_its_generated_intervals_section() -> None:
    """Each results file carries the section benchmarks/side_by_side.py renders from its CSVs (95% intervals,
    trial counts beside the paper's, seeds, flagged settings), and it is what the script renders now: no
    number in it was typed by hand."""
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    try:
        import side_by_side
        from result_tables import section_of
    finally:
        sys.path.remove(str(BENCHMARKS))
    stale = [
        str(md.relative_to(RESULTS))
        for md in side_by_side.files()
        if section_of(md) != "\n".join(side_by_side.render(md)).strip("\n")
    ]
    assert not stale, f"run .venv/bin/python benchmarks/side_by_side.py: {stale}"


def test_interval_and_sign_test_helpers() -> None:
    import sys

    sys.path.insert(0, str(BENCHMARKS))
    try:
        from result_tables import interval, sign_test, wilson
    finally:
        sys.path.remove(str(BENCHMARKS))
    mean, lo, hi, n = interval([1.0, 2.0, 3.0])
    assert (mean, n) == (2.0, 3) and lo == pytest.approx(2 - 4.302653 / 3**0.5 * 1.0, rel=1e-5)
    assert hi - mean == pytest.approx(mean - lo)
    p, lo, hi = wilson(0, 10)
    assert p == 0 and lo == 0 and 0.25 < hi < 0.35
    assert sign_test([2, 2, 2, 2, 2], [1, 1, 1, 1, 1]) == pytest.approx(1 / 32)
    assert sign_test([1, 1, 1, 1, 1], [2, 2, 2, 2, 2]) == 1.0
    assert sign_test([1, 1], [1, 1]) == 1.0
