"""[KLR23] Fig. 2 and [KLR25] Fig. 2 in the papers' form, from runs of ``screening_tables.py``'s configurations
whose iterates are replayed from their recorded paths (signed vertices and screened coordinates):

* [KLR23] Fig. 2: the Wolfe gap g(w_t) = <grad f(w_t), w_t> + lambda ||grad f(w_t)||_inf against the iteration,
  non-private FW against private FW, each with the non-private (exact) screening rule at every iteration,
  linear and logistic loss (the 3000 x 600 synthetic set, lambda = 5, T = 1000, eps = 2.5); both calibrations.
  The paper: the gap is smaller under non-private optimization, for both losses (its Fig. 2, numbers lost).
* [KLR25] Fig. 2: RNM-Screen's training MSE of the iterate against the iteration on the eight real sets
  (Yeo-Johnson, Tables 2-3's settings), both calibrations. The paper: the loss decreases on the sets with
  larger d ("learning still occurs"), less so on the small ones.

One run per configuration (seeds 3000 / 1000 as R3 / R1 trial 0, and 6000 for RNM-Screen trial 0, as
``screening_tables.py``); the replayed final iterate is checked against the solver's.

    .venv/bin/python benchmarks/screening_figures.py [--every 10]
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import screening_tables as st  # noqa: E402
from results_file import header, today, topic_dir  # noqa: E402


def iterates(res: dict, lam: float, T: int, every: int, d: int):
    """(t, w_t) every ``every`` steps, replayed: w <- (1 - eta) w + eta sigma lam e_j, then step t's zeroing."""
    w = np.zeros(d) if res["init"] is None else np.array(res["init"], float)
    zero: dict[int, list[int]] = {}
    for t, j in res["screened"]:
        zero.setdefault(int(t), []).append(int(j))
    for t, v in enumerate(res["path"], start=1):
        eta = 2.0 / (t + 2.0)
        w *= 1.0 - eta
        w[abs(v) - 1] += eta * np.sign(v) * lam
        for j in zero.get(t, ()):
            w[j] = 0.0
        if t % every == 0 or t == T:
            yield t, w


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpdist.solvers.frank_wolfe import derivative

    ap = argparse.ArgumentParser()
    ap.add_argument("--every", type=int, default=10)
    args = ap.parse_args()
    started = os.getloadavg()[0]
    os.environ.setdefault("DPDIST_UNACCOUNTED", "1")
    st.load_data(["seed000", "real"])
    out, date = topic_dir("screening"), today()
    csv = ["figure,configuration,calibration,iteration,value"]
    checks = []
    # [KLR23] Fig. 2
    s = {"T": 1000, "eps1": 2.5, "eps2": 2.5, "delta1": 1 / 6000, "delta2": 1 / 6000}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    finals = []
    for ax, loss in zip(axes, ("squared", "logistic")):
        key = f"syn-{loss}"
        X, y, _, lam, _, _ = st.DATA[key]
        n, d = X.shape
        for cal in ("paper", "default"):
            for method, label, seed in (("np+exact", "non-private FW", 1000), ("dp+exact", "private FW", 3000)):
                task = dict(data=key, settings=s, calibration=cal, method=method, trial=0, seed=seed, labels={})
                res = st.run({**task, "keep_path": True})
                ts, gs, w = [], [], None
                for t, w in iterates(res, lam, s["T"], args.every, d):
                    m = np.asarray(X @ w).ravel()
                    grad = np.asarray(X.T @ derivative(loss, m, y)).ravel() / n
                    ts.append(t)
                    gs.append(float(grad @ w + lam * np.abs(grad).max()))
                checks.append(float(np.abs(w - res["coef"]).max()))
                style = "-" if method == "np+exact" else "--"
                ax.plot(ts, gs, style, label=f"{label} ({cal} calibration)")
                csv += [f"KLR23-2,{loss} {label},{cal},{t},{g:.6g}" for t, g in zip(ts, gs)]
                finals.append((loss, label, cal, gs[-1], res["screened"]))
        ax.set(xlabel="iteration", ylabel="Wolfe gap", yscale="log", title=f"[KLR23] Fig. 2: {loss} loss")
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / f"{date}-klr23-fig2.png", dpi=100)
    plt.close(fig)
    # [KLR25] Fig. 2
    names = list(st.REAL)
    fig, axes = plt.subplots(2, 4, figsize=(16, 7))
    mse_rows = []
    for ax, name in zip(axes.flat, names):
        key = f"real-{name}-yj"
        X, y, _, lam, _, _ = st.DATA[key]
        n, d = X.shape
        T = st.REAL[name][2]
        sset = {"T": T, "eps1": 4.9, "eps2": 0.1, "delta1": 0.75 / n, "delta2": 0.25 / n}
        for cal in ("paper", "default"):
            task = dict(data=key, settings=sset, calibration=cal, method="rnm", trial=0, seed=6000, labels={})
            res = st.run({**task, "keep_path": True})
            ts, ms, w = [], [], None
            for t, w in iterates(res, lam, T, max(1, T // 50), d):
                ts.append(t)
                ms.append(float(np.mean((y - np.asarray(X @ w).ravel()) ** 2)))
            checks.append(float(np.abs(w - res["coef"]).max()))
            ax.plot(ts, ms, label=f"{cal} calibration")
            csv += [f"KLR25-2,{name},{cal},{t},{v:.6g}" for t, v in zip(ts, ms)]
            mse_rows.append(f"| {name} | {d} | {cal} | {ms[0]:.4g} | {ms[len(ms) // 2]:.4g} | {ms[-1]:.4g} |")
        ax.set(xlabel="iteration", ylabel="training MSE", title=f"{name} (d = {d})")
        ax.legend(fontsize=7)
    fig.suptitle("[KLR25] Fig. 2: RNM-Screen's MSE per iteration (Yeo-Johnson)")
    fig.tight_layout()
    fig.savefig(out / f"{date}-klr25-fig2.png", dpi=100)
    (out / f"{date}-figures.csv").write_text("\n".join(csv) + "\n", encoding="utf-8")
    md = header(
        "[KLR23] Fig. 2 and [KLR25] Fig. 2: the Wolfe gap and RNM-Screen's MSE per iteration",
        "1 run per configuration (the papers plot one run; seeds as benchmarks/screening_tables.py's trial 0)",
        started,
    )
    md += [
        "How the curves are made: the docstring of benchmarks/screening_figures.py. The replayed final iterate "
        f"equals the solver's to {max(checks):.1e} (max abs difference over all runs). Points: "
        f"`{date}-figures.csv`.",
        "",
        "## [KLR23] Fig. 2: Wolfe gap, non-private against private FW, non-private screening every iteration",
        "",
        "The paper: the gap evaluates to smaller values under non-private optimization, linear and logistic.",
        "",
        f"![[KLR23] Fig. 2]({date}-klr23-fig2.png)",
        "",
        "| loss | optimisation | calibration | final Wolfe gap | coordinates screened |",
        "|---|---|---|---|---|",
        *(f"| {lo} | {lab} | {cal} | {g:.4g} | {len(sc)} |" for lo, lab, cal, g, sc in finals),
        "",
        "## [KLR25] Fig. 2: RNM-Screen's training MSE per iteration",
        "",
        "The paper: the loss decreases on the data sets with larger d; on the small ones it changes little.",
        "",
        f"![[KLR25] Fig. 2]({date}-klr25-fig2.png)",
        "",
        "| data | d | calibration | MSE at the first point | at T/2 | at T |",
        "|---|---|---|---|---|---|",
        *mse_rows,
    ]
    (out / f"{date}-figures.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    print("\n".join(md))


if __name__ == "__main__":
    main()
