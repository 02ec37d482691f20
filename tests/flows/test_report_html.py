"""The HTML report, rendered in a real headless browser (Debian's Chromium) and inspected."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from browser import HEADLESS, find_chromium

from dpdist.flows.config import load_config
from dpdist.flows.report import write_report
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss

CHROMIUM = find_chromium()


def _report(tmp_path: Path, replayed: bool = False) -> Path:
    """A report from recorded releases, as the flow's report stage writes it (no cluster needed).

    ``replayed``: the run found every release recorded by an earlier run of its config."""
    ledger = tmp_path / "l.sqlite"
    acc = Accountant(ledger)
    acc.init_budget("hash", 10.0, 1e-6, name="demo-data")
    sel = acc.release(
        "hash", Charge(PrivacyLoss.bounded_range(0.5), "dp_sis/canonical_topk"), "t/select/dp-sis/x", lambda: [1, 5, 9]
    )
    cfg = load_config(None, {"output": str(tmp_path / "out"), "ledger": str(ledger)})
    selection = {"dp-sis": {"key": "t/select/dp-sis/x", "replayed": replayed, "epsilon": 0.5, "features": sel, "k": 3}}
    curve = {"curve_iterations": [1, 10, 100], "curve_loss": [0.69, 0.6, 0.55], "private": True}
    models = [
        {
            "key": f"t/train/fast-dp-fw/{e}",
            "replayed": replayed,
            "epsilon": e,
            "delta": 1e-7,
            "form": "zcdp",
            "method": "fast-dp-fw",
            "target_epsilon": e,
            "features": "all",
            "lam": 50.0,
            "iters": 100,
            "result": {"indices": [1], "values": [0.5], "path": [2], "iterations": 100},
        }
        for e in (1.0, 3.0)
    ]
    mevals = [
        {
            "method": "fast-dp-fw",
            "epsilon": e,
            "charged_epsilon": e,
            "delta": 1e-7,
            "form": "zcdp",
            "key": f"t/train/fast-dp-fw/{e}",
            "replayed": replayed,
            "features": "all",
            "nnz_weights": 1,
            "iterations": 100,
            "evaluation_key": None,
            "evaluation_epsilon": 0.1,
            "accuracy": 0.6 + e / 20,
            "auc": 0.65 + e / 20,
            "balanced_accuracy": 0.55 + e / 20,
            "predicts_one_class": e == 1.0,
            "rows": 4000.0,
            **curve,
        }
        for e in (1.0, 3.0)
    ]
    evaluation = {
        "selections": {"dp-sis": {"features": sel, "true_support_recall": 2 / 3}},
        "models": mevals,
        "true_support": [1, 5, 7],
        "reference": {
            "non_private": {"accuracy": 0.8, "auc": 0.88},
            "baseline": {"accuracy": 0.52, "auc": 0.5, "what": "the majority class"},
        },
    }
    stores = {
        "dataset": "hash",
        "name": "demo-data",
        "counts": None,
        "source": {"store": "s", "n_features": 47236, "task": "binary"},
    }
    from unittest import mock

    with (
        mock.patch("dpdist.flows.report.create_markdown_artifact"),
        mock.patch("dpdist.flows.report.create_table_artifact"),
    ):
        files = write_report(cfg, "flow-run-id", stores, selection, models, evaluation)
    return Path(files["html"])


def test_report_html_is_one_self_contained_page(tmp_path: Path) -> None:
    html = _report(tmp_path).read_text()
    assert html.startswith("<!doctype html>") and "<table>" in html
    assert html.count('src="data:image/png;base64,') == 3 and '.png"' not in html  # plots embedded, no links
    assert "hash" not in html.replace("hashes", "")  # the content hash never appears; the public name does
    assert "demo-data" in html and "non-private FW (reference)" in html


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed here (apt-get install chromium)")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    page = _report(tmp_path)
    # the DOM after rendering: every table and image is there, and every embedded image decoded
    probe = page.with_name("probe.html")
    probe.write_text(
        page.read_text().replace(
            "</body>",
            """<script>
