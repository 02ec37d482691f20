"""The run report: ``report.md`` with PNG plots, ``results.json``, and Prefect artifacts.

Everything in the report is a release (selections, models, noisy row counts, private
evaluations, the ledger's charges) or public (the config, the feature dimension, a test set
the user declared public); nothing here reads the data. The dataset is named by its public
name, never by its content hash; there are no exact row counts and no timings.
"""

from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from prefect.artifacts import create_markdown_artifact, create_table_artifact  # noqa: E402

from dpdist.data.store import columns_named  # noqa: E402
from dpdist.flows.config import RunConfig  # noqa: E402
from dpdist.privacy.accountant import UNCOVERED_MARK, Accountant, spend_text  # noqa: E402
from dpdist.utils.io import write_bytes_atomic, write_json_atomic, write_text_atomic  # noqa: E402

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


def _save(fig: Any, path: Path) -> None:
    """A figure as PNG, written atomically (the report embeds it: never half a file)."""
    buf = io.BytesIO()
    fig.savefig(buf, dpi=110, format="png")
    plt.close(fig)
    write_bytes_atomic(path, buf.getvalue())


def _plot_privacy_utility(models: list[dict], reference: dict[str, Any] | None, path: Path) -> bool:
    if not models:
        return False
    classification = "accuracy" in models[0]
    metrics = ["accuracy", "auc"] if classification else ["r2"]
    fig, axes = plt.subplots(1, len(metrics), figsize=(4.6 * len(metrics), 3.6), squeeze=False)
    for ax, m in zip(axes[0], metrics):
        for method in sorted({r["method"] for r in models}):
            pts = sorted((r["epsilon"], r[m]) for r in models if r["method"] == method and r.get(m) is not None)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=method)
        if reference:  # exact, on public (synthetic) data only
            if reference.get("ceiling", {}).get(m) is not None:
                ax.axhline(
                    reference["ceiling"][m],
                    color="tab:red",
                    ls="-",
                    lw=1,
                    label=f"non-private ceiling ({reference['ceiling']['what']})",
                )
            ax.axhline(reference["non_private"][m], color="k", ls="--", lw=1, label="non-private FW")
            ax.axhline(reference["baseline"][m], color="grey", ls=":", lw=1, label=reference["baseline"]["what"])
        ax.set_ylim(0.0, 1.0) if classification else ax.set_ylim(top=1.0)  # the whole scale: no exaggeration
        ax.set_xscale("log")
        ax.set_xlabel("epsilon (per model)")
        ax.set_ylabel(f"held-out {m}" + (" (private)" if models[0]["private"] else ""))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle("privacy-utility")
    fig.tight_layout()
    _save(fig, path)
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
    _save(fig, path)
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
    _save(fig, path)
    return True


def _ledger_rows(history: list[dict], run_keys: set[str], released_now: set[str]) -> list[list[Any]]:
    rows = []
    for h in history:
        form = f"rho={h['rho']:.4g}" if h["rho"] is not None else h["loss"]
        state = "released" if h["key"] in released_now else ("replayed" if h["key"] in run_keys else "")
        covered = "yes" if h["covered"] else UNCOVERED_MARK
        rows.append([h["time"], h["mechanism"], h["epsilon"], h["delta"], form, covered, h["key"], state])
    return rows


def _split_note(test_fraction: float, counted: bool) -> str:
    """Why the realised split can differ from ``test_fraction`` (public: the config and the rule)."""
    if test_fraction == 0:
        return "No split: the models are evaluated on the declared-public test file."
    see = (
        "the noisy counts above show the realised sizes"
        if counted
        else "release noisy row counts (data.count_epsilon > 0) to see the realised sizes"
    )
    return (
        f"The keyed train/test split sends identical records to the same side (that keeps it private): on data "
        f"with many duplicates the realised test fraction can be far from the configured {test_fraction:g}; "
        f"{see}."
    )


