"""[SKDRR24] Figs. 6-7 in the paper's form: heatmaps of DP-SIS's top-k accuracy minus two-stage's, one row
per data set and one column per epsilon, k = 5 (Fig. 6) and k = floor(ln d) (Fig. 7), with the points where
the difference is significant marked. Drawn from the committed CSVs of ``sis_topk_accuracy.py`` (nothing is
rerun): the newest file of each data set.

    .venv/bin/python benchmarks/sis_heatmaps.py    # writes results/sis/<date>-heatmaps.{md,png}
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from result_tables import markdown, number, read_rows
from results_file import header, today, topic_dir

SIS = Path(__file__).resolve().parent / "results" / "sis"


def newest_rows() -> tuple[list[dict[str, str]], list[str]]:
    """The rows of each data set from the newest topk CSV holding it (a -trials CSV is not a summary)."""
    chosen: dict[str, tuple[str, list[dict[str, str]]]] = {}
    for csv in sorted(SIS.glob("*-topk*.csv")):
        if csv.stem.endswith("-trials"):
            continue
        rows = read_rows(csv)
        for ds in {r["dataset"] for r in rows}:
            chosen[ds] = (csv.name, [r for r in rows if r["dataset"] == ds])  # sorted: the newest wins
    return [r for _, rows in chosen.values() for r in rows], sorted({name for name, _ in chosen.values()})


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows, sources = newest_rows()
    sets = sorted({r["dataset"] for r in rows})
    eps = sorted({number(r["epsilon"]) for r in rows})
    out = topic_dir("sis")
    date = today()
    fig, axes = plt.subplots(1, 2, figsize=(13, 0.42 * len(sets) + 2.2))
    md = header(
        "[SKDRR24] Figs. 6-7: DP-SIS minus two-stage top-k accuracy, every data set and epsilon",
        "those of the CSVs drawn from: " + ", ".join(f"`{s}`" for s in sources) + " (the paper: 100 a point)",
    )
    md += [
        "The paper's figures: two heatmaps (k = 5; k = log d), rows the data sets, columns epsilon from 0.1 to "
        "20, colour the difference; the paper reports that two-stage is never significantly better and DP-SIS "
        "is significantly better mostly for epsilon > 1 (Alon and Borovecki: no difference at any epsilon). "
        "Here '+' marks DP-SIS significantly better, '-' two-stage significantly better (two-sided Welch, 5%, "
        "as the CSV's column; the paper names no test). The synthetic set's second k is 7 (floor(ln d)) in "
        "runs before 2026-11-29, against the paper's 8.",
        "",
        f"![Figs. 6-7]({date}-heatmaps.png)",
        "",
    ]
    for ax, which in zip(axes, ("5", "log")):
        grid = np.full((len(sets), len(eps)), np.nan)
        marks: dict[tuple[int, int], str] = {}
        ks = {}
        for r in rows:
            k = int(r["k"])
            if (which == "5") != (k == 5):
                continue
            i, j = sets.index(r["dataset"]), eps.index(number(r["epsilon"]))
            diff = number(r["dp-sis"]) - number(r["two-stage"])
            grid[i, j] = diff
            ks[r["dataset"]] = k
            if number(r["welch_p_two_sided"]) < 0.05:
                marks[(i, j)] = "+" if diff > 0 else "-"
        im = ax.imshow(grid, cmap="RdBu", vmin=-1, vmax=1, aspect="auto")
        for (i, j), s in marks.items():
            ax.text(j, i, s, ha="center", va="center", fontsize=11, fontweight="bold")
        ax.set_xticks(range(len(eps)), [f"{e:g}" for e in eps])
        ax.set_yticks(range(len(sets)), [f"{s} (k={ks.get(s, '-')})" for s in sets], fontsize=8)
        ax.set_xlabel("epsilon")
        ax.set_title("Fig. 6: k = 5" if which == "5" else "Fig. 7: k = floor(ln d)")
        fig.colorbar(im, ax=ax, label="top-k accuracy: DP-SIS - two-stage")
        table = [
            [
                s,
                ks.get(s, "-"),
                *(("–" if math.isnan(v) else f"{v:+.3f}{marks.get((i, j), '')}") for j, v in enumerate(g)),
            ]
            for i, (s, g) in enumerate(zip(sets, grid))
        ]
        md += [f"## {'Fig. 6 (k = 5)' if which == '5' else 'Fig. 7 (k = floor(ln d))'}", ""]
        md += markdown(["data", "k", *(f"eps {e:g}" for e in eps)], table) + [""]
        n_two = sum(1 for s in marks.values() if s == "-")
        n_sis = sum(1 for s in marks.values() if s == "+")
        md += [
            f"DP-SIS significantly better at {n_sis} of {int(np.isfinite(grid).sum())} points, two-stage at "
            f"{n_two} (the paper: two-stage at none).",
            "",
        ]
    fig.tight_layout()
    fig.savefig(out / f"{date}-heatmaps.png", dpi=100)
    (out / f"{date}-heatmaps.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))


if __name__ == "__main__":
    main()