window.onload = () => {
  const imgs = [...document.images];
  document.title = JSON.stringify({tables: document.querySelectorAll("table").length,
    images: imgs.length, decoded: imgs.filter(i => i.complete && i.naturalWidth > 100).length,
    headings: [...document.querySelectorAll("h2")].map(h => h.textContent)});
};
</script></body>""",
        )
    )
    out = subprocess.run(
        [
            CHROMIUM,
            *HEADLESS,
            f"--user-data-dir={tmp_path / 'profile'}",
            "--dump-dom",
            "--virtual-time-budget=5000",
            probe.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    title = out.stdout.split("<title>", 1)[1].split("</title>", 1)[0]
    seen = json.loads(title.replace("&quot;", '"'))
    assert seen["tables"] >= 3 and seen["images"] == seen["decoded"] == 3
    assert {"Data", "Privacy ledger", "Selected features", "Models (held-out metrics)"} <= set(seen["headings"])
    heads = seen["headings"]  # the results first, then what they cost
    assert heads.index("Models (held-out metrics)") < heads.index("Privacy ledger") == len(heads) - 1
    # and a screenshot that is a real picture of the page
    shot = tmp_path / "report.png"
    subprocess.run(
        [
            CHROMIUM,
            *HEADLESS,
            f"--user-data-dir={tmp_path / 'profile2'}",
            f"--screenshot={shot}",
            "--window-size=1200,1600",
            page.as_uri(),
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 50_000


def _markdown(html_path: Path) -> str:
    return html_path.with_name("report.md").read_text()


@pytest.mark.parametrize("replayed", [False, True])
def test_this_run_column_and_the_replay_note(tmp_path: Path, replayed: bool) -> None:
    md = _markdown(_report(tmp_path, replayed))
    (row,) = [ln for ln in md.splitlines() if "t/select/dp-sis/x" in ln]
    assert row.rstrip(" |").endswith("replayed" if replayed else "released")
    # a replayed release did not draw this run's noise, nor use its --seed: the report says so
    assert ("its own noise (and any `--seed`) did not apply" in md) == replayed


def test_support_recall_names_the_size_of_the_true_support(tmp_path: Path) -> None:
    md = _markdown(_report(tmp_path))
    (row,) = [ln for ln in md.splitlines() if ln.startswith("| dp-sis |")]
    assert "| 0.67 of 3 |" in row


def test_accuracy_plot_has_the_references_on_the_full_scale(tmp_path: Path, monkeypatch) -> None:
    import dpdist.flows.report

    figures = []
    close = dpdist.flows.report.plt.close
    monkeypatch.setattr(dpdist.flows.report.plt, "close", lambda fig=None: (figures.append(fig), close(fig)))
    _report(tmp_path)
    (fig,) = [f for f in figures if f.get_suptitle() == "privacy-utility"]
    for ax, metric in zip(fig.axes, ("accuracy", "auc")):
        labels = [ln.get_label() for ln in ax.get_lines()]
        assert {"fast-dp-fw", "non-private FW", "the majority class"} <= set(labels), labels
        assert ax.get_ylim() == (0.0, 1.0) and metric in ax.get_ylabel()


def test_published_release_times_carry_no_time_of_day(tmp_path: Path) -> None:
    """Charge times a second or less apart would publish how long the private computation between
    two charges took (a solver's time): the report and the CLI's records give the date only."""
    import re

    md = _markdown(_report(tmp_path))
    assert not re.search(r"\d{2}:\d{2}:\d{2}", md), md
    acc = Accountant(tmp_path / "l.sqlite")
    (rec,) = acc.history("hash")
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", rec.to_dict("demo-data")["time"])
    assert rec.time == rec.to_dict("demo-data")["time"]  # the ledger itself stores a release's date only


def test_the_models_table_shows_balanced_accuracy_and_the_released_metrics_warnings(tmp_path: Path) -> None:
    md = _markdown(_report(tmp_path))
    (head,) = [ln for ln in md.splitlines() if ln.startswith("| method | epsilon | charged epsilon |")]
    assert "| accuracy | balanced accuracy | auc" in head
    rows = [ln for ln in md.splitlines() if ln.startswith("| fast-dp-fw |")]
    assert len(rows) == 2 and "| 0.75 | 0.7 | 0.8 |" in rows[1]  # accuracy, balanced accuracy, AUC at epsilon 3
    (warning,) = [ln for ln in md.splitlines() if ln.startswith("- **fast-dp-fw**")]
    assert warning.startswith("- **fast-dp-fw** (epsilon 1): the model predicts one class on the held-out rows")
