"""The run's progress display: its stages and the fit being computed, on the operator's terminal only,
with each fit's iterations relayed from its Dask worker; the dashboard's tasks named after stage and fit."""

from __future__ import annotations

import re
import sys
import time

import pytest
from flow_helpers import flow_env, small_config, write_config
from terminal import on_a_terminal

from dpdist.pipelines import fit_progress
from dpdist.utils import run_display

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def test_the_display_shows_stages_and_work_only_when_the_terminal_asked(capsys, monkeypatch):
    monkeypatch.delenv(run_display.ENV, raising=False)
    with run_display.showing(["ingest", "train", "report"]):
        run_display.stage("train")
        run_display.work("train dp-sgd at epsilon=1", 3, 10)
        assert run_display.console() is None
    assert capsys.readouterr().err == ""
    monkeypatch.setenv(run_display.ENV, "100")
    with run_display.showing(["ingest", "train", "report"]):
        run_display.stage("train")
        run_display.work("train dp-sgd at epsilon=1", 3, 10)
        run_display.work("train dp-sgd at epsilon=1", 7)  # the same line: its total is kept
        assert run_display.console() is not None
        run_display.console().print("a log line")
        run_display.work("train fast-dp-fw at epsilon=1")  # a new line: no total yet
    shown = _ANSI.sub("", capsys.readouterr().err)
    assert "dpdist run: train" in shown and "1/3" in shown and "a log line" in shown
    assert "train dp-sgd at epsilon=1" in shown and "7/10" in shown and "train fast-dp-fw" in shown
    assert run_display.console() is None  # gone with the block


def test_a_workers_fit_progress_reaches_the_display(monkeypatch):
    from distributed import Client, LocalCluster

    seen: list[tuple[str, int, int]] = []
    monkeypatch.setenv(run_display.ENV, "100")
    monkeypatch.setattr(run_display, "work", lambda what, done=None, total=None: seen.append((what, done, total)))

    def fit(show: bool) -> int:
        progress = fit_progress.reporter("train x", show)
        if progress is None:
            return 0
        for t in range(1, 11):
            progress(t, 10)
        return 1

    with LocalCluster(n_workers=1, processes=False, dashboard_address=None) as cluster, Client(cluster) as client:
        with fit_progress.relay(client) as show:  # the terminal asked, but no display is live: nothing is sent
            assert not show
        with run_display.showing(["train"]), fit_progress.relay(client) as show:
            assert show and client.submit(fit, show, pure=False).result() == 1
            deadline = time.time() + 10
            while ("train x", 10, 10) not in seen and time.time() < deadline:
                time.sleep(0.05)
        assert ("train x", 10, 10) in seen  # the last one always goes; the others at most 4 a second
        assert client.submit(fit, False, pure=False).result() == 0  # nothing shown: nothing sent
    assert fit_progress.reporter("train x", True) is None  # not on a worker


@pytest.mark.timeout(420)
def test_dpdist_run_on_a_terminal_shows_its_stages_and_fits(tmp_path):
    """``dpdist run`` as a user runs it, its output on a pseudo-terminal: the stage bar and each fit's
    line (the supervised child draws through its pipe); the Dask tasks are named after stage and fit."""
    cfg = small_config(
        tmp_path,
        select={"methods": ["dp-sis"]},
        train={"methods": ["dp-sgd"], "epsilon": [1.0], "iters": 300},
    )
    path = write_config(tmp_path, cfg)
    env = {**flow_env(tmp_path, None), "COLUMNS": "120", "TERM": "xterm"}
    shown = _ANSI.sub("", on_a_terminal([sys.executable, "-m", "dpdist.cli", "run", str(path)], env, tmp_path))
    for stage in ("ingest", "select", "train", "evaluate", "report"):
        assert f"dpdist run: {stage}" in shown, stage
    assert "train dp-sgd at epsilon=1" in shown and re.search(r"\b(\d+)/\1\b", shown)
    assert "/5" in shown  # the stage bar's count


def test_the_display_draws_clocks_only_when_timings_are_asked_and_never_the_searchs(capsys, monkeypatch):
    from dpdist.utils import operator_log

    monkeypatch.setenv(run_display.ENV, "100")
    clock = re.compile(r"\d:\d\d:\d\d")
    for timings in ("", "1"):
        monkeypatch.setenv(operator_log.ON_ENV, timings)
        with run_display.showing(["ingest", "train", "report"]):
            run_display.stage("train")
            run_display.work("train dp-sgd at epsilon=1", 3, 10)
            run_display.work("train private-search at epsilon=1", timed=False)
        lines = re.split(r"[\r\n]+", _ANSI.sub("", capsys.readouterr().err))  # every frame drawn
        stage = [ln for ln in lines if "dpdist run: train" in ln]
        fit = [ln for ln in lines if "train dp-sgd" in ln]
        search = [ln for ln in lines if "private-search" in ln]
        assert stage and fit and search
        first_search = next(i for i, ln in enumerate(lines) if "private-search" in ln)
        assert all(bool(clock.search(ln)) == bool(timings) for ln in [stage[0], *fit])  # a clock only with -v
        # the search's line never has one, and from the frame that draws it the run's clock stops for good
        # (the run's elapsed time would tell the search's duration)
        assert lines[first_search - 1] in stage and not any(clock.search(ln) for ln in lines[first_search - 1 :])