def write_report(
    cfg: RunConfig,
    flow_run: str,
    stores: dict[str, Any],
    selection: dict[str, Any] | None,
    models: list[dict[str, Any]] | None,
    evaluation: dict[str, Any],
) -> dict[str, str]:
    """Write report.md, its plots and results.json into ``cfg.output``; publish the artifacts."""
    out = Path(cfg.output)
    out.mkdir(parents=True, exist_ok=True)
    acc = Accountant(cfg.ledger)
    status = acc.status(stores["dataset"]).to_dict()
    run_keys, released_now = _run_keys(stores, selection, models, evaluation)
    mevals = evaluation["models"]
    plots = {
        "privacy_utility": _plot_privacy_utility(mevals, evaluation.get("reference"), out / "privacy_utility.png"),
        "convergence": _plot_convergence([m for m in mevals if m["curve_iterations"]], out / "convergence.png"),
        "selected_features": _plot_features(
            evaluation["selections"], evaluation["true_support"], out / "selected_features.png"
        ),
    }
    counts = (stores.get("counts") or {}).get("result") or {}
    history = [r.to_dict(status["dataset"]) for r in acc.history(stores["dataset"])]
    md = [
        f"# dpdist run `{cfg.name}`",
        "",
        f"Prefect flow run `{flow_run}`; config `{cfg.source_file}`; ledger `{acc.path}`.",
        "",
        *_data_section(cfg, status, stores["source"], counts),
    ]
    if selection:
        md += _selection_section(cfg, selection, evaluation, plots["selected_features"])
    if mevals:
        md += _models_section(mevals, evaluation.get("reference"), plots["convergence"])
    md += _ledger_section(status, history, run_keys, released_now)  # the results first, then what they cost
    if run_keys - released_now:
        md += [
            "Releases marked *replayed* were recorded by an earlier run of the same config: this run returned "
            "the recorded results, so its own noise (and any `--seed`) did not apply to them.",
            "",
        ]
    report = write_text_atomic(out / "report.md", "\n".join(md))
    html = write_text_atomic(out / "report.html", render_html(cfg.name, "\n".join(md), out))
    results = {
        "name": cfg.name,
        "flow_run": flow_run,
        "dataset": status["dataset"],
        "stores": {k: stores[k]["store"] for k in ("source", "train", "test", "public_test") if stores.get(k)},
        "row_counts": counts or None,
        "selection": selection,
        "models": [{k: v for k, v in m.items() if k != "result"} for m in models or []],
        "evaluation": evaluation,
        "ledger": {"path": str(acc.path), **status},
        "config": cfg.to_dict(),
    }
    write_json_atomic(out / "results.json", results)
    create_markdown_artifact(key="dpdist-report", markdown="\n".join(md), description=f"dpdist run {cfg.name}")
    if mevals:
        cols = _metric_columns(mevals)
        create_table_artifact(
            key="dpdist-models",
            description="released models, held-out metrics",
            table=[
                {k: r.get(k) for k in ("method", "epsilon", "nnz_weights", "density", *_shown(cols))} for r in mevals
            ],
        )
    return {"report": str(report), "html": str(html), "results": str((out / "results.json").resolve())}


def _run_keys(
    stores: dict[str, Any],
    selection: dict[str, Any] | None,
    models: list[dict[str, Any]] | None,
    evaluation: dict[str, Any],
) -> tuple[set[str], set[str]]:
    """(the keys of this run's releases, those it released itself rather than replayed)."""
    recs = list((selection or {}).values()) + list(models or []) + ([stores["counts"]] if stores.get("counts") else [])
    recs += [
        {"key": m["evaluation_key"], "replayed": m["replayed"]} for m in evaluation["models"] if m.get("evaluation_key")
    ]
    return {r["key"] for r in recs}, {r["key"] for r in recs if not r["replayed"]}


def _data_section(cfg: RunConfig, status: dict[str, Any], src: dict[str, Any], counts: dict[str, Any]) -> list[str]:
    """The data: its public name, width and task, the released noisy row counts, the split."""
    return [
        "## Data",
        "",
        f"Dataset `{status['dataset']}` (its public name in the ledger), {src['n_features']} features, task "
        f"{src['task']}. Neighbouring relation: one record added or removed; the number of records is private.",
        "",
        (
            _table(["part", "rows (noisy, released)"], [[k, round(v)] for k, v in counts.items()])
            if counts
            else "No row counts were released (data.count_epsilon = 0)."
        ),
        "",
        _split_note(cfg.data.test_fraction, bool(counts)),
        "",
    ]


def _ledger_section(
    status: dict[str, Any], history: list[dict[str, Any]], run_keys: set[str], released_now: set[str]
) -> list[str]:
    """The dataset's spend and every charge of its ledger, this run's marked."""
    return [
        "## Privacy ledger",
        "",
        f"{status['releases']} releases in all: {spend_text(status, '**')}.",
        "",
        _table(
            ["date", "mechanism", "epsilon", "delta", "loss", "covered", "key", "this run"],
            _ledger_rows(history, run_keys, released_now),
        ),
        "",
    ]


