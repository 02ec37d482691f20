"""The ``dpdist`` command line: JSON output and exit codes per ../shared/spec/cli.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from command import run

from dpdist.cli import main
from dpdist.privacy.accountant import Accountant
from dpdist.privacy.loss import Charge, PrivacyLoss


@pytest.fixture()
def store(tmp_path):
    import numpy as np

    from dpdist.data.store import write_store

    write_store(
        tmp_path / "s",
        np.eye(4),
        np.array([1.0, -1.0, 1.0, -1.0]),
        metadata={"name": "study-a"},
        task="binary",
        labels=[-1.0, 1.0],
    )
    return str(tmp_path / "s")


def test_budget_init_show_history_json(capsys, tmp_path, store):
    from dpdist.data.store import open_store
    from dpdist.privacy.loss import Charge, PrivacyLoss

    ledger = str(tmp_path / "l.sqlite")
    code, out, _ = run(
        capsys, "budget", "init", store, "--epsilon", "2", "--delta", "1e-6", "--ledger", ledger, "--json"
    )
    assert code == 0
    assert json.loads(out) == {"dataset": "study-a", "epsilon_total": 2.0, "delta_total": 1e-6}
    ds = open_store(store).dataset_id
    assert ds not in out  # the content hash is never printed

    Accountant(ledger).release(ds, Charge(PrivacyLoss.bounded_range(0.5), "em"), "r1", lambda: [3, 1])

    code, out, _ = run(capsys, "budget", "show", "--dataset", "study-a", "--ledger", ledger, "--json")
    shown = json.loads(out)
    assert code == 0
    assert shown["epsilon_spent"] == 0.5 and shown["epsilon_basic"] == 0.5 and shown["releases"] == 1
    assert shown["epsilon_total"] == 2.0 and shown["delta_total"] == 1e-6 and shown["dataset"] == "study-a"
    assert json.loads(run(capsys, "budget", "show", "--dataset", store, "--ledger", ledger, "--json")[1]) == shown

    code, out, _ = run(capsys, "budget", "show", "--ledger", ledger, "--json")
    assert [d["dataset"] for d in json.loads(out)["datasets"]] == ["study-a"]

    code, out, _ = run(capsys, "budget", "history", "--dataset", "study-a", "--ledger", ledger, "--json")
    rel = json.loads(out)["releases"]
    assert code == 0 and len(rel) == 1
    assert {"time", "mechanism", "epsilon", "delta", "key", "form", "rho", "result"} <= set(rel[0])
    assert rel[0]["key"] == "r1" and rel[0]["epsilon"] == 0.5 and rel[0]["form"] == "zcdp"
    assert rel[0]["rho"] == pytest.approx(0.5**2 / 8) and rel[0]["result"] == [3, 1]
    assert ds not in out


def test_human_output(capsys, tmp_path, store):
    ledger = str(tmp_path / "l.sqlite")
    run(capsys, "budget", "init", store, "--epsilon", "1", "--delta", "0", "--ledger", ledger)
    code, out, _ = run(capsys, "budget", "show", "--dataset", "study-a", "--ledger", ledger)
    assert code == 0 and "spent epsilon 0 of 1 (delta 0), 1 left" in out
    header, row = out.splitlines()[:2]  # a compact table: dataset | budget | spent | basic sum | left | releases
    assert header.split()[:7] == ["dataset", "epsilon", "delta", "spent", "basic", "left", "releases"]
    assert row.split()[:7] == ["study-a", "1", "0", "0", "0", "1", "0"]


def test_ledger_from_environment(capsys, tmp_path, monkeypatch, store):
    monkeypatch.setenv("DPDIST_LEDGER", str(tmp_path / "env.sqlite"))
    code, _, _ = run(capsys, "budget", "init", store, "--epsilon", "1", "--delta", "0")
    assert code == 0 and (tmp_path / "env.sqlite").exists()


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["budget", "init", "STORE", "--epsilon", "0", "--delta", "0"], "epsilon"),
        (["budget", "init", "STORE", "--epsilon", "nan", "--delta", "0"], "epsilon"),
        (["budget", "init", "STORE", "--epsilon", "1", "--delta", "1"], "delta"),
        (["budget", "init", "STORE", "--epsilon", "abc", "--delta", "0"], "--epsilon"),
        (["budget", "init", "--epsilon", "1", "--delta", "0"], "store"),
        (["budget", "init", "no-such-store", "--epsilon", "1", "--delta", "0"], "does not exist"),
        (["budget", "history", "--dataset", "unknown"], "no ledger at"),
    ],
)
def test_bad_input_exits_2(capsys, tmp_path, store, argv, needle):
    argv = [store if a == "STORE" else a for a in argv]
    code, out, err = run(capsys, *argv, "--ledger", str(tmp_path / "l.sqlite"))
    assert code == 2
    assert needle in err
    assert out == ""


def test_console_script_installed(tmp_path):
    exe = Path(sys.executable).parent / "dpdist"
    res = subprocess.run(
        [str(exe), "budget", "show", "--ledger", str(tmp_path / "l.sqlite"), "--json"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["datasets"] == []


def test_two_ingests_of_the_same_data_share_one_budget(capsys, tmp_path):
    data = tmp_path / "d.svm"
    data.write_text("1 1:0.5 3:0.25\n-1 2:1\n1 3:-0.5\n-1 1:0.1 2:0.2\n")
    ledger = str(tmp_path / "l.sqlite")
    names = []
    for s in ("a", "b"):
        code, out, _ = run(
            capsys,
            "ingest",
            str(data),
            "--out",
            str(tmp_path / s),
            "--n-features",
            "3",
            "--task",
            "binary",
            "--labels=-1,1",
            "--json",
        )
        assert code == 0
        names.append(json.loads(out)["name"])
    assert names[0] != names[1]  # public names are random, not a function of the data
    assert (
        run(capsys, "budget", "init", str(tmp_path / "a"), "--epsilon", "1", "--delta", "0", "--ledger", ledger)[0] == 0
    )
    # a second ingest of the same data does not get a second, fresh budget
    code, _, err = run(
        capsys, "budget", "init", str(tmp_path / "b"), "--epsilon", "5", "--delta", "0", "--ledger", ledger
    )
    assert code == 2 and "already has a budget" in err
    shown = [
        json.loads(run(capsys, "budget", "show", "--dataset", str(tmp_path / s), "--ledger", ledger, "--json")[1])
        for s in ("a", "b")
    ]
    assert shown[0] == shown[1] and shown[0]["dataset"] == names[0] and shown[0]["epsilon_total"] == 1.0


def _train_fast_fw(capsys, store, ledger: str, iters: str, epsilon: str, *more: str) -> tuple[int, str, str]:
    """``dpdist train`` of ``store`` by fast-dp-fw (logistic, lambda 5) for ``iters`` steps at ``epsilon``."""
    argv = ["train", str(store), "--method", "fast-dp-fw", "--loss", "logistic", "--lam", "5", "--iters", iters]
    return run(capsys, *argv, "--epsilon", epsilon, *more, "--ledger", ledger, "--json")


def test_models_list_show_export_and_from_release(capsys, tmp_path):
    import numpy as np

    from dpdist.data.store import open_store, write_store
    from dpdist.linear_model import DPFrankWolfeClassifier

    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(400, 6))
    y = np.where(X[:, 0] + 0.1 * rng.normal(size=400) > 0, 1.0, -1.0)
    write_store(tmp_path / "s", X, y, metadata={"name": "m"}, task="binary", labels=[-1.0, 1.0])
    ledger = str(tmp_path / "l.sqlite")
    Accountant(ledger).init_budget(open_store(tmp_path / "s").dataset_id, 100.0, 1e-5, name="m")
    code, out, _ = _train_fast_fw(capsys, tmp_path / "s", ledger, "100", "50", "--key", "my-model")
    assert code == 0
    code, out, _ = run(capsys, "models", "list", "--ledger", ledger, "--json")
    assert [r["key"] for r in json.loads(out)["releases"]] == ["my-model"]  # models only (not its metrics)
    code, out, _ = run(capsys, "models", "list", "--ledger", ledger)
    assert out.split()[:3] == ["DATASET", "MECHANISM", "EPSILON"] and len(out.splitlines()) == 2
    code, out, _ = run(capsys, "models", "show", "my-model", "--ledger", ledger, "--json")
    shown = json.loads(out)
    assert shown["dataset"] == "m" and shown["form"] == "zcdp" and shown["result"]["n_features"] == 6
    assert run(capsys, "models", "export", "my-model", "--out", str(tmp_path / "m.json"), "--ledger", ledger)[0] == 0
    clf = DPFrankWolfeClassifier.from_release(json.loads((tmp_path / "m.json").read_text()))
    assert list(clf.classes_) == [-1.0, 1.0] and clf.score(X, y) > 0.8
    code, _, err = run(capsys, "models", "show", "nope", "--ledger", ledger)
    assert code == 2 and "models list" in err


def test_models_export_suggests_from_release_for_models_only(capsys, tmp_path):
    ledger = str(tmp_path / "l.sqlite")
    acc = Accountant(ledger)
    acc.init_budget("h", 10.0, 1e-6, name="m")
    acc.release("h", Charge(PrivacyLoss.bounded_range(0.5), "dp_sis/canonical_topk"), "sel", lambda: [1, 2])
    code, out, _ = run(capsys, "models", "export", "sel", "--out", str(tmp_path / "s.json"), "--ledger", ledger)
    assert code == 0 and "from_release" not in out and json.loads((tmp_path / "s.json").read_text())["result"] == [1, 2]


def test_train_on_a_store_whose_rows_hold_one_class_is_charged_not_refused(capsys, tmp_path):
    """The classifier's classes are the store's public mapping (-1, +1): a train part that happens
    to hold one class is fitted under the charge, never refused before it (that refusal would
    depend on one record)."""
    import numpy as np

    from dpdist.data.store import open_store, write_store

    X = np.random.default_rng(1).uniform(-1, 1, size=(200, 5))
    write_store(tmp_path / "s", X, np.ones(200), task="binary", labels=[-1.0, 1.0])
    ledger = str(tmp_path / "l.sqlite")
    Accountant(ledger).init_budget(open_store(tmp_path / "s").dataset_id, 10.0, 1e-5, name="one")
    code, out, err = _train_fast_fw(capsys, tmp_path / "s", ledger, "20", "1", "--test-fraction", "0")
    assert code == 0, err
    assert Accountant(ledger).status(open_store(tmp_path / "s").budget_id).releases >= 1


def test_an_interrupt_python_swallowed_is_delivered_again(monkeypatch):
    """A SIGTERM whose TerminationSignal Prefect's handler raised inside a gc callback (distributed
    has one in the scheduler's process) is dropped by Python ("Exception ignored"): the run's hook
    raises the signal again in the main thread, so the run stops instead of running to its end."""
    import gc
    import signal
    import time

    from prefect.exceptions import TerminationSignal

    from dpdist.cli.supervise import _redeliver_swallowed_interrupts

    got: list[int] = []
    monkeypatch.setattr(sys, "unraisablehook", sys.unraisablehook)
    previous = signal.signal(signal.SIGTERM, lambda signum, frame: got.append(signum))
    try:
        _redeliver_swallowed_interrupts()

        def callback(phase, info):
            if phase == "stop":
                gc.callbacks.remove(callback)
                raise TerminationSignal(signal=signal.SIGTERM)  # what Prefect's handler raises

        gc.callbacks.append(callback)
        gc.collect()  # the callback's exception cannot propagate: Python drops it
        deadline = time.monotonic() + 5
        while not got and time.monotonic() < deadline:
            time.sleep(0.01)
        assert got == [signal.SIGTERM]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_seeded_releases_of_a_command_draw_independent_noise() -> None:
    import argparse
    import importlib
    import inspect
    import pkgutil

    import numpy as np

    import dpdist.cli
    import dpdist.cli._common as cli

    seeded, unseeded = argparse.Namespace(seed=7), argparse.Namespace(seed=None)
    purposes = [
        "train/model",
        "train/evaluation",
        "select/dp-sis",
        "select/two-stage",
        "select/stage2",
        "select/bss-top-r",
    ]
    seeds = [cli._noise_seed(seeded, p) for p in purposes]
    assert len(set(seeds)) == len(purposes) and seeds == [cli._noise_seed(seeded, p) for p in purposes]
    assert all(cli._noise_seed(unseeded, p) is None for p in purposes)  # OS entropy unless --seed
    # one seed for a model and its evaluation would give them one stream: their draws correlated
    a, b = np.random.default_rng(seeds[0]).gumbel(size=4000), np.random.default_rng(seeds[1]).laplace(size=4000)
    assert abs(np.corrcoef(a, b)[0, 1]) < 0.1
    modules = [importlib.import_module(f"dpdist.cli.{m.name}") for m in pkgutil.iter_modules(dpdist.cli.__path__)]
    for module in [dpdist.cli, *modules]:  # every release takes a seed of its own
        assert "random_state=args.seed" not in inspect.getsource(module), module.__name__


def test_a_linked_legacy_release_is_found_once(tmp_path) -> None:
    from types import SimpleNamespace

    from dpdist.cli.models import _find_release
    from dpdist.privacy.loss import Charge, PrivacyLoss

    acc = Accountant(tmp_path / "l.sqlite")
    acc.init_budget("half-own", 1.0, 1e-6, name="half")
    acc.release("half-own", Charge(PrivacyLoss.pure(0.3), "laplace"), "old", lambda: [1.0])
    acc.init_budget("source", 2.0, 1e-6, name="src")
    acc.budget_of(SimpleNamespace(dataset_id="half-own", budget_id="source"))
    assert [r.key for r in acc.history("source")] == ["old"]  # counted toward the source
    name, rec = _find_release(acc, "old", None)  # listed under its own budget only, not twice
    assert name == "half" and rec.key == "old"


def test_budget_show_of_a_half_counts_its_legacy_budget_of_its_own(tmp_path, capsys) -> None:
    import numpy as np
    import scipy.sparse as sp

    from dpdist.data.split import split_store
    from dpdist.data.store import open_store, write_store

    X = sp.random(200, 10, density=0.3, format="csr", random_state=1)
    write_store(tmp_path / "src", X, np.where(np.arange(200) % 2, 1.0, -1.0), task="binary", labels=[-1.0, 1.0])
    split_store(tmp_path / "src", tmp_path / "tr", tmp_path / "te", 0.5, b"k" * 32)
    ledger = tmp_path / "l.sqlite"
    acc = Accountant(ledger)
    half = open_store(tmp_path / "tr")
    acc.init_budget(half.dataset_id, 1.0, 1e-6, name="half")  # as dpdist before 4cadcda let one do
    model = {"indices": [0], "values": [1.0], "n_features": 10}
    acc.release(half.dataset_id, Charge(PrivacyLoss.pure(0.3), "laplace"), "old", lambda: model)
    acc.init_budget(half.budget_id, 2.0, 1e-6, name="src")
    code, out, _ = run(capsys, "budget", "show", "--dataset", str(tmp_path / "tr"), "--ledger", str(ledger), "--json")
    assert code == 0 and json.loads(out)["epsilon_spent"] == pytest.approx(0.3)  # the source's, with the half's
    code, out, _ = run(capsys, "models", "list", "--ledger", str(ledger), "--json")
    assert [(r["dataset"], r["key"]) for r in json.loads(out)["releases"]] == [("half", "old")]  # listed once


@pytest.mark.parametrize("limit", [0, 64 << 10], ids=["at-the-first-file", "mid-store"])
def test_a_disk_that_refuses_the_stores_writes_is_one_line_exit_1_and_leaves_nothing(tmp_path, limit, file_size_limit):
    import numpy as np
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(0)
    src = tmp_path / "rows.svm"
    dump_svmlight_file(rng.random((3_000, 40)), rng.choice([-1.0, 1.0], 3_000), str(src))
    out = tmp_path / "stores"
    out.mkdir()
    exe = Path(sys.executable).parent / "dpdist"
    argv = [str(exe), "ingest", str(src), "--out", str(out / "s"), "--task", "binary", "--labels=-1,1"]
    argv += ["--n-features", "40", "--zero-based", "yes"]
    res = subprocess.run(argv, capture_output=True, text=True, check=False, preexec_fn=file_size_limit(limit))
    assert res.returncode == 1, res.stderr
    assert res.stderr.splitlines()[-1] == f"dpdist: error: File too large (writing {out / 's'})"
    assert "Traceback" not in res.stderr  # (at 0 bytes joblib also warns that it cannot make a semaphore)
    assert list(out.iterdir()) == []  # no store, no temporary
    # the same file and limit, written where the kernel lets it: a store (the refusal was the limit's)
    res = subprocess.run(argv, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stderr


def test_a_ledger_its_disk_refuses_is_one_line_exit_1_at_once(tmp_path, store, file_size_limit):
    import time

    exe = Path(sys.executable).parent / "dpdist"
    ledger = tmp_path / "l.sqlite"
    start = time.monotonic()
    res = subprocess.run(
        [str(exe), "budget", "init", store, "--epsilon", "1", "--delta", "1e-6", "--ledger", str(ledger)],
        capture_output=True,
        text=True,
        check=False,
        preexec_fn=file_size_limit(0),
    )
    took = time.monotonic() - start
    assert res.returncode == 1, res.stderr
    [line] = res.stderr.splitlines()
    assert (
        line.startswith(f"dpdist: error: ledger {ledger} could not be read or written: ")
        and "this call released nothing" in line
    )
    assert took < 60  # not the 120 s a lock is waited for: a full disk does not clear by waiting
    code = subprocess.run(
        [str(exe), "budget", "show", "--ledger", str(store + "/zarr.json")], capture_output=True, text=True, check=False
    )
    assert code.returncode == 2 and "is not an SQLite database" in code.stderr, code.stderr
    import sqlite3

    with sqlite3.connect(tmp_path / "other.db") as con:  # another program's database: bad input too
        con.execute("CREATE TABLE budgets (x)")
    code = subprocess.run(
        [str(exe), "budget", "show", "--ledger", str(tmp_path / "other.db")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert code.returncode == 2 and "another program's SQLite database" in code.stderr, code.stderr


def test_run_names_its_console_handler_for_prefect_before_prefect_loads(capsys, tmp_path, monkeypatch):
    from dpdist.cli.run import _CONSOLE_HANDLER

    monkeypatch.delenv(_CONSOLE_HANDLER[0], raising=False)
    code, out, err = run(capsys, "run", "--plan", "--ledger", str(tmp_path / "l.sqlite"))
    assert code == 0, err
    assert os.environ[_CONSOLE_HANDLER[0]] == _CONSOLE_HANDLER[1]  # the flow's child and its workers inherit it


RELEASING = {
    "select": ["select", "STORE", "--method", "dp-sis", "--k", "1", "--epsilon", "0.5", "--clip"],
    "train-gradient": ["train", "STORE", "--method", "dp-sgd", "--epsilon", "0.5"],
    "train-frank-wolfe": ["train", "STORE", "--method", "fast-dp-fw", "--lam", "5", "--iters", "10", "--epsilon", "1"],
    "train-tune": ["train", "STORE", "--tune", "--epsilon", "1"],
}


def _unwritable(tmp_path: Path, where: str) -> str:
    """An output path that cannot be written: an existing directory, a path under a regular file, or /proc."""
    if where == "a directory":
        (tmp_path / "exdir").mkdir()
        return str(tmp_path / "exdir")
    if where == "under a file":
        (tmp_path / "afile").write_text("")
        return str(tmp_path / "afile" / "x.json")
    if not os.path.isdir("/proc/self"):
        pytest.skip("no /proc here")
    return "/proc/dpdist-x.json"


@pytest.mark.parametrize("where", ["a directory", "under a file", "/proc"])
@pytest.mark.parametrize("command", sorted(RELEASING))
def test_an_out_that_cannot_be_written_is_refused_before_anything_is_charged(capsys, tmp_path, store, command, where):
    """A charge never precedes a check that its result can be delivered: the output file is prepared
    (its temporary made where it will be renamed) before anything is read or charged."""
    from dpdist.data.store import open_store

    ledger = str(tmp_path / "l.sqlite")
    assert run(capsys, "budget", "init", store, "--epsilon", "10", "--delta", "1e-6", "--ledger", ledger)[0] == 0
    bad = _unwritable(tmp_path, where)
    argv = [store if a == "STORE" else a for a in RELEASING[command]]
    code, out, err = run(capsys, *argv, "--out", bad, "--ledger", ledger)
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(f"dpdist: error: --out {bad}: cannot be written (") and "nothing was read or charged" in line
    assert Accountant(ledger).status(open_store(store).budget_id).releases == 0  # nothing charged
    assert not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


def test_an_out_is_written_atomically_with_its_directories_and_none_is_left_by_a_refusal(capsys, tmp_path, store):
    ledger = str(tmp_path / "l.sqlite")
    run(capsys, "budget", "init", store, "--epsilon", "1", "--delta", "1e-6", "--ledger", ledger)
    select = [a if a != "STORE" else store for a in RELEASING["select"]]
    out = tmp_path / "new" / "sub" / "sel.json"
    code, printed, err = run(capsys, *select, "--out", str(out), "--ledger", ledger, "--json")
    assert code == 0, err
    assert json.loads(out.read_text()) == json.loads(printed) and os.listdir(out.parent) == ["sel.json"]
    # a budget refusal (exit 3) after the output was prepared: no temporary, no directory made for it
    code, _, err = run(capsys, *select[:-2], "5", "--out", str(tmp_path / "more" / "x.json"), "--ledger", ledger)
    assert code == 3, err
    assert not (tmp_path / "more").exists() and not [p for p in tmp_path.rglob("*") if ".tmp-" in p.name]


@pytest.mark.parametrize("where", ["a directory", "under a file", "/proc"])
def test_every_other_output_that_cannot_be_written_is_refused_before_the_work(capsys, tmp_path, store, where):
    """models export, ingest's and synth's stores, and the run's output directory: exit 2 in one line
    naming the output, before any input is read (a run: before anything is charged)."""
    ledger = str(tmp_path / "l.sqlite")
    acc = Accountant(ledger)
    acc.init_budget("h", 10.0, 1e-6, name="m")
    acc.release("h", Charge(PrivacyLoss.bounded_range(0.5), "dp_sis/canonical_topk"), "sel", lambda: [1, 2])
    table = tmp_path / "t.csv"
    table.write_text("a,y\n1,0\n2,1\n")
    bad = _unwritable(tmp_path, where)
    # a store or a run's output in an existing directory is fine: there, a path under a regular file instead
    (tmp_path / "afile2").write_text("")
    elsewhere = bad if where != "a directory" else str(tmp_path / "afile2" / "s")
    commands = {
        "models export": (["models", "export", "sel", "--out", bad], f"--out {bad}: cannot be written ("),
        "ingest": (["ingest", str(table), "--out", elsewhere, "--task", "regression"], f"--out {elsewhere}: cannot"),
        "synth": (["synth", "rcv1", "--n", "100", "--out", elsewhere], f"--out {elsewhere}: cannot be written ("),
        "run": (["run", "--output", elsewhere], f"output: {elsewhere}: the run could not write its results there"),
    }
    for name, (argv, needle) in commands.items():
        code, out, err = run(capsys, *argv, "--ledger", ledger)
        assert code == 2 and out == "", (name, err)
        [line] = err.splitlines()
        assert line.startswith("dpdist: error: ") and needle in line, (name, line)
    assert [r.key for r in acc.history("h")] == ["sel"]
    code, _, err = run(capsys, "ingest", str(table), "--out", store, "--task", "regression", "--ledger", ledger)
    assert code == 2 and err.splitlines() == [f"dpdist: error: --out {store}: the store already exists; pass --force"]


@pytest.mark.parametrize(
    "name, data, says",
    [
        ("empty.svm", b"", "no data rows"),
        ("latin1.svm", "1 1:0.5\n-1 1:0.é\n".encode("latin-1"), ":2: malformed svmlight line"),
        ("corrupt.svm.gz", b"not gzip", r"corrupt or truncated \(its gz data"),
        ("wide.svm", b"1 1:0.5 3:0.1\n", ":1: a column index outside the model's 2 columns"),
        ("latin1.csv", "a,b,y\n1,2,é\n".encode("latin-1"), r":2: byte 5 of the line .* not UTF-8"),
    ],
    ids=["empty", "latin1", "corrupt-gz", "too-wide", "latin1-table"],
)
def test_a_public_test_file_that_cannot_be_read_exits_2_in_one_line(capsys, tmp_path, name, data, says):
    import re

    model = tmp_path / "m.json"
    model.write_text(json.dumps({"indices": [0], "values": [1.0], "n_features": 2, "intercept": 0.0}))
    (tmp_path / name).write_bytes(data)
    code, out, err = run(capsys, "evaluate", str(model), "--public-test", str(tmp_path / name))
    assert code == 2 and out == ""
    [line] = err.splitlines()
    assert line.startswith(f"dpdist: error: {tmp_path / name}") and re.search(says, line), line


def test_timings_reach_the_terminal_only_with_v_and_never_the_searchs(capsys, tmp_path, monkeypatch):
    """A private fit's duration is shown only when the operator asks (-v), best subset's included; the
    private search's never (its duration tells its number of runs): not on the terminal, not in the
    operator log, not in the ledger, the model or the JSON result."""
    import re

    import numpy as np

    from dpdist.data.store import open_store, write_store
    from dpdist.data.synthetic import write_synthetic
    from dpdist.utils import operator_log

    monkeypatch.setenv(operator_log.ON_ENV, "")  # not asked (main sets it with -v; undone after the test)
    monkeypatch.setenv(operator_log.FILE_ENV, str(tmp_path / "operator.log"))
    ledger = str(tmp_path / "l.sqlite")
    rng = np.random.default_rng(0)
    X = rng.uniform(-1, 1, size=(300, 120)) * (rng.random((300, 120)) < 0.1)
    write_store(tmp_path / "s", X, np.where(X[:, 0] > 0, 1.0, -1.0), task="binary", labels=[-1.0, 1.0])
    write_synthetic("bss", tmp_path / "b", seed=1, n=500, d=10, s=2)
    for s in ("s", "b"):
        Accountant(ledger).init_budget(open_store(tmp_path / s).budget_id, 50.0, 1e-5, name=s)
    timed = re.compile(r"\(operator only\)|\d\.\d+ s\b")
    sis = ["select", str(tmp_path / "s"), "--method", "dp-sis", "--k", "2", "--epsilon", "1", "--clip"]
    bss = ["select", str(tmp_path / "b"), "--method", "bss-top-r", "--k", "2", "--epsilon", "4", "--clip"]
    for argv in (sis, bss):
        monkeypatch.setenv(operator_log.ON_ENV, "")  # (a command is a process of its own: -v's setting ends)
        code, _, err = run(capsys, *argv, "--ledger", ledger, "--fresh")
        assert code == 0 and not timed.search(err), err  # not asked: no duration
        code, _, err = run(capsys, *argv, "--ledger", ledger, "--fresh", "-v")
        assert code == 0 and re.search(rf"operator only\): {argv[3]}: \d+\.\d\d s", err), err  # asked: shown
    before = (tmp_path / "operator.log").read_text()
    out = tmp_path / "m.json"
    tune = ["train", str(tmp_path / "s"), "--tune", "--epsilon", "2", "--n-records", "300", "--out", str(out)]
    code, printed, err = run(capsys, *tune, "--ledger", ledger, "--json", "-v")
    assert code == 0, err
    assert not timed.search(err) and (tmp_path / "operator.log").read_text() == before  # never the search's
    records = [h for h in Accountant(ledger).history(open_store(tmp_path / "s").budget_id) if h.key.startswith("train")]
    assert [h.mechanism for h in records] == ["private-search", "evaluation/binary"]
    for body in (printed, out.read_text(), *(h.result for h in records), *(h.params or "" for h in records)):
        assert not re.search(r"second|duration|elapsed|took|runs_", body), body
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\d", h.time) for h in records)  # a date, not a time of day


def test_help_states_the_defaults(capsys):
    """Every option with a default states it in --help (once: not where its text already says it)."""
    from dpdist.cli import main

    for command in (["train"], ["ingest"], ["predict"], ["budget", "show"]):
        with pytest.raises(SystemExit):
            main([*command, "--help"])
        text = " ".join(capsys.readouterr().out.split())
        assert "(default: None)" not in text and "(default: False)" not in text
        if command == ["train"]:
            assert "(default: 0.1)" in text and "(default: 0.2)" in text and text.count("(default: safe)") == 2
        if command == ["ingest"]:
            assert "(default: no)" not in text  # --zero-based's own text says it


def test_budget_show_prints_the_basic_sum_beside_the_filters_figure(capsys, tmp_path):
    ledger = tmp_path / "l.sqlite"
    acc = Accountant(ledger)
    acc.init_budget("d" * 64, 4.0, 1e-6, name="mine")
    for i, eps in enumerate((0.5, 0.25)):
        acc.release("d" * 64, Charge(PrivacyLoss.pure(eps), "laplace"), f"k{i}", lambda: 1.0)
    for argv in (["budget", "show"], ["budget", "show", "--dataset", "mine"]):
        assert main([*argv, "--ledger", str(ledger)]) == 0
        head, row = capsys.readouterr().out.splitlines()[:2]
        cells = dict(zip([c.strip() for c in head.split("  ") if c.strip()], row.split()))
        assert cells["basic"] == "0.75" and float(cells["spent"]) <= 0.75


# the model the evaluate tests release, and the weights their labels follow
MODEL = {"indices": [0, 1, 2], "values": [1.0, -1.0, 0.5], "intercept": 0.0, "n_features": 5}
WEIGHTS = [1.0, -1.0, 0.5, 0.0, 0.0]


def _store_with_a_budget(tmp_path, positive) -> tuple[Path, Accountant, str]:
    """4,000 rows of 5 features (half of them non-zero), +1 where ``positive(X)`` and -1 elsewhere, in the
    store ``tmp_path / "s"``, and a budget of (1, 1e-6) named "mine" for it in the ledger ``tmp_path /
    "l.sqlite"``: (the ledger, its Accountant, the store's budget id)."""
    import numpy as np
    import scipy.sparse as sp

    from dpdist.data.store import open_store, write_store

    X = sp.random(4000, 5, density=0.5, format="csr", random_state=1)
    write_store(tmp_path / "s", X, np.where(positive(X), 1.0, -1.0), task="binary", labels=[-1.0, 1.0])
    ledger = tmp_path / "l.sqlite"
    acc = Accountant(ledger)
    dataset = open_store(tmp_path / "s").budget_id
    acc.init_budget(dataset, 1.0, 1e-6, name="mine")
    return ledger, acc, dataset


def test_evaluate_again_privately_a_private_search_release(capsys, tmp_path):
    """A private search's release holds its chosen model under "model": re-evaluated as that model
    (it was a KeyError traceback, exit 1)."""
    ledger, acc, dataset = _store_with_a_budget(tmp_path, lambda X: X @ WEIGHTS > 0.2)
    search = {"candidate": 0, "learner": "dp-sgd", "model": MODEL}
    acc.release(dataset, Charge(PrivacyLoss.pure(0.5), "private-search/logistic"), "s", lambda: search)
    code, out, _ = run(
        capsys, "evaluate", "s", "--store", str(tmp_path / "s"), "--ledger", str(ledger), "--json", "--epsilon", "0.3"
    )
    assert code == 0 and json.loads(out)["model"] == "s"


def test_evaluate_again_privately_one_evaluation_release_no_new_model(capsys, tmp_path):
    import numpy as np

    rng = np.random.default_rng(0)
    # 4,000 rows: each class of the held-out side holds hundreds of rows, far above the noise of its total
    # at epsilon 0.3 (at 400 rows an undefined AUC -- a noisy class total <= 0, a correct release -- failed
    # this test once)
    ledger, acc, dataset = _store_with_a_budget(tmp_path, lambda X: X @ WEIGHTS + 0.1 * rng.normal(size=4000) > 0)
    acc.release(dataset, Charge(PrivacyLoss.pure(0.5), "dp-sgd/logistic"), "m", lambda: MODEL)
    base = ["evaluate", "m", "--store", str(tmp_path / "s"), "--ledger", str(ledger), "--json"]
    code, out, _ = run(capsys, *base, "--epsilon", "0.3")
    first = json.loads(out)
    assert code == 0 and not first["replayed"] and first["auc"] is not None and first["accuracy_interval"]
    keys = [r.key for r in acc.history(dataset)]
    assert keys == ["m", first["key"]] and first["key"].startswith("m/evaluation-")  # one release, no model
    code, out, _ = run(capsys, *base, "--epsilon", "0.3")
    assert code == 0 and json.loads(out)["replayed"] and len(acc.history(dataset)) == 2  # replayed: no charge
    assert run(capsys, *base, "--epsilon", "0.4")[0] == 3  # 0.5 + 0.3 + 0.4 > 1: refused, nothing charged
    assert len(acc.history(dataset)) == 2
    code, _, err = run(capsys, "evaluate", "m", "--epsilon", "0.1", "--ledger", str(ledger))
    assert code == 2 and "--store" in err


def test_the_default_learner_reads_a_small_wide_table_as_a_table(capsys, tmp_path):
    """Issue 53: a store ingested from a table (a public fact of its ingest) of few rows and many columns gets
    the screened nearest centroid from ``dpdist train`` with no ``--method``, its pre-flight shown before the
    model is charged; the same rows as an svmlight file are sparse rows, and get DP-SGD."""
    import numpy as np

    rng = np.random.default_rng(0)
    n, d = 60, 800
    X = rng.normal(size=(n, d))
    y = rng.random(n) < 0.5
    X[y, :5] += 1.5
    table = tmp_path / "genes.csv"
    rows = [",".join([*(f"g{j}" for j in range(d)), "y"])]
    rows += [",".join([*(f"{v:.4f}" for v in x), "yes" if c else "no"]) for x, c in zip(X, y, strict=True)]
    table.write_text("\n".join(rows) + "\n")
    svm = tmp_path / "genes.svm"
    svm.write_text(
        "".join(
            f"{1 if c else -1} " + " ".join(f"{j + 1}:{v:.4f}" for j, v in enumerate(x)) + "\n"
            for x, c in zip(X, y, strict=True)
        )
    )
    ledger = str(tmp_path / "l.sqlite")
    chosen = {}
    for name, src, extra in [
        ("table", table, ["--labels=no,yes"]),
        ("svm", svm, ["--labels=-1,1", "--n-features", str(d)]),
    ]:
        out = str(tmp_path / name)
        code, _, err = run(capsys, "ingest", str(src), "--out", out, "--task", "binary", *extra, "--ledger", ledger)
        assert code == 0, err
        code, _, err = run(capsys, "budget", "init", out, "--epsilon", "3", "--delta", "1e-6", "--ledger", ledger)
        assert code == 0, err
        # a public count (no class counts released: taken as balanced), so the rule's choice is the table flag's
        train = ["train", out, "--epsilon", "3", "--delta", "1e-6", "--n-records", "48", "--ledger", ledger, "--json"]
        code, o, err = run(capsys, *train)
        assert code == 0, err
        payload = json.loads(o)
        assert "dpdist train: " in err and payload["preflight"]["learner"] == payload["chosen"]["learner"]
        chosen[name] = payload["chosen"]["learner"]
    assert chosen == {"table": "screened-centroid", "svm": "dp-sgd"}
