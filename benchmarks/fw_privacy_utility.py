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
"""

from __future__ import annotations

import argparse
import lzma
import os
import time
from pathlib import Path

import numpy as np

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


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lam", type=float, default=50.0)
    ap.add_argument("--iters", type=int, default=4000)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--skip-long", action="store_true", help="skip the T=400,000 timing")
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared" / "data"))
    args = ap.parse_args()
    shared = Path(os.environ.get("DPDIST_SHARED_DATA", args.shared))
    from sklearn.linear_model import LogisticRegression

    from dpdist.linear_model import DPFrankWolfeClassifier

    for name in ("rcv1", "news20"):
        Xtr, ytr, Xte, yte = data(name, shared)
        print(
            f"\n{name}: train {Xtr.shape[0]:,} x {Xtr.shape[1]:,}, test {Xte.shape[0]:,}; lambda={args.lam:g}, "
            f"T={args.iters}; accuracy % / AUC % on the test rows"
        )
        fw = DPFrankWolfeClassifier(lam=args.lam, max_iter=args.iters, method="fast-fw").fit(Xtr, ytr)
        sk = LogisticRegression(l1_ratio=1.0, C=1.0, solver="liblinear").fit(_i32(Xtr), ytr)
        print(
            f"  {'non-private fast FW':<28}{'%.2f / %.2f' % scores(fw, Xte, yte):>16}   "
            f"nnz {np.count_nonzero(fw.coef_)}"
        )
        print(
            f"  {'sklearn L1 logistic (C=1)':<28}{'%.2f / %.2f' % scores(sk, _i32(Xte), yte):>16}   "
            f"nnz {np.count_nonzero(sk.coef_)}"
        )
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
            acc, auc = np.median([r[0] for r in res]), np.median([r[1] for r in res])
            print(f"  {'fast DP-FW eps=%g' % eps:<28}{'%.2f / %.2f' % (acc, auc):>16}   (median of {args.reps})")
        print(f"  paper Table 4 (full {name}, eps=0.1, lambda=5000, T=400,000): {PAPER[name][0]} / {PAPER[name][1]}")

    if not args.skip_long:
        from dpdist.data.synthetic import make_synthetic
        from dpdist.data.transforms import clip_rows

        X, y = make_synthetic("rcv1", random_state=0).materialize()
        X = clip_rows(X, 1.0, "scale")
        t0 = time.perf_counter()
        m = DPFrankWolfeClassifier(epsilon=0.1, delta=1e-6, lam=5000.0, max_iter=400_000, method="fast-dp-fw").fit(X, y)
        wall = time.perf_counter() - t0
        print(
            f"\nT=400,000 on the RCV1-shaped set ({X.shape[0]:,} x {X.shape[1]:,}), eps=0.1, lambda=5000: "
            f"solver {m.seconds_:.1f} s ({1e6 * m.seconds_ / 400_000:.1f} us/iteration), fit {wall:.1f} s, "
            f"nnz {np.count_nonzero(m.coef_)}"
        )


if __name__ == "__main__":
    main()
