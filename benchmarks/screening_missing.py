"""The screening experiments the tables lacked: [KLR23]'s ADP-Screen with the logistic loss, and ADP-Screen
on [KLR25]'s Table 1 sets (uncorrelated and correlated) beside the committed RNM-Screen trials, with
[KLR25]'s sign test ("RNM-Screen's F1 significantly better than ADP-Screen's, uncorrelated and correlated").

Runs ``screening_tables.py``'s own configurations (its data, settings, solver calls and metrics): ADP-Screen
every iteration / every 50th / at T only on the logistic synthetic set (lambda = 5, T = 1000, eps1 = eps2 = 2.5,
seeds 4000 + t as the squared runs), and ADP-Screen every iteration on the Table 1 sets (lambda = 50,
T = 1000, eps1 = 4.9, eps2 = 0.1, seeds 5000 + t as RNM-Screen's), both calibrations. One row per trial.

    .venv/bin/python benchmarks/screening_missing.py [--trials 5] [--t1-trials 20] [--jobs 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("DPDIST_UNACCOUNTED", "1")

import screening_tables as st  # noqa: E402
from result_tables import markdown, number, read_rows, sign_test, summary  # noqa: E402
from results_file import command, header, table, today, topic_dir  # noqa: E402

FIELDS = ["part", "dataset", "loss", "regime", "method", "calibration", "trial", "tpr", "fpr", "f1", "density"]


def tasks(trials: int, t1_trials: int) -> list[dict]:
    s0 = {"T": 1000, "eps1": 2.5, "eps2": 2.5, "delta1": 1 / 6000, "delta2": 1 / 6000}
    s1 = {"T": 1000, "eps1": 4.9, "eps2": 0.1, "delta1": 1 / 4000, "delta2": 1 / 12000}
    out = []
    for cal in ("paper", "default"):
        lab = {"part": "klr23-logistic", "dataset": "synthetic", "loss": "logistic", "method": "ADP-Screen"}
        for t in range(trials):
            out += st.adp_tasks("syn-logistic", s0, cal, t, lab)
        for name in ("uncorrelated", "correlated", "uncorrelated (block w*)", "correlated (block w*)"):
            for t in range(t1_trials):
                lab = {"part": "klr25-table1", "dataset": name, "loss": "squared", "regime": "every"}
                out.append(
                    dict(
                        data=f"t1-{name}",
                        settings=s1,
                        calibration=cal,
                        method="adp-every",
                        schedule=1,
                        trial=t,
                        seed=5000 + t,
                        labels={**lab, "method": "ADP-Screen"},
                    )
                )
    return out


def _summary(rows: list[dict[str, str]], part: str, setting: str) -> list[str]:
    """The markdown table of one part's TPR, FPR, F1 and density: mean [95% interval] per (``setting``,
    calibration)."""
    return summary([r for r in rows if r["part"] == part], [setting, "calibration"], ["tpr", "fpr", "f1", "density"])


def _by_trial(rows: list[dict[str, str]], **match: str) -> list[dict[str, str]]:
    """The rows whose fields equal ``match``, in trial order (the sign tests pair two methods' rows by trial)."""
    return sorted((r for r in rows if all(r[k] == v for k, v in match.items())), key=lambda r: int(r["trial"]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=5)
    ap.add_argument("--t1-trials", type=int, default=20)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--render", action="store_true", help="rewrite today's .md from today's CSV (no runs)")
    args = ap.parse_args()
    started, t0 = os.getloadavg()[0], time.time()
    out = topic_dir("screening")
    stem = out / f"{today()}-missing"
    if not args.render:
        st.load_data(["seed000", "table1"])
        runs = st._run_all(tasks(args.trials, args.t1_trials), args.jobs, t0)
        table(FIELDS, [[r.get(f, "") for f in FIELDS] for r in runs], stem.with_suffix(".csv"))
    rows = read_rows(stem.with_suffix(".csv"))
    md = header(
        "Screening experiments the tables lacked: ADP-Screen with the logistic loss ([KLR23]) and on [KLR25]'s "
        "Table 1 sets",
        f"{args.trials} per [KLR23] configuration (the paper does not say), {args.t1_trials} per Table 1 set (the "
        "paper: 20); seeds 4000 + t and 5000 + t (benchmarks/screening_tables.py's); one row per trial in the CSV",
        started,
    )
    if args.render and stem.with_suffix(".md").is_file():  # keep the run's own command and machine lines
        old = stem.with_suffix(".md").read_text(encoding="utf-8").splitlines()
        ran = [x for x in old if x.startswith(("Command:", "Run:"))][:2]
        md = [md[0], "", *(x for r in ran for x in (r, "")), f"Re-rendered from its CSV by: `{command()}`", "", *md[6:]]
    md += [
        "Settings: the docstring of benchmarks/screening_missing.py. Means [95% interval] over the trials.",
        "",
        "## [KLR23]: ADP-Screen with the logistic loss",
        "",
        "The paper (Sec. 4, linear and logistic): ADP-Screen cannot tell true zeros from true non-zeros, and "
        "screening often over-screens. Its logistic numbers were in the lost Figure 1.",
        "",
        *_summary(rows, "klr23-logistic", "regime"),
        "",
        "Sign test (paired by trial) of TPR > FPR, i.e. ADP-Screen telling them apart (the paper: it does not):",
        "",
    ]
    sign = []
    for regime in ("ADP every", "ADP every 50th", "ADP T only"):
        for cal in ("paper", "default"):
            g = _by_trial(rows, part="klr23-logistic", regime=regime, calibration=cal)
            p = sign_test([number(r["tpr"]) for r in g], [number(r["fpr"]) for r in g], "greater")
            if 0.5 ** len(g) >= 0.05:  # even n wins of n give p = 0.5^n: the test cannot reach 5%
                reading = f"not testable: {len(g)} pairs (the smallest p is {0.5 ** len(g):.3g})"
            else:
                reading = "tells them apart" if p < 0.05 else "cannot (as the paper)"
            sign.append([regime, cal, len(g), f"{p:.3g}", reading])
    md += markdown(["regime", "calibration", "trials", "p(TPR > FPR)", "reading"], sign)
    md += [
        "",
        "## [KLR25]: ADP-Screen on the Table 1 sets, beside RNM-Screen",
        "",
        "The paper (Sec. 6, its Fig. 1): RNM-Screen's F1 is significantly better than ADP-Screen's on both the "
        "uncorrelated and the correlated set, by a sign test.",
        "",
        *_summary(rows, "klr25-table1", "dataset"),
        "",
    ]
    rnm_csv = sorted(out.glob("*-table1.csv"))[-1]
    rnm = read_rows(rnm_csv)
    checks = []
    for ds in ("uncorrelated", "correlated", "uncorrelated (block w*)", "correlated (block w*)"):
        for cal in ("paper", "default"):
            a = _by_trial(rnm, dataset=ds, calibration=cal)
            b = _by_trial(rows, part="klr25-table1", dataset=ds, calibration=cal)
            m = min(len(a), len(b))
            p = sign_test([number(r["f1"]) for r in a[:m]], [number(r["f1"]) for r in b[:m]], "greater")
            checks.append([ds, cal, m, f"{p:.3g}", "holds" if p < 0.05 else "does not hold"])
    md += [
        f"RNM-Screen's F1 > ADP-Screen's, sign test paired by trial (RNM-Screen's trials from `{rnm_csv.name}`, the "
        "same seeds):",
        "",
        *markdown(["data", "calibration", "pairs", "p", "verdict"], checks),
    ]
    stem.with_suffix(".md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))


if __name__ == "__main__":
    main()