def _file_ids(rec: dict[str, Any]) -> list[Any]:
    """A selection's features as the source file names them (column names, or indices in the file's
    base); a run recorded before file ids were kept shows its store columns."""
    ids = rec.get("file_columns") or {}
    return list(ids.get("names") or ids.get("ids") or rec["features"])


def _features_heading(selection: dict[str, Any]) -> str:
    ids = next((r.get("file_columns") for r in selection.values() if r.get("file_columns")), None)
    if ids is None:
        return "features (store columns, zero-based)"
    return "features" if "names" in ids else f"features ({columns_named(ids)})"


def _selection_section(
    cfg: RunConfig, selection: dict[str, Any], evaluation: dict[str, Any], plotted: bool
) -> list[str]:
    """The released selections (and their recall of a public synthetic truth)."""
    truth = evaluation["true_support"]
    md = [
        "## Selected features",
        "",
        _table(
            ["method", "k", "epsilon", "replayed", "true-support recall", _features_heading(selection)],
            [
                [
                    m,
                    rec["k"],
                    rec["epsilon"],
                    rec["replayed"],
                    _recall(evaluation["selections"][m]["true_support_recall"], truth),
                    ", ".join(map(str, _file_ids(rec))),
                ]
                for m, rec in selection.items()
            ],
        ),
        "",
    ]
    if truth:
        md += [_recall_note(cfg, len(truth)), ""]
    if plotted:
        md += ["![selected features](selected_features.png)", ""]
    return md


def _metric_columns(mevals: list[dict[str, Any]]) -> list[str]:
    """The held-out metrics reported: accuracy and AUC, or MSE and R^2."""
    return ["accuracy", "auc"] if "accuracy" in mevals[0] else ["mse", "r2"]


def _model_rows(mevals: list[dict[str, Any]], cols: list[str], ref: dict[str, Any] | None) -> list[list[Any]]:
    """One row per evaluated model, then the exact references of a public synthetic set."""
    interval = "accuracy_interval" if cols[0] == "accuracy" else "mse_interval"
    rows = [
        [
            f"{r['method']} ({r['learner']})" if r.get("learner") else r["method"],
            r["epsilon"],
            r["charged_epsilon"],
            r["delta"],
            r[cols[0]],
            *(r.get(c) for c in _beside(cols)),
            "swamped by the noise"
            if r.get(f"{cols[1]}_swamped")
            else _with_interval(r[cols[1]], r.get(f"{cols[1]}_interval")),
            _interval(r.get(interval), r.get("noise_swamps")),
            r["nnz_weights"],
            r.get("density"),
            r["evaluation_epsilon"],
        ]
        for r in mevals
    ]
    if not ref:
        return rows
    references = [(f"{ref['ceiling']['what']} (non-private ceiling)", ref["ceiling"])] if ref.get("ceiling") else []
    references += [
        ("non-private FW (reference)", ref["non_private"]),
        (f"{ref['baseline']['what']} (reference)", ref["baseline"]),
    ]
    return rows + [
        [name, None, None, None, *[r.get(c) for c in _shown(cols)], "exact", None, None, None] for name, r in references
    ]


def _beside(cols: list[str]) -> list[str]:
    """The metrics shown beside the first one: a classifier's balanced accuracy beside its accuracy."""
    return ["balanced_accuracy"] if cols[0] == "accuracy" else []


def _shown(cols: list[str]) -> list[str]:
    """The metric columns of the table, in order."""
    return [cols[0], *_beside(cols), cols[1]]


def _warnings(mevals: list[dict[str, Any]]) -> list[str]:
    """A line per model whose released metrics flag it (one class predicted, a loss that grew)."""
    from dpdist.evaluation import metric_warnings

    return [f"- **{r['method']}** (epsilon {r['epsilon']:g}): {w}" for r in mevals for w in metric_warnings(r)]


