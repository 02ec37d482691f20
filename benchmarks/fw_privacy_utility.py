"""Seed 004 Table 4 on the data we have: the privacy-utility curve of fast DP-FW, and T = 400,000.

Table 4 (epsilon = 0.1, lambda = 5000, T = 400,000: RCV1 90.53% accuracy / 97.29 AUC, News20
92.37 / 98.65) needs the full RCV1 and News20. Here, on the real subsets:

* RCV1: train on rcv1_small.train (1,000 rows), test on rcv1_small.test (500 rows);
* News20: news20.t (3,993 rows, groups 1-10 vs 11-20, rows scaled to ||x||_inf <= 1), split 80/20
  by a fixed public seed;

fast DP-FW (Alg. 2 + Alg. 4, refresh T/10) at epsilon in {0.1, 0.3, 1, 3, 10} (delta = 1e-6,
median of ``--reps`` runs), beside the non-private fast FW at the same lambda and T and
scikit-learn's L1 logistic regression (liblinear, C = 1). Then the time of one private run with
T = 400,000, lambda = 5000, epsilon = 0.1 on the RCV1-shaped synthetic set (20,242 x 47,236).

    .venv/bin/python benchmarks/fw_privacy_utility.py [--lam 50] [--iters 4000] [--reps 5] [--skip-long]

Also runs the paper's own settings (lambda = 5000, T = 400,000, epsilon = 0.1) on the subsets. Writes
``benchmarks/results/fw/<UTC date>-table4.md`` and ``.csv`` with the paper's numbers beside ours.
"""

from __future__ import annotations

import csv
import lzma
import os
import time
from pathlib import Path

import numpy as np
from run_options import SHARED, parser, shared_data

os.environ.setdefault("DPDIST_UNACCOUNTED", "1")  # experiments on synthetic or public data: no ledger

EPSILONS = (0.1, 0.3, 1.0, 3.0, 10.0)
PAPER = {"rcv1": (90.53, 97.29), "news20": (92.37, 98.65)}


def data(name: str, shared: Path):
    from sklearn.datasets import load_svmlight_file

    from dpdist.data.transforms import clip_rows

    if name == "rcv1":
        Xtr, ytr = load_svmlight_file(lzma.open(shared / "libsvm/rcv1_small.train.svm.xz"), n_features=47236)
        Xte, yte = load_svmlight_file(lzma.open(shared / "libsvm/rcv1_small.test.svm.xz"), n_features=47236)
        return Xtr.tocsr(), ytr > 0, Xte.tocsr(), yte > 0
    X, y = load_svmlight_file(lzma.open(shared / "libsvm/news20.t.svm.xz"), n_features=62060)
    X, y = clip_rows(X.tocsr(), 1.0, "scale"), y > 10
    test = np.random.default_rng(0).random(X.shape[0]) < 0.2
    return X[~test], y[~test], X[test], y[test]


def _i32(X):  # liblinear takes 32-bit sparse indices only
    import scipy.sparse as sp

    return sp.csr_matrix((X.data, X.indices.astype(np.int32), X.indptr.astype(np.int32)), shape=X.shape)


def scores(model, Xte, yte) -> tuple[float, float]:
    from sklearn.metrics import roc_auc_score

    return 100 * float(np.mean(model.predict(Xte) == yte)), 100 * float(
        roc_auc_score(yte, model.decision_function(Xte))
    )


def _row(rows: list[dict], name: str, what: str, eps: float | str, res: list[tuple[float, float]]) -> str:
    acc, auc = float(np.median([r[0] for r in res])), float(np.median([r[1] for r in res]))
    rows.append({"set": name, "method": what, "epsilon": eps, "runs": len(res), "accuracy": acc, "auc": auc})
    line = f"| {what} | {eps} | {acc:.2f} / {auc:.2f} | {len(res)} |"
    print(line, flush=True)
    return line


