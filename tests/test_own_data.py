"""A user's own data, end to end (issue 41): each item the issue lists, run as a user runs it -- the
``dpdist`` command in a subprocess, a fresh HOME and ledger."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.slow

EXE = Path(sys.executable).parent / "dpdist"


@pytest.fixture
def user(tmp_path):
    """Run ``dpdist`` as a new user: a fresh HOME and ledger, no experiment opt-out."""
    env = {k: v for k, v in os.environ.items() if k not in ("DPDIST_LEDGER", "DPDIST_UNACCOUNTED")}
    env.update(HOME=str(tmp_path / "home"), DPDIST_LEDGER=str(tmp_path / "ledger.sqlite"))

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([str(EXE), *args], env=env, capture_output=True, text=True, cwd=tmp_path, timeout=300)

    return run


def _table(path: Path, n: int = 3000, seed: int = 0) -> Path:
    rng = np.random.default_rng(seed)
    a, b = rng.normal(size=n), rng.normal(size=n)
    region = rng.choice(["north", "south", "east"], size=n)
    y = (2 * a - b + (region == "north") > 0).astype(int)
    lines = ["income,age,region,bought"] + [
        f"{'' if i % 20 == 0 else f'{a[i] / 4:.4f}'},{b[i] / 4:.4f},{region[i]},{y[i]}" for i in range(n)
    ]
    path.write_text("\n".join(lines) + "\n")
    return path


def _svm(path: Path, n: int = 3000) -> Path:
    rng = np.random.default_rng(1)
    rows = []
    for _ in range(n):
        j = sorted(rng.choice(np.arange(1, 31), size=4, replace=False))
        v = rng.uniform(0.1, 1.0, size=4)
        label = 1 if (1 in j or 2 in j) else -1
        rows.append(f"{label} " + " ".join(f"{a}:{b:.3f}" for a, b in zip(j, v)))
    path.write_text("\n".join(rows) + "\n")
    return path


@pytest.fixture(scope="module")
def ingested(tmp_path_factory) -> Path:
    """One ingest for the module (each test copies it and sets its own budget in its own ledger)."""
    tmp = tmp_path_factory.mktemp("src")
    src = _svm(tmp / "mine.svm")
    r = subprocess.run(
        [
            str(EXE),
            "ingest",
            str(src),
            "--out",
            str(tmp / "s"),
            "--n-features",
            "30",
            "--task",
            "binary",
            "--labels=-1,1",
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr
    return tmp


def _store(user, tmp_path, ingested: Path) -> str:
    import shutil

    shutil.copytree(ingested / "s", tmp_path / "s")
    shutil.copy(ingested / "mine.svm", tmp_path / "mine.svm")
    assert user("budget", "init", str(tmp_path / "s"), "--epsilon", "10", "--delta", "1e-6").returncode == 0
    return str(tmp_path / "s")


def test_1_a_table_with_text_and_gaps_has_a_private_path_and_no_unusable_budget(user, tmp_path, ingested):
    src = _table(tmp_path / "t.csv")
    inferred = ("ingest", str(src), "--out", str(tmp_path / "coded"), "--task", "binary", "--labels", "0,1")
    inferred += ("--encode-categories", "--impute", "mean")  # categories and fill value read from the data
    r = user(*inferred)
    assert r.returncode == 2 and "--categories" in r.stderr and "--fill-value" in r.stderr  # refused, with the fix
    assert not (tmp_path / "coded").exists()
    r = user(*inferred, "--non-private")
    assert r.returncode == 0, r.stderr
    r = user("budget", "init", str(tmp_path / "coded"), "--epsilon", "1", "--delta", "1e-6")
    assert r.returncode == 2 and "columns were inferred" in r.stderr  # no permanent budget nobody can spend
    assert json.loads(user("budget", "show", "--json").stdout)["datasets"] == []
    r = user(
        "ingest",
        str(src),
        "--out",
        str(tmp_path / "ok"),
        "--task",
        "binary",
        "--labels",
        "0,1",
        "--categories",
        "region=north,south",
        "--fill-value",
        "0",
        "--json",
    )
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["schema"] == "declared"
    assert user("budget", "init", str(tmp_path / "ok"), "--epsilon", "2", "--delta", "1e-6").returncode == 0
    r = user("select", str(tmp_path / "ok"), "--method", "dp-sis", "--k", "2", "--epsilon", "0.5", "--clip")
    assert r.returncode == 0 and "as columns: [" in r.stdout  # the table's column names, not positions
    names = r.stdout.split("as columns: [")[1].split("]")[0]
    assert all(
        n.strip(" '") in ("income", "age", "region=north", "region=south", "region=other") for n in names.split(",")
    )


def test_2_training_needs_an_epsilon_and_says_what_it_charged(user, tmp_path, ingested):
    store = _store(user, tmp_path, ingested)
    r = user("train", store, "--method", "dp-sgd")
    assert r.returncode == 2 and "--epsilon is required" in r.stderr
    assert json.loads(user("budget", "show", "--dataset", store, "--json").stdout)["releases"] == 0
    r = user("train", store, "--method", "dp-sgd", "--epsilon", "1")
    # --epsilon is what the command spends in all (issue 56): its split shown before the charge
    assert "plan: its record count 0.01 + the model 0.89 + its held-out metrics 0.1 = epsilon 1 in all" in r.stderr
    assert r.returncode == 0 and "charged epsilon=0.89" in r.stdout, r.stderr
    # every release the command made is named with its epsilon: the model, its record count, its metrics
    assert "plus epsilon=0.01 for its record count, plus epsilon=0.1 for its held-out metrics" in r.stdout
    shown = json.loads(user("budget", "show", "--dataset", store, "--json").stdout)
    assert shown["releases"] == 3 and shown["epsilon_basic"] == pytest.approx(1.0)


def test_3_the_same_command_replays_fresh_charges_again_and_a_reused_key_is_a_usage_error(user, tmp_path, ingested):
    store = _store(user, tmp_path, ingested)
    cmd = ("select", store, "--method", "dp-sis", "--k", "2", "--epsilon", "0.5", "--clip", "--json")
    first, second = json.loads(user(*cmd).stdout), json.loads(user(*cmd).stdout)
    assert not first["replayed"] and second["replayed"] and second["features"] == first["features"]
    assert json.loads(user("budget", "show", "--dataset", store, "--json").stdout)["releases"] == 1
    third = json.loads(user(*cmd, "--fresh").stdout)
    assert not third["replayed"] and third["key"] != first["key"]
    assert json.loads(user("budget", "show", "--dataset", store, "--json").stdout)["releases"] == 2
    r = user("select", store, "--method", "dp-sis", "--k", "3", "--epsilon", "0.5", "--clip", "--key", first["key"])
    assert r.returncode == 2 and "cannot be reused" in r.stderr


def test_4_an_exported_model_predicts_on_the_users_whole_matrix_in_the_users_labels(user, tmp_path, ingested):
    from sklearn.datasets import load_svmlight_file

    from dpdist.gradient_models import DPSGDClassifier
    from dpdist.linear_model import DPFrankWolfeClassifier

    store = _store(user, tmp_path, ingested)
    assert (
        user(
            "select",
            store,
            "--method",
            "dp-sis",
            "--k",
            "5",
            "--epsilon",
            "1",
            "--clip",
            "--out",
            str(tmp_path / "sel.json"),
        ).returncode
        == 0
    )
    X, y = load_svmlight_file(str(tmp_path / "mine.svm"), n_features=30)
    for method, cls, extra in (
        ("fast-dp-fw", DPFrankWolfeClassifier, ["--lam", "20", "--iters", "50", "--clip"]),
        ("dp-sgd", DPSGDClassifier, []),
    ):
        r = user(
            "train",
            store,
            "--method",
            method,
            "--epsilon",
            "2",
            "--features",
            str(tmp_path / "sel.json"),
            "--key",
            method,
            *extra,
        )
        assert r.returncode == 0, r.stderr
        assert user("models", "export", method, "--out", str(tmp_path / f"{method}.json")).returncode == 0
        record = json.loads((tmp_path / f"{method}.json").read_text())
        assert record["result"]["n_features"] == 30 and record["result"]["classes"] == [-1.0, 1.0]
        selected = json.loads((tmp_path / "sel.json").read_text())["features"]
        assert set(record["result"]["indices"]) <= set(selected)  # the store's columns, not 0..k-1
        model = cls.from_release(record)
        assert set(model.predict(X)) <= {-1.0, 1.0} and model.predict(X).shape == (3000,)
        shown = user("models", "show", method).stdout
        assert len(shown.splitlines()) <= 6 and "non-zero weights" in shown  # not one number a line


def test_5_private_metrics_come_with_their_noise_interval_and_a_warning_when_it_swamps_them(user, tmp_path, ingested):
    store = _store(user, tmp_path, ingested)
    r = user("train", store, "--method", "dp-sgd", "--epsilon", "2", "--eval-epsilon", "0.01", "--json")
    out = json.loads(r.stdout)
    lo, hi = out["accuracy_interval"]
    auc_lo, auc_hi = out["auc_interval"] or (0.0, 0.0)
    assert lo <= out["accuracy"] <= hi and out["noise_swamps"] == (hi - lo > 0.25 or auc_hi - auc_lo > 0.25)
    human = user("train", store, "--method", "dp-sgd", "--epsilon", "2", "--eval-epsilon", "0.01", "--fresh").stdout
    assert "95% interval" in human and ("swamps" in human) == out["noise_swamps"]


def test_6_selected_features_are_shown_in_the_files_own_index_base(user, tmp_path, ingested):
    store = _store(user, tmp_path, ingested)
    out = json.loads(
        user("select", store, "--method", "dp-sis", "--k", "3", "--epsilon", "5", "--clip", "--json").stdout
    )
    assert out["file_columns"]["index_base"] == 1
    assert out["file_columns"]["ids"] == [j + 1 for j in out["features"]]
    # a model records the file's base: `models show` names its weights as the file does, and
    # `evaluate` reads a public svmlight file in that base without being told
    r = user("train", store, "--method", "dp-sgd", "--epsilon", "1", "--delta", "1e-8", "--key", "m6", "--json")
    assert r.returncode == 0, r.stderr
    shown = user("models", "show", "m6").stdout
    first = json.loads(user("models", "show", "m6", "--json").stdout)["result"]["indices"][0]
    assert "the file's one-based indices" in shown and f"{{{first + 1}: " in shown, shown
    assert user("models", "export", "m6", "--out", str(tmp_path / "m6.json")).returncode == 0
    exported = json.loads((tmp_path / "m6.json").read_text())
    assert exported["result"]["schema"] == {"index_base": 1}
    r = user("evaluate", str(tmp_path / "m6.json"), "--public-test", str(tmp_path / "mine.svm"), "--json")
    assert r.returncode == 0 and 0.0 <= json.loads(r.stdout)["accuracy"] <= 1.0, r.stderr


def test_7_a_private_fit_in_python_without_a_ledger_refuses(tmp_path):
    code = (
        "import numpy as np\nfrom dpdist.linear_model import DPFrankWolfeClassifier\n"
        "X = np.random.default_rng(0).uniform(-1, 1, (50, 3)); y = np.where(X[:, 0] > 0, 1, -1)\n"
        "DPFrankWolfeClassifier(epsilon=1.0, max_iter=5).fit(X, y)\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "DPDIST_UNACCOUNTED"}
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0 and "without an accountant" in r.stderr and "dpdist.unaccounted" in r.stderr


def test_8_budget_show_is_a_table(user, tmp_path, ingested):
    _store(user, tmp_path, ingested)
    out = user("budget", "show").stdout.splitlines()
    assert out[0].split()[:7] == ["dataset", "epsilon", "delta", "spent", "basic", "left", "releases"]


def test_10_evaluate_on_a_public_file_and_the_commands_say_what_to_do(user, tmp_path, ingested):
    store = _store(user, tmp_path, ingested)
    assert user("train", store, "--method", "dp-sgd", "--epsilon", "2", "--key", "m").returncode == 0
    r = user("evaluate", "m", "--public-test", str(_svm(tmp_path / "public.svm", 500)), "--json")
    out = json.loads(r.stdout)
    assert r.returncode == 0 and out["exact"] and out["rows"] == 500 and 0.0 <= out["accuracy"] <= 1.0
    r = user("train", store, "--method", "dp-sgd", "--epsilon", "1", "--eval-epsilon", "0")
    assert r.returncode == 2 and "--test-fraction 0" in r.stderr
    assert "table" in user("ingest", "--help").stdout


def test_11_smaller_messages(user, tmp_path, ingested):
    bad = tmp_path / "inf.csv"
    bad.write_text("a,b,y\n1,2,0\n3,inf,1\n")
    r = user("ingest", str(bad), "--out", str(tmp_path / "x"), "--task", "binary")
    assert r.returncode == 2 and str(bad) in r.stderr and "'b'" in r.stderr and "row 2" in r.stderr
    store = _store(user, tmp_path, ingested)
    r = user("select", store, "--method", "dp-sis", "--k", "2", "--epsilon", "50", "--clip")
    assert r.returncode == 3 and r.stderr.count("refused") == 1
