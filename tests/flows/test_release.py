"""The raw tasks retry what the machine may cause, never dpdist's own (data- or config-made) refusals; the
central release times what it computes for the operator, never a release whose duration is secret."""

from __future__ import annotations

import re

import pytest
from prefect.states import Failed

import dpdist.flows.ingest
import dpdist.flows.select
from dpdist.exceptions import ParameterError, SolverAborted
from dpdist.flows.release import RAW, _not_a_data_error


@pytest.mark.parametrize(
    "exc, retried",
    [
        (OSError("disk"), True),
        (MemoryError(), True),
        (ImportError("numba"), True),
        (__import__("distributed").client.ClosedClientError(), True),
        (ParameterError("a bound"), False),
        (SolverAborted("limit"), False),
        (KeyError("k"), False),
        (ValueError("Found array with 0 sample(s)"), False),
    ],
)
def test_raw_tasks_retry_only_what_the_data_cannot_cause(exc: Exception, retried: bool) -> None:
    assert _not_a_data_error(None, None, Failed(data=exc)) is retried


def test_every_raw_task_with_retries_has_the_condition() -> None:
    tasks = [
        dpdist.flows.ingest.make_source,
        dpdist.flows.ingest.public_test,
        dpdist.flows.ingest.split,
        dpdist.flows.select.xty_scores,
        dpdist.flows.select.two_stage_votes,
    ]
    assert all(t.retries >= 1 and t.retry_condition_fn is _not_a_data_error for t in tasks)
    assert RAW["retry_condition_fn"] is _not_a_data_error


class _Logger:
    """Prefect's run logger as the release task uses it: the lines its server would store."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, msg: str, *args: object) -> None:
        self.lines.append(msg % args)

    warning = info


@pytest.fixture()
def timings_on(tmp_path, monkeypatch):
    """Timings asked for (``dpdist -v``), into an operator log file too; Prefect's run logger collected."""
    from dpdist.utils import operator_log

    monkeypatch.setenv(operator_log.ON_ENV, "1")
    monkeypatch.setenv(operator_log.FILE_ENV, str(tmp_path / "operator.log"))
    logger = _Logger()
    monkeypatch.setattr("dpdist.flows.release.get_run_logger", lambda: logger)
    return logger


def test_a_release_whose_duration_is_secret_is_never_timed(tmp_path, capsys, timings_on):
    """The search's duration tells its number of runs K (Papernot-Steinke assume K secret): with timings
    on, every other release is timed for the operator, the search's never -- no line on the terminal, in
    the operator log or in Prefect's logger carries it."""
    from dpdist.flows.release import SECRET_DURATION, release
    from dpdist.privacy.accountant import Accountant
    from dpdist.privacy.loss import Charge, PrivacyLoss
    from dpdist.tuning import PrivateSearch, default_candidates

    ledger = str(tmp_path / "l.sqlite")
    Accountant(ledger).init_budget("d", 10.0, 1e-6, name="demo")
    search = PrivateSearch(candidates=default_candidates("binary"), epsilon=1.0).privacy_charge(1000)
    assert search.mechanism in SECRET_DURATION  # the search's own charge is the one never timed
    release.fn(ledger, "d", Charge(PrivacyLoss.laplace(0.1), "counts/laplace"), "c", lambda: 1.0)
    release.fn(ledger, "d", search, "s", lambda: {"model": 1})
    release.fn(ledger, "d", search, "s", lambda: {"model": 1})  # its replay neither
    err = capsys.readouterr().err
    operator = (tmp_path / "operator.log").read_text()
    for text in (err, operator):
        assert re.search(r"release counts/laplace \(computed\) under c: \d+\.\d\d s", text)  # the others are timed
        assert "private-search" not in text and " under s" not in text
    assert any("released private-search" in m for m in timings_on.lines)
    assert not [m for m in timings_on.lines if re.search(r"\d ?s\b|seconds|took", m)]


def test_a_runs_steps_are_timed_but_none_holding_a_search_nor_the_total_after_it(capsys, monkeypatch):
    from dpdist.flows.end_to_end import StepClock
    from dpdist.utils import operator_log

    monkeypatch.setenv(operator_log.ON_ENV, "1")
    clock = StepClock()
    clock.done("ingest", ["counts/laplace"])
    clock.done("train", ["dp-sgd/logistic", "private-search"])
    clock.done("evaluate", ["evaluation/binary"])
    lines = [ln.split("): ", 1)[1] for ln in capsys.readouterr().err.splitlines()]
    assert re.fullmatch(r"dpdist run: step ingest took \d+\.\d s \(\d+\.\d s in all\)", lines[0])
    assert lines[1].startswith("dpdist run: step train done (not timed") and not re.search(r"\d", lines[1])
    assert re.fullmatch(r"dpdist run: step evaluate took \d+\.\d s", lines[2])  # no total: it holds the search


@pytest.mark.slow
def test_a_run_with_a_search_leaves_its_duration_nowhere(prefect_server: dict, tmp_path) -> None:
    """``dpdist run -v`` (timings asked) with the private search: every other release and step is timed for
    the operator; the search's duration is in no line of the terminal, the operator log or Prefect's stored
    logs, nor in the report, the results, the models, the ledger (Prefect's own task-run times remain:
    docs/privacy.md)."""
    import json
    from pathlib import Path

    from flow_helpers import dpdist, flow_env, small_config, stored_logs, write_config

    from dpdist.privacy.accountant import Accountant

    cfg = small_config(tmp_path, select={"methods": []}, train={"methods": ["private-search"], "epsilon": [1.0]})
    env = {**flow_env(tmp_path, prefect_server), "DPDIST_OPERATOR_LOG": str(tmp_path / "operator.log")}
    r = dpdist(["run", str(write_config(tmp_path, cfg)), "--json", "-v"], env, tmp_path)
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout)
    operator = (tmp_path / "operator.log").read_text()
    acc = Accountant(tmp_path / "ledger.sqlite")
    history = acc.history(acc.resolve(out["dataset"]))
    (search,) = [h.key for h in history if h.mechanism == "private-search"]
    for text in (r.stderr, operator):
        assert re.search(r"release counts/laplace \(computed\) under \S+: \d+\.\d\d s", text)  # -v: the others
        assert re.search(r"release evaluation/binary \(computed\) under \S+: \d+\.\d\d s", text)
        assert "step train done (not timed" in text and "step train took" not in text
        mine = [ln for ln in text.splitlines() if "(operator only)" in ln]  # (Prefect's own lines: its logs, below)
        timed = [ln for ln in mine if re.search(rf"release private-search|{re.escape(search)}\b", ln)]
        assert timed == [], timed
        after = text[text.index("step train done") :].splitlines()
        assert not [ln for ln in after if " in all)" in ln]  # no running total that holds the search
    logs = [entry["message"] for entry in stored_logs(prefect_server["url"])]
    assert any(m.startswith("released private-search") for m in logs)
    assert not [m for m in logs if re.search(r"\btook\b|\d ?s\b|seconds|ms/iter", m)]
    published = [p.read_text() for p in (tmp_path / "out").glob("*.*") if p.suffix in (".json", ".md", ".html")]
    published += [r.stdout] + [h.result or "" for h in history] + [h.params or "" for h in history]
    for body in published:
        assert not re.search(r"seconds|elapsed|duration|\btook\b|runs_", body)
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", h.time) for h in history)
    assert {p.name for p in (tmp_path / "out").glob("*.json")} >= {"models.json", "results.json"}
    assert Path(out["report"]).is_file()
