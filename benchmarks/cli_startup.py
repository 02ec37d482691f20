"""How long ``dpdist --help`` and ``dpdist budget show`` take, whole process, against a baseline dpdist.

Each command runs ``--runs`` times after a warm-up, this checkout's and the baseline's in turn (A B A B: a
drift of the machine's speed moves both), and the median wall and CPU seconds are written as a markdown
table to ``benchmarks/results/cli/<date>-cli_startup.md`` (and printed), with the largest imports of
``dpdist --help`` (``python -X importtime``) and the claim's verdict. The ledger is a temporary one
holding one budget (``budget show`` reads it). Bytecode is written (the warm-up writes it, as pip does at
install).

    python benchmarks/cli_startup.py --baseline /path/to/other/.venv/bin/dpdist [--runs 15]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from results_file import header, table, today, topic_dir, write_md  # noqa: E402

HERE = Path(sys.executable).parent / "dpdist"
COMMANDS = (["--help"], ["budget", "show"])
LIMIT = 0.5  # seconds: issue 56's claim


def _run(exe: str, args: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall, cpu) seconds of one run of ``exe args``, its children's accounting."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run([exe, *args], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _imports(exe: str, env: dict[str, str], top: int = 6) -> list[tuple[str, float]]:
    """The ``top`` largest cumulative import times (s) of ``exe --help``."""
    python = Path(exe).parent / "python"
    out = subprocess.run(
        [str(python), "-X", "importtime", exe, "--help"], env=env, capture_output=True, text=True, check=True
    )
    rows = []
    for line in out.stderr.splitlines():
        parts = line.split("|")
        if line.startswith("import time:") and parts[1].strip().isdigit():
            rows.append((parts[2].strip(), int(parts[1]) / 1e6))
    return sorted(rows, key=lambda r: -r[1])[:top]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="another dpdist executable (main's, before a change)")
    parser.add_argument("--runs", type=int, default=15)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        # bytecode written (pip writes it at install; PYTHONDONTWRITEBYTECODE would compile every module at every run)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env["DPDIST_LEDGER"] = str(Path(tmp) / "ledger.sqlite")
        store = [str(HERE), "synth", "raj", "--n", "50", "--d", "100", "--seed", "1", "--out", f"{tmp}/s"]
        subprocess.run(store, env=env, check=True, capture_output=True)
        subprocess.run(
            [str(HERE), "budget", "init", f"{tmp}/s", "--epsilon", "1", "--delta", "1e-6"],
            env=env,
            check=True,
            capture_output=True,
        )
        rows = []
        for command in COMMANDS:
            times: dict[str, list[tuple[float, float]]] = {"this checkout": [], "baseline": []}
            for exe in (str(HERE), args.baseline):  # warm-up
                _run(exe, command, env)
            for _ in range(args.runs):
                times["this checkout"].append(_run(str(HERE), command, env))
                times["baseline"].append(_run(args.baseline, command, env))
            for who, runs in times.items():
                wall = statistics.median(r[0] for r in runs)
                cpu = statistics.median(r[1] for r in runs)
                rows.append([f"dpdist {' '.join(command)}", who, f"{wall:.3f}", f"{cpu:.3f}", len(runs)])
        imports = [
            [who, module, f"{seconds:.3f}"]
            for who, exe in (("this checkout", str(HERE)), ("baseline", args.baseline))
            for module, seconds in _imports(exe, env)
        ]
    ours = [float(r[2]) for r in rows if r[1] == "this checkout"]
    met = "met" if max(ours) < LIMIT else "not met"
    lines = [
        *header("The command line's start-up: `dpdist --help` and `dpdist budget show`", f"{args.runs} runs of each"),
        f"Baseline: `{args.baseline}` ({_version(args.baseline)}); this checkout: `{HERE}` ({_version(str(HERE))}).",
        "",
        *table(["command", "dpdist", "median wall s", "median cpu s", "runs"], rows),
        "",
        "Largest imports of `dpdist --help` (cumulative s, python -X importtime):",
        "",
        *table(["dpdist", "module", "s"], imports),
        "",
        f"Claim (issue 56): both answer in under {LIMIT} s of wall time, median: **{met}** "
        f"(this checkout: {', '.join(f'{t:.3f} s' for t in ours)}).",
    ]
    print("\n".join(lines))
    write_md(topic_dir("cli") / f"{today()}-cli_startup.md", lines)


def _version(exe: str) -> str:
    """``dpdist --version`` of ``exe`` and the git commit of the checkout it runs from, if any."""
    version = subprocess.run([exe, "--version"], capture_output=True, text=True).stdout.strip()
    code = subprocess.run(
        [str(Path(exe).parent / "python"), "-c", "import dpdist, os; print(os.path.dirname(dpdist.__file__))"],
        capture_output=True,
        text=True,
        cwd="/",  # not this checkout's directory: the executable's own installation
    ).stdout.strip()
    commit = subprocess.run(["git", "-C", code, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return f"{version}, commit {commit.stdout.strip()}" if commit.returncode == 0 else version


if __name__ == "__main__":
    main()