def _models_section(mevals: list[dict[str, Any]], ref: dict[str, Any] | None, convergence: bool) -> list[str]:
    """The models' held-out metrics (private or on a public test set), the references, the plots."""
    cols = _metric_columns(mevals)
    metric = cols[0]
    private = all(m["private"] for m in mevals)
    simulated = private and any(m.get(f"{cols[1]}_interval") for m in mevals)  # replayed older rows lack it
    md = [
        "## Models (held-out metrics)",
        "",
        _table(
            [
                "method",
                "epsilon",
                "charged epsilon",
                "delta",
                cols[0],
                *(c.replace("_", " ") for c in _beside(cols)),
                f"{cols[1]} (noise's 95% interval, simulated)" if simulated else cols[1],
                f"{metric}: noise's 95% interval",
                "non-zeros",
                "density",
                "evaluation epsilon",
            ],
            _model_rows(mevals, cols, ref),
        ),
        "",
        *(["Warnings from the released metrics:", "", *warned, ""] if (warned := _warnings(mevals)) else []),
        "Sparsity: non-zeros is the number of released non-zero weights, density their fraction of the "
        "features (select-train and dp-iht release sparse models by construction; screened models, "
        "rnm-screen / adp-screen, zero coordinates during training).",
        "",
        (
            "References (exact: the data is a public synthetic set, so they cost no privacy): the non-private "
            f"ceiling every learner is measured against ({(ref.get('ceiling') or {}).get('what', 'absent')}), a "
            f"non-private fast FW fit at the same lambda and T, and {ref['baseline']['what']}."
            if ref
            else "References (a non-private fit, the majority class): absent -- they would be exact statistics of "
            "private data."
        ),
        "",
        (
            "Held-out metrics and the convergence curve are differentially private releases (Laplace noise on "
            "the test rows' class-wise margin histograms and clipped losses), charged per model as the "
            "evaluation epsilon above."
            if private
            else "Held-out metrics are exact, on the test set the config declares public (evaluate.public_test)."
        ),
        "",
        "![privacy-utility](privacy_utility.png)",
        "",
    ]
    if convergence:
        md += ["![convergence](convergence.png)", ""]
    return md


def render_html(title: str, markdown_text: str, folder: Path) -> str:
    """The report as one self-contained HTML page: the markdown rendered, its PNG plots embedded."""
    import base64
    import html as html_lib
    import re

    import markdown

    body = markdown.markdown(markdown_text, extensions=["tables"])

    def embed(match: re.Match) -> str:
        png = folder / match.group(2)
        data = base64.b64encode(png.read_bytes()).decode() if png.is_file() else ""
        return f'<img alt="{match.group(1)}" src="data:image/png;base64,{data}">'

    body = re.sub(r'<img alt="([^"]*)" src="([^"]+\.png)"\s*/?>', embed, body)
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>{html_lib.escape(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 1100px; margin: 2em auto; padding: 0 1em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; font-size: 0.85em; }}
th, td {{ border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; }}
th {{ background: #f2f2f2; }}
img {{ max-width: 100%; }}
code {{ background: #f6f6f6; padding: 0 0.2em; }}
</style></head>
<body>
{body}
</body></html>
"""


def _with_interval(value: float | None, interval: list[float] | None) -> Any:
    """AUC or R^2, with its noise's simulated 95% interval when it is private (post-processing)."""
    if value is None or interval is None:
        return value
    return f"{value:.4f} [{interval[0]:.3f}, {interval[1]:.3f}]"


def _interval(interval: list[float] | None, swamped: bool | None) -> str:
    """A private metric's noise interval (public: from the noisy counts and the noise scale)."""
    if interval is None:
        return "exact"
    return f"[{interval[0]:.3f}, {interval[1]:.3f}]" + (" (the noise swamps this model's metrics)" if swamped else "")


def _recall_note(cfg: RunConfig, n_true: int) -> str:
    """Why a selection's recall is what it is, in one line (public parameters only)."""
    k, eps = cfg.select.k, cfg.select.epsilon
    return (
        f"Why the recall: each method releases k = {k} features at epsilon = {eps:g}, so a private top-k pays "
        f"for every one of its k choices (DP-SIS's canonical top-k draws noise of scale ~2k/epsilon = "
        f"{2 * k / eps:.0f} on scores |x_j^T y|, two-stage's vote is between blocks of rows): of the {n_true} "
        "true features it finds those whose scores stand above that noise; more epsilon, fewer k or more rows "
        "find more. select-train's screening (Gaussian noise on the whole score vector, one draw for all k) "
        "feeds its model instead."
    )


def _recall(recall: float | None, truth: list[int] | None) -> str:
    """A selection's recall of the true support, "–" without one (private data has none)."""
    return "–" if recall is None or truth is None else f"{recall:.2f} of {len(truth)}"
