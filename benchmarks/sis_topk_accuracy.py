"""Seed 003 Figs. 2-8: top-k accuracy of DP-SIS vs two-stage and the other top-k mechanisms.

Every microarray set in ``$DPDIST_SHARED_DATA/microarray`` plus the Fan-Lv synthetic set (n = 100, d = 2000),
k in {5, floor(ln d)}, epsilon from 0.1 to 20, 100 trials per point.

* DP-SIS: scores |x_j^T y| after seed 003's pre-processing (centre the columns, scale each
  by its max |.|, centre y and scale it by its max; data-dependent, as the seed says), then
  the canonical Lipschitz top-k (gamma = 1/2). The same scores feed the baselines: peeling
  EM, the joint EM and oneshot Laplace (delta = 1e-5; the spec flags its constant).
* two-stage: stage 1 of Kifer et al. with the full epsilon (as seed 003 compares it), sqrt(n)
  random blocks, scikit-learn LASSO alpha = 0.1 per block on standardised columns.
* top-k accuracy = |S ∩ S_ref| / |S_ref|, S_ref = the k largest |coef| of a non-private
  LASSO (alpha = 0.1, standardised columns; its R^2 is printed beside seed 003 Table 1), or
  the k largest true coefficients for Fan-Lv.
* TOP / GREAT / GOOD (spec 7) for DP-SIS against its own score order.

Prints a table per data set with [SKDRR24]'s claims checked by one-sided Welch t-tests on the
trials, writes ``benchmarks/results/sis/<date>-<name>.{md,csv}`` and ``<date>-<name>-<dataset>.png``.

    .venv/bin/python benchmarks/sis_topk_accuracy.py [--trials 100] [--datasets alon,sorlie] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
import os
import time
import warnings
from pathlib import Path

import numpy as np
from results_file import header, today, topic_dir, verdict, welch

os.environ.setdefault("DPDIST_UNACCOUNTED", "1")  # experiments on synthetic or public data: no ledger

EPSILONS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0)
METHODS = ("dp-sis", "two-stage", "peeling", "joint", "laplace")
PAPER_R2 = {
    "alon": 0.4822,
    "borovecki": 0.9011,
    "burczynski": 0.2175,
    "chiaretti": 0.2705,
    "chin": 0.5879,
    "chowdary": 0.8338,
    "christensen": 0.7870,
    "golub": 0.6819,
    "gordon": 0.2432,
    "gravier": 0.0689,
    "khan": 0.6961,
    "shipp": 0.4204,
    "singh": 0.6449,
    "sorlie": 0.9300,
    "su": 0.9602,
    "subramanian": 0.5340,
    "tian": 0.0080,
    "west": 0.7044,
    "galgo_yeoh_ALL": 0.4611,
}
# seed 003's claims (spec 8): DP-SIS significantly better than two-stage on these epsilon ranges
CLAIMS = {
    "christensen": (1.0, 10.0),
    "sorlie": (1.0 + 1e-9, math.inf),
    "galgo_yeoh_ALL": (2.0 + 1e-9, math.inf),
    "fan-lv": (10.0 + 1e-9, math.inf),
}


def load(name: str, shared: Path, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(X, y, true coefficients or None)."""
    if name == "fan-lv":
        from dpdist.data.synthetic import make_synthetic

        syn = make_synthetic("fan-lv", random_state=seed)
        X, y = syn.materialize()
        coef = np.zeros(X.shape[1])
        coef[syn.true_support] = syn.true_coef
        return X.toarray(), y, coef
    from dpdist.data.tables import read_table

    suffix = ".rda" if name.startswith("galgo") else ".RData"
    t = read_table(shared / "microarray" / f"{name}{suffix}")
    return t.X, t.y.astype(np.float64), None


def standardise(X: np.ndarray) -> np.ndarray:
    sd = X.std(axis=0)
    return (X - X.mean(axis=0)) / np.where(sd > 0, sd, 1.0)


