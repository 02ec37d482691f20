"""The run's progress display: no clock holds a secret duration."""

from __future__ import annotations

from dpdist.utils import operator_log, run_display


def _fields(bar, task_id: int) -> dict:
    return next(t for t in bar.tasks if t.id == task_id).fields


def test_a_secret_release_stops_the_run_clock_too(monkeypatch) -> None:
    """The search's line draws no clock, and neither does the run's stages line from then on: its
    running total would hold the search's duration (read off by subtraction)."""
    monkeypatch.setenv(run_display.ENV, "100")
    monkeypatch.setenv(operator_log.ON_ENV, "1")  # timings asked (dpdist -v)
    with run_display.showing(["ingest", "train", "report"]):
        live = run_display._live
        bar, stages_task = live["bar"], live["stages_task"]
        run_display.stage("train")
        run_display.work("train dp-sgd at epsilon=1")
        assert not _fields(bar, stages_task).get("untimed")  # timed while nothing is secret
        run_display.work("train private-search at epsilon=1", timed=False)
        assert _fields(bar, live["work"][1])["untimed"]
        run_display.stage("report")
        run_display.work("evaluate dp-sgd")
        assert _fields(bar, stages_task)["untimed"]  # and stays so
