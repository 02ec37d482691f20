"""The run report: ``report.md`` with PNG plots, ``results.json``, and Prefect artifacts.

Everything in the report is a release (selections, models, the ledger's charges) or a
held-out evaluation of one; nothing here reads the training data.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402

from dpdist.privacy.accountant import Accountant  # noqa: E402
from flows.config import RunConfig  # noqa: E402
from dpdist.utils.io import write_json_atomic, write_text_atomic  # noqa: E402

__all__ = ["write_report"]


def _fmt(v: Any, digits: int = 4) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return "nan" if math.isnan(v) else f"{v:.{digits}g}"
    return str(v)


def _table(header: list[str], rows: list[list[Any]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_fmt(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _plot_privacy_utility(models: list[dict], path: Path) -> bool:
    if not models:
        return False
    metric = "accuracy" if "accuracy" in models[0] else "mse"
    fig, axes = plt.subplots(1, 2 if metric == "accuracy" else 1, figsize=(9 if metric == "accuracy" else 5, 3.6))
    axes = list(axes) if metric == "accuracy" else [axes]
    for ax, m in zip(axes, [metric, "auc"] if metric == "accuracy" else [metric]):
        for method in sorted({r["method"] for r in models}):
            pts = sorted((r["epsilon"], r[m]) for r in models if r["method"] == method)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=method)
        ax.set_xscale("log")
        ax.set_xlabel("epsilon (per model)")
        ax.set_ylabel(f"held-out {m}")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.suptitle("privacy-utility")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot_convergence(models: list[dict], path: Path) -> bool:
    if not models:
        return False
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    for r in models:
        ax.plot(r["curve_iterations"], r["curve_loss"], label=f"{r['method']} eps={r['epsilon']:g}")
    ax.set_xscale("log")
    ax.set_xlabel("iteration")
    ax.set_ylabel("held-out mean loss")
    ax.set_title("convergence (iterates rebuilt from the released path)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _plot_features(selections: dict[str, Any], truth: list[int] | None, path: Path) -> bool:
    if not selections:
        return False
    fig, ax = plt.subplots(figsize=(7, 1.2 + 0.5 * (len(selections) + bool(truth))))
    rows = list(selections.items()) + ([("true support", {"features": truth})] if truth else [])
    for i, (name, rec) in enumerate(rows):
        ax.scatter(rec["features"], [i] * len(rec["features"]), marker="|", s=200)
    ax.set_yticks(range(len(rows)), [r[0] for r in rows])
    ax.set_xlabel("feature index")
    ax.set_title("selected features")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write_report(cfg: RunConfig, flow_run: str, stores: dict[str, Any], selection: dict[str, Any] | None,
                 models: list[dict] | None, evaluation: dict[str, Any]) -> dict[str, str]:
    """Write report.md, its plots and results.json into ``cfg.output``; publish the artifacts."""
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    dataset = stores["source"]["dataset_id"]
    acc = Accountant(cfg.ledger)
    status = acc.status(dataset).to_dict()
    history = [r.to_dict() for r in acc.history(dataset)]
    run_keys = {rec["key"] for rec in (selection or {}).values()} | {m["key"] for m in (models or [])}
    mevals = evaluation["models"]
    plots = {"privacy_utility": _plot_privacy_utility(mevals, out / "privacy_utility.png"),
             "convergence": _plot_convergence(mevals, out / "convergence.png"),
             "selected_features": _plot_features(evaluation["selections"], evaluation["true_support"],
                                                 out / "selected_features.png")}
    src = stores["source"]
    md = [f"# dpdist run `{cfg.name}`", "",
          f"Prefect flow run `{flow_run}`; config `{cfg.source_file}`; ledger `{acc.path}`.", "",
          "## Data", "",
          _table(["store", "rows", "features", "task"],
                 [[Path(s["store"]).name, s["n_rows"], s["n_features"], s["task"]]
                  for s in (src, stores["train"], stores["test"])]), "",
          f"Dataset id (charged for every release): `{dataset}`. Row counts are treated as public, as the "
          "mechanisms' sensitivities (which use n) and the seeds do; no other statistic of the data is shown.", "",
          "## Privacy ledger", "",
          f"Budget epsilon={status['epsilon_total']:g}, delta={status['delta_total']:g}; spent "
          f"epsilon={status['epsilon_spent']:.6g}, delta={status['delta_spent']:.3g}; "
          f"{status['releases']} releases in all.", "",
          _table(["time", "mechanism", "epsilon", "delta", "key", "this run"],
                 [[h["time"], h["mechanism"], h["epsilon"], h["delta"], h["key"], "yes" if h["key"] in run_keys else ""]
                  for h in history]), ""]
    if selection:
        md += ["## Selected features", "",
               _table(["method", "k", "epsilon", "replayed", "true-support recall", "features"],
                      [[m, rec["k"], rec["epsilon"], rec["replayed"],
                        evaluation["selections"][m]["true_support_recall"],
                        ", ".join(map(str, rec["features"]))] for m, rec in selection.items()]), ""]
        if plots["selected_features"]:
            md += ["![selected features](selected_features.png)", ""]
    if mevals:
        metric = "accuracy" if "accuracy" in mevals[0] else "mse"
        cols = ["accuracy", "auc"] if metric == "accuracy" else ["mse"]
        md += ["## Models (held-out metrics)", "",
               _table(["method", "epsilon", "charged epsilon", "delta", *cols, "non-zeros", "ms/iteration"],
                      [[r["method"], r["epsilon"], r["charged_epsilon"], r["delta"], *[r[c] for c in cols],
                        r["nnz_weights"], 1e3 * r["seconds_per_iter"]] for r in mevals]), "",
               "![privacy-utility](privacy_utility.png)", "", "![convergence](convergence.png)", ""]
    md += ["Held-out metrics are computed from the released models on the test rows and are not noised "
           "(as in the seeds' tables); count them as published.", ""]
    report = write_text_atomic(out / "report.md", "\n".join(md))
    results = {"name": cfg.name, "flow_run": flow_run, "dataset_id": dataset, "stores": stores,
               "selection": selection, "models": [{k: v for k, v in m.items() if k != "result"} for m in models or []],
               "evaluation": evaluation, "ledger": {"path": str(acc.path), **status}, "config": cfg.to_dict()}
    write_json_atomic(out / "results.json", results)
    create_markdown_artifact(key="dpdist-report", markdown="\n".join(md), description=f"dpdist run {cfg.name}")
    if mevals:
        create_table_artifact(key="dpdist-models", description="released models, held-out metrics",
                              table=[{k: r[k] for k in ("method", "epsilon", "nnz_weights", *cols)} for r in mevals])
    return {"report": str(report), "results": str((out / "results.json").resolve())}