def run_dataset(name: str, shared: Path, trials: int, seed: int) -> dict:
    os.environ.setdefault("NUMBA_NUM_THREADS", "1")
    from sklearn.linear_model import Lasso

    from dpdist.data.transforms import DataDependentWarning, center_columns, scale_columns, scale_target
    from dpdist.selection.baselines import JointTopK, LaplaceTopK, PeelingTopK
    from dpdist.selection.sis import correlation_scores
    from dpdist.selection.topk import CanonicalTopK
    from dpdist.selection.two_stage import TwoStageSelector, assign_blocks, lasso_coefficients, truncated_vote

    t_start = time.perf_counter()
    rng = np.random.default_rng([seed, abs(hash(name)) % (1 << 31)])
    X, y, true_coef = load(name, shared, seed)
    n, d = X.shape
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DataDependentWarning)
        Xp, _ = scale_columns(center_columns(X)[0])
        yp, _ = scale_target(y - y.mean())
    scores = correlation_scores(Xp, yp)
    order = np.argsort(-scores, kind="stable")
    Xs = standardise(X)
    if true_coef is None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ref_model = Lasso(alpha=0.1, max_iter=10000).fit(Xs, y)
        ref_coef, r2 = ref_model.coef_, float(ref_model.score(Xs, y))
    else:
        ref_coef, r2 = true_coef, float("nan")
    ks = sorted({5, int(math.floor(math.log(d)))})
    # two-stage: one set of block fits per trial, shared by every k and epsilon of that trial
    # the seed's m = floor(sqrt(n)) of these public benchmark sets (dpdist's default would release a noisy n)
    n_blk = math.isqrt(n)
    block_coefs = []
    for _ in range(trials):
        blocks = assign_blocks(n, n_blk, rng)
        block_coefs.append([lasso_coefficients(Xs[rows], y[rows], 0.1) for rows in blocks])
    rows = []
    for k in ks:
        nz = np.flatnonzero(ref_coef)
        ref = set(nz[np.argsort(-np.abs(ref_coef[nz]), kind="stable")[:k]].tolist())
        votes = []
        for coefs in block_coefs:
            v = np.zeros(d)
            for c in coefs:
                v[truncated_vote(c, k)] += 1
            votes.append(v)
        top = order[:k]
        for eps in EPSILONS:
            mechs: dict[str, CanonicalTopK | PeelingTopK | JointTopK | LaplaceTopK] = {
                "dp-sis": CanonicalTopK(k, eps, random_state=rng),
                "peeling": PeelingTopK(k, eps, random_state=rng),
                "joint": JointTopK(k, eps, random_state=rng),
                "laplace": LaplaceTopK(k, eps, 1e-5, random_state=rng),
            }
            two_stage = TwoStageSelector(k=k, epsilon=eps, alpha=0.1, n_blocks=n_blk, random_state=rng)
            acc: dict[str, list[float]] = {m: [] for m in METHODS}
            tgg = {"TOP": 0, "GREAT": 0, "GOOD": 0}
            for t in range(trials):
                for method, mech in mechs.items():
                    sel = mech.select(scores)
                    acc[method].append(len(ref & set(sel.tolist())) / max(1, len(ref)))
                    if method == "dp-sis":
                        ranks = np.searchsorted(-scores[order], -scores[sel], side="left")  # 0-based rank (ties: best)
                        for label, inner, outer in (
                            ("TOP", k, k),
                            ("GREAT", k // 10, (11 * k) // 10),
                            ("GOOD", k // 100, (3 * k) // 2),
                        ):
                            ok = set(top[:inner].tolist()) <= set(sel.tolist()) and np.all(ranks < max(outer, k))
                            tgg[label] += bool(ok)
                sel = two_stage.fit_votes(votes[t], len(block_coefs[t])).features_
                acc["two-stage"].append(len(ref & set(sel.tolist())) / max(1, len(ref)))
            row = {"dataset": name, "n": n, "d": d, "k": k, "epsilon": eps, "r2": r2}
            for m in METHODS:
                row[m] = float(np.mean(acc[m]))
                row[m + "_trials"] = acc[m]
            row.update({key: v / trials for key, v in tgg.items()})
            rows.append(row)
    return {"name": name, "rows": rows, "seconds": time.perf_counter() - t_start}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100)
    ap.add_argument("--datasets", default=None, help="comma-separated names (default: all microarray + fan-lv)")
    ap.add_argument("--shared", default="data", help="folder holding microarray/ (or $DPDIST_SHARED_DATA)")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=str(topic_dir("sis")))
    ap.add_argument("--name", default="topk", help="file name after the date: <date>-<name>.md")
    args = ap.parse_args()
    shared = Path(os.environ.get("DPDIST_SHARED_DATA", args.shared))
    if args.datasets:
        names = args.datasets.split(",")
    else:
        names = sorted(
            p.name.split(".")[0] for p in (shared / "microarray").iterdir() if not p.name.endswith("classes.rda")
        ) + ["fan-lv"]
    from joblib import Parallel, delayed

    load0 = os.getloadavg()[0]
    t0 = time.perf_counter()
    results = Parallel(n_jobs=args.jobs)(delayed(run_dataset)(nm, shared, args.trials, args.seed) for nm in names)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    date = today()
    table, csv, r2_rows, claims, never = [], [], [], [], []
    failed: list[float] = []
    low: list[float] = []
    header_cols = ["dataset", "n", "d", "k", "epsilon"] + list(METHODS) + ["TOP", "GREAT", "GOOD"]
    table += ["| " + " | ".join(header_cols) + " | DP-SIS vs two-stage (two-sided Welch) |", "|" + "---|" * 14]
    csv.append(",".join(header_cols + ["welch_p_two_sided"]))
    for res in results:
        rows, first = res["rows"], res["rows"][0]
        paper = PAPER_R2.get(res["name"])
        if not math.isnan(first["r2"]):
            r2_rows.append(
                f"| {res['name']} | {first['n']} | {first['d']} | {paper if paper is not None else '–'} | "
                f"{first['r2']:.4f} |"
            )
        for r in rows:
            a, b = np.array(r["dp-sis_trials"]), np.array(r["two-stage_trials"])
            p_sis, p_two = welch(a, b, "greater"), welch(b, a, "greater")
            p2 = min(1.0, 2 * min(p_sis, p_two))
            word = "n.s." if p2 >= 0.05 else ("DP-SIS better" if a.mean() > b.mean() else "two-stage better")
            vals = [res["name"], r["n"], r["d"], r["k"], r["epsilon"]] + [round(r[m], 4) for m in METHODS]
            vals += [round(r["TOP"], 3), round(r["GREAT"], 3), round(r["GOOD"], 3)]
            table.append("| " + " | ".join(str(v) for v in vals) + f" | {word} |")
            csv.append(",".join(str(v) for v in vals + [f"{p2:.3g}"]))
            never.append(p_two < 0.05)
            if res["name"] in CLAIMS and CLAIMS[res["name"]][0] <= r["epsilon"] <= CLAIMS[res["name"]][1]:
                if p_sis >= 0.05:
                    failed.append(r["epsilon"])
                    low.append(max(r["dp-sis"], r["two-stage"]))
                claims.append(
                    f"| {res['name']} | {r['k']} | {r['epsilon']:g} | {r['dp-sis']:.3f} / {r['two-stage']:.3f} | "
                    f"{p_sis:.2g} | {verdict(p_sis)} |"
                )
        _plot(res, out / f"{date}-{args.name}-{res['name']}.png")
    n_fan = sum(1 for r in results if r["name"] == "fan-lv")
    md = header(
        "[SKDRR24] Figs. 2-8 and Table 1: top-k accuracy of DP-SIS against two-stage and other top-k mechanisms",
        f"{args.trials} per point (the paper: 100)"
        + ("" if args.trials == 100 else f" -- {args.trials} trials, the paper used 100")
        + f"; {len(results)} data sets ({len(results) - n_fan} microarray + {n_fan} synthetic), "
        f"{time.perf_counter() - t0:.0f} s in all.",
        load0,
    )
    md += [
        "The staged data hold 15 of the paper's 19 microarray sets (Burczynski, Chiaretti, Chin and Tian are not "
        "staged, so the Chin claim is not tested; Nakayama and Pomeroy are extra) and Yeoh only as the galgo "
        "subset (233 x 2435, not 248 x 12625).",
        "",
        "## Table 1: R^2 of the non-private LASSO (alpha = 0.1), paper beside ours",
        "",
        "| data | n | d | paper | ours |",
        "|---|---|---|---|---|",
        *r2_rows,
        "",
        "Where ours differs: the staged copy differs (Sorlie 456 vs 457 columns, Su 5565 vs 5564, Yeoh the galgo "
        "subset); elsewhere (e.g. Christensen) the cause is not known -- the paper does not state its "
        "standardisation or intercept (ours: standardised columns, intercept fitted).",
        "",
        "## The paper's claims, tested (one-sided Welch t-test over the trials, 5%)",
        "",
        "DP-SIS better than two-stage on Christensen for eps in [1, 10], Sorlie eps > 1, Yeoh eps > 2, synthetic "
        "eps > 10:",
        "",
        "| data | k | eps | top-k accuracy DP-SIS / two-stage | p | verdict |",
        "|---|---|---|---|---|---|",
        *claims,
        "",
        f"Two-stage never significantly better than DP-SIS: "
        f"{'holds' if not any(never) else 'does not hold'} (two-stage significantly better in {sum(never)} of "
        f"{len(never)} (data, k, eps) points; at 5% about {0.05 * len(never):.1f} would be significant by chance).",
        "",
        (
            f"Where a claimed point does not hold here (epsilon <= {max(failed):g}), both methods' accuracy is "
            f"at most {max(low):.2f} at our trial count; the paper's S_ref and TOP/GREAT/GOOD rounding are not "
            "fully specified (docs/algorithms.md §9.13), so the cause is not known."
            if failed
            else ("Every claimed point holds here." if claims else "No data set of these claims is in this run.")
        ),
        "",
        "## Figs. 2-8: top-k accuracy per data set, k and epsilon",
        "",
        *table,
        "",
        *(f"![{r['name']}]({date}-{args.name}-{r['name']}.png)" for r in results),
        "",
    ]
    (out / f"{date}-{args.name}.md").write_text("\n".join(md) + "\n")
    (out / f"{date}-{args.name}.csv").write_text("\n".join(csv) + "\n")
    print("\n".join(md))


def _plot(res: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = res["rows"]
    ks = sorted({r["k"] for r in rows})
    fig, axes = plt.subplots(1, len(ks), figsize=(5.5 * len(ks), 3.8), squeeze=False)
    for ax, k in zip(axes[0], ks):
        rk = [r for r in rows if r["k"] == k]
        for m in METHODS:
            ax.plot([r["epsilon"] for r in rk], [r[m] for r in rk], marker="o", label=m)
        ax.set_xscale("log")
        ax.set_ylim(-0.02, 1.02)
        ax.set_xlabel("epsilon")
        ax.set_ylabel("top-k accuracy")
        ax.set_title(f"{res['name']}, k={k}")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    main()