def main() -> None:
    ap = parser(lam=50.0, iters=4000, reps=5, shared=SHARED)
    ap.add_argument("--skip-long", action="store_true", help="skip the T=400,000 timing")
    args = ap.parse_args()
    shared = shared_data(args)
    from results_file import header, today, topic_dir
    from sklearn.linear_model import LogisticRegression

    from dpdist.linear_model import DPFrankWolfeClassifier

    load0 = os.getloadavg()[0]
    rows: list[dict] = []
    md: list[str] = []
    for name in ("rcv1", "news20"):
        Xtr, ytr, Xte, yte = data(name, shared)
        md += [
            f"## {name}: train {Xtr.shape[0]:,} x {Xtr.shape[1]:,}, test {Xte.shape[0]:,}",
            "",
            "| method | epsilon | accuracy % / AUC % | runs |",
            "| --- | ---: | ---: | ---: |",
            f"| paper Table 4 (the full {name}, lambda = 5000, T = 400,000) | 0.1 | "
            f"{PAPER[name][0]:.2f} / {PAPER[name][1]:.2f} | - |",
        ]
        fw = DPFrankWolfeClassifier(lam=args.lam, max_iter=args.iters, method="fast-fw").fit(Xtr, ytr)
        md.append(
            _row(
                rows, name, f"non-private fast FW (lambda {args.lam:g}, T {args.iters})", "inf", [scores(fw, Xte, yte)]
            )
        )
        sk = LogisticRegression(l1_ratio=1.0, C=1.0, solver="liblinear").fit(_i32(Xtr), ytr)
        md.append(_row(rows, name, "scikit-learn L1 logistic (C = 1)", "inf", [scores(sk, _i32(Xte), yte)]))
        paper = [
            scores(
                DPFrankWolfeClassifier(epsilon=0.1, delta=1e-6, lam=5000.0, max_iter=400_000, method="fast-dp-fw").fit(
                    Xtr, ytr
                ),
                Xte,
                yte,
            )
            for _ in range(args.reps)
        ]
        md.append(_row(rows, name, "fast DP-FW at the paper's settings (lambda 5000, T 400,000)", 0.1, paper))
        for eps in EPSILONS:
            res = [
                scores(
                    DPFrankWolfeClassifier(
                        epsilon=eps, delta=1e-6, lam=args.lam, max_iter=args.iters, method="fast-dp-fw"
                    ).fit(Xtr, ytr),
                    Xte,
                    yte,
                )
                for _ in range(args.reps)
            ]
            md.append(_row(rows, name, f"fast DP-FW (lambda {args.lam:g}, T {args.iters})", eps, res))
        md.append("")

    if not args.skip_long:
        from dpdist.data.synthetic import make_synthetic
        from dpdist.data.transforms import clip_rows

        X, y = make_synthetic("rcv1", random_state=0).materialize()
        X = clip_rows(X, 1.0, "scale")
        t0 = time.perf_counter()
        m = DPFrankWolfeClassifier(epsilon=0.1, delta=1e-6, lam=5000.0, max_iter=400_000, method="fast-dp-fw").fit(X, y)
        wall = time.perf_counter() - t0
        md += [
            f"T = 400,000 on the public RCV1-shaped synthetic set ({X.shape[0]:,} x {X.shape[1]:,}), epsilon = 0.1, "
            f"lambda = 5000: solver {m.seconds_:.1f} s ({1e6 * m.seconds_ / 400_000:.1f} us/iteration), "
            f"fit {wall:.1f} s, {np.count_nonzero(m.coef_)} non-zero weights.",
            "",
        ]
    out = topic_dir("fw")
    text = header(
        "[RKL23] Table 4 on the data at hand: fast DP-FW's privacy-utility",
        f"median of {args.reps} private runs per cell; one non-private fit each",
        load0,
    )
    text += [
        "Table 4 trains on the full RCV1 (20,242 rows) and News20 (19,996 rows); the repository has their real "
        "subsets only (RCV1 small: 1,000 train / 500 test rows; News20's test file: 3,993 rows, groups 1-10 vs "
        "11-20, rows scaled to ||x||_inf <= 1, 80/20 by a fixed public seed). At epsilon = 0.1 a private model "
        "on 1,000-3,000 rows has about 20 times less signal per unit of noise than on the full sets, so the "
        "paper's 90-92% is not expected here: the rows at the paper's settings show where the subsets stand.",
        "",
        *md,
    ]
    (out / f"{today()}-table4.md").write_text("\n".join(text) + "\n")
    with open(out / f"{today()}-table4.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["set", "method", "epsilon", "runs", "accuracy", "auc"])
        w.writeheader()
        w.writerows(rows)
    print("\n".join(text))


if __name__ == "__main__":
    main()
