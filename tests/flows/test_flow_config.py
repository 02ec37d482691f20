"""The run config: embedded defaults, TOML and YAML files, and errors that name file and key."""

from __future__ import annotations

from pathlib import Path

import dask
import pytest

from dpdist.flows.config import ConfigError, load_config
from dpdist.flows.runtime import LOOPBACK, slurm_kwargs
from dpdist.flows.train import fit_params

REPO = Path(__file__).resolve().parents[2]


def test_embedded_defaults_are_the_main_job() -> None:
    cfg = load_config()
    assert cfg.source_file == "<defaults>"
    assert cfg.data.source == "synth" and cfg.cluster.kind == "local" and cfg.cluster.n_workers == 2
    assert cfg.select.methods == ("dp-sis", "two-stage")
    # the default learner (the best measured, benchmarks/utility.py) first, each learner its own curve
    assert cfg.train.methods == ("auto", "dp-sgd", "fast-dp-fw")
    assert cfg.seed is None and cfg.step_seed("k") is None  # noise from OS entropy unless a seed is given
    spend = len(cfg.select.methods) * cfg.select.epsilon + len(cfg.train.methods) * sum(cfg.train.epsilon)
    evaluation = len(cfg.train.methods) * len(cfg.train.epsilon) * cfg.evaluate.epsilon
    assert spend + evaluation + cfg.data.count_epsilon <= cfg.budget.epsilon  # basic composition fits the budget
    assert cfg.train_records() == 160_000  # the synthetic source's public n times 1 - test_fraction


def test_toml_and_yaml_files_override_the_defaults(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('name = "x"\n[train]\nepsilon = 0.5\niters = 10\n')
    (tmp_path / "a.yaml").write_text("name: x\ntrain:\n  epsilon: 0.5\n  iters: 10\n")
    a, b = load_config(tmp_path / "a.toml"), load_config(tmp_path / "a.yaml")
    assert a.train == b.train and a.train.epsilon == (0.5,) and a.train.iters == 10
    assert a.data == load_config().data  # untouched sections keep the defaults
    assert a.source_file.endswith("a.toml")


@pytest.mark.parametrize(
    "text, key",
    [
        ("[train]\nepsilon = [1.0, -1.0]\n", "train.epsilon"),
        ("[select]\nk = 0\n", "select.k"),
        ("[select]\nmethods = ['peeling']\n", "select.methods"),
        ("[data]\nsource = 'store'\n", "data.path"),
        ("[data]\ntest_fraction = 1.0\n", "data.test_fraction"),
        ("[cluster]\nkind = 'slurm'\n", "cluster.jobqueue"),
        ("[cluster]\nkind = 'address'\n", "cluster.address"),
        ("[cluster]\nkind = 'address'\naddress = 'tcp://10.0.0.5:8786'\n", "cluster.insecure"),
        ("[cluster]\nkind = 'address'\naddress = '10.0.0.5:8786'\n", "cluster.address"),
        ("[cluster]\nkind = 'address'\naddress = 'tls://10.0.0.5:8786'\n", "cluster.tls_ca_file"),
        ("[cluster]\nkind = 'address'\naddress = 'tls://h:1'\ninsecure = true\n", "cluster.insecure"),
        ("[cluster]\ninsecure = 'yes'\n", "cluster.insecure"),
        ("[cluster]\ntls_key = 'k.pem'\n", "cluster.tls_key"),
        ("[cluster]\nmemory_limit = 0\n", "cluster.memory_limit"),
        ("[cluster]\nmemory_limit = 0.5\n", "cluster.memory_limit"),
        ("[cluster]\nmemory_limit = 'auto'\n", "cluster.memory_limit"),
        ("[cluster]\nmemory_limit = '-3GiB'\n", "cluster.memory_limit"),
        ("[cluster]\nmemory_limit = '10 parsecs'\n", "cluster.memory_limit"),
        ("[cluster]\nmemory_limit = true\n", "cluster.memory_limit"),
        ("[cluster]\nkind = 'slurm'\njobqueue = 'j.yaml'\nmemory_limit = '8GiB'\n", "cluster.memory_limit"),
        ("[cluster]\nkind = 'slurm'\njobqueue = 'j.yaml'\nhost = '0.0.0.0'\n", "cluster.host"),
        ("[train]\nfeatures = 'two-stage'\n[select]\nmethods = ['dp-sis']\n", "train.features"),
        ("[budget]\nepsilon = 1.0\ndelta = 1e-6\nextra = 1\n", "budget.extra"),
        ("[budget]\nepsilon = 0\ndelta = 1e-6\n", "budget.epsilon"),
        ("colour = 'red'\n", "colour"),
        ("[select]\nmethods = ['bss-top-r']\nbss_loss = 'logistic'\n", "select.bss_loss"),
        ("[select]\nbss_r = 0\n", "select.bss_r"),
        ("[select]\nbss_ridge = -1.0\n", "select.bss_ridge"),
        ("[select]\nbss_x_bound = 0\n", "select.bss_x_bound"),
        ("[select]\nbss_tol = 0.5\n", "select.bss_tol"),
        ("[select]\nbss_delta = 0\n", "select.bss_delta"),
        ("[select]\nbss_ptr_fraction = 1.0\n", "select.bss_ptr_fraction"),
        ("[select]\nbss_s = 3\n", "select.bss_s"),
        ("[train]\ndtype = 'float16'\n", "train.dtype"),
    ],
)
def test_bad_values_fail_naming_the_file_and_the_key(tmp_path: Path, text: str, key: str) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    with pytest.raises(ConfigError) as e:
        load_config(path)
    assert str(path) in str(e.value) and key in str(e.value)


def test_unparsable_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.toml"
    path.write_text("[train\n")
    with pytest.raises(ConfigError, match="broken.toml: not valid TOML"):
        load_config(path)


def test_release_keys_of_existing_configs_do_not_change() -> None:
    # the key 285fe83 gave this config: a re-run after an upgrade replays its releases, never re-charges
    assert load_config().step_key("select", "dp-sis", {"k": 20, "epsilon": 0.5}) == "demo/select/dp-sis/4bb9a0ea92ff"
    zero = load_config(overrides={"data": {"source": "synth", "zero_based": False}})
    assert zero.step_key("select", "dp-sis", {"k": 20, "epsilon": 0.5}) == "demo/select/dp-sis/4bb9a0ea92ff"
    # a train release's key as 1a42482 made it (before train.dtype): unchanged unset or "float64"
    for cfg in (load_config(), load_config(overrides={"train": {"dtype": "float64"}})):
        key = cfg.step_key("train", "fast-dp-fw", fit_params(cfg, "binary", "fast-dp-fw", 1.0, None))
        assert key == "demo/train/fast-dp-fw/12d8a660ee69"
    f32 = load_config(overrides={"train": {"dtype": "float32"}})
    assert f32.train.dtype == "float32"  # a float32 fit is another release
    assert f32.step_key("train", "fast-dp-fw", fit_params(f32, "binary", "fast-dp-fw", 1.0, None)) != key


def test_release_keys_follow_the_parameters() -> None:
    cfg = load_config()
    k1 = cfg.step_key("train", "fast-dp-fw", {"epsilon": 1.0})
    assert k1 == cfg.step_key("train", "fast-dp-fw", {"epsilon": 1.0})  # a re-run replays
    assert k1 != cfg.step_key("train", "fast-dp-fw", {"epsilon": 2.0})  # new parameters: a new release
    assert k1.startswith("demo/train/fast-dp-fw/")
    seeded = load_config(overrides={"seed": 3})
    assert seeded.step_seed(k1) == seeded.step_seed(k1) != seeded.step_seed(k1 + "x")


def test_jobqueue_yaml_gives_slurm_workers_the_solver_and_mip_resources() -> None:
    kw = slurm_kwargs(REPO / "deploy" / "jobqueue.yaml")
    assert kw["queue"] == "debug" and kw["processes"] == 1
    extra = kw["worker_extra_args"]
    assert extra[extra.index("--resources") + 1] == "solver=1,mip=1"


def test_workers_keep_glibcs_allocator_thresholds(tmp_path: Path) -> None:
    """Dask's MALLOC_TRIM_THRESHOLD_ fixed the mmap threshold: every array over 128 KiB was faulted in anew
    (a worker's ingest 62.0 s against 34.9 s: benchmarks/worker_allocator.py). SLURM jobs unset it in their
    script's first line, which bash and Dask's configuration read as meant (the other variables kept); the local
    cluster: tests/flows/test_runtime.py."""
    import subprocess
    import sys

    prologue = slurm_kwargs(REPO / "deploy" / "jobqueue.yaml")["job_script_prologue"]
    code = "import dask, distributed; print(dask.config.get('distributed.nanny.pre-spawn-environ'))"
    script = f'{prologue[0]}\n"{sys.executable}" -c "{code}"'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    assert "'MALLOC_TRIM_THRESHOLD_': None" in out and "'OMP_NUM_THREADS': 1" in out


@pytest.mark.parametrize(
    "yaml_lines, config, kept",
    [
        ("", {}, []),
        ("    job_script_prologue: ['module load x']\n", {}, ["module load x"]),
        ("    env_extra: ['export A=1']\n", {}, ["export A=1"]),  # its old name
        ("    job_script_prologue: ['a']\n    env_extra: ['b']\n", {}, ["a"]),  # dask-jobqueue ignores env_extra
        ("", {"jobqueue.slurm.job-script-prologue": ["source venv"]}, ["source venv"]),  # a site's Dask config
        ("", {"jobqueue.slurm.env-extra": ["source old"]}, ["source old"]),
    ],
)
def test_a_users_job_prologue_is_kept_after_dpdists_line(tmp_path: Path, yaml_lines, config, kept) -> None:
    """dask-jobqueue reads a prologue from Dask's configuration only when none is passed: dpdist passes its line
    and, after it, what dask-jobqueue would have taken (so a user's own export comes last and wins)."""
    path = tmp_path / "jq.yaml"
    path.write_text((REPO / "deploy" / "jobqueue.yaml").read_text() + yaml_lines)
    with dask.config.set(config):
        kw = slurm_kwargs(path)
    assert kw["job_script_prologue"][1:] == kept and "env_extra" not in kw
    assert kw["job_script_prologue"][0].startswith("export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON=")


def test_missing_jobqueue_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cluster.jobqueue"):
        slurm_kwargs(tmp_path / "nope.yaml")


def test_bss_methods_are_planned_with_their_selectors_exact_charges() -> None:
    from dpdist.flows.plan import bss_selector, plan
    from dpdist.selection.best_subset import BSSMistakesSelector, BSSTopRSelector

    cfg = load_config(
        overrides={
            "data": {"bounds": "clip"},
            "select": {
                "methods": ["bss-top-r", "bss-mistakes"],
                "k": 4,
                "epsilon": 2.0,
                "bss_loss": "hinge",
                "bss_r": 2.0,
                "bss_delta": 1e-7,
                "bss_ptr_fraction": 0.25,
            },
        }
    )
    top_r, mistakes = bss_selector(cfg, "bss-top-r", seed=3), bss_selector(cfg, "bss-mistakes")
    assert isinstance(top_r, BSSTopRSelector) and isinstance(mistakes, BSSMistakesSelector)
    assert (top_r.s, top_r.loss, top_r.r, top_r.ridge, top_r.bounds, top_r.random_state) == (
        4,
        "hinge",
        2.0,
        100.0,
        "clip",
        3,
    )
    assert (mistakes.delta, mistakes.ptr_fraction) == (1e-7, 0.25)
    charges = {p.method: p.charge for p in plan(cfg) if p.step == "select"}
    assert charges == {"bss-top-r": top_r.privacy_charge(), "bss-mistakes": mistakes.privacy_charge()}
    assert charges["bss-mistakes"].delta == 1e-7 and charges["bss-top-r"].delta == 0.0


def test_local_cluster_workers_hold_the_solver_and_mip_resources() -> None:
    from dpdist.flows.runtime import task_runner

    runner = task_runner(load_config().cluster)
    assert runner.cluster_kwargs["resources"] == {"solver": 1, "mip": 1}


def test_local_cluster_memory_limit_is_each_workers(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    from dpdist.cli import main
    from dpdist.flows.runtime import task_runner

    assert "memory_limit" not in task_runner(load_config().cluster).cluster_kwargs  # Dask's default: RAM / workers
    path = tmp_path / "mem.toml"
    for given, expected in (("'14GiB'", 14 * 2**30), ("'12 GB'", 12 * 10**9), ("8589934592", 2**33)):
        path.write_text(f"[cluster]\nmemory_limit = {given}\n")
        assert task_runner(load_config(path).cluster).cluster_kwargs["memory_limit"] == expected
    path.write_text("[cluster]\nmemory_limit = 'lots'\n")
    assert main(["run", str(path)]) == 2  # before any server or cluster starts
    err = capsys.readouterr().err
    assert "cluster.memory_limit" in err and "'lots'" in err and "Traceback" not in err


def test_local_cluster_defaults_to_loopback_and_tls() -> None:
    c = load_config().cluster
    assert c.host is None and c.dashboard_address == f"{LOOPBACK}:0" and c.insecure is False


def test_plain_tcp_scheduler_is_refused_with_exit_2_naming_the_key(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    from dpdist.cli import main

    path = tmp_path / "plain.toml"
    path.write_text("[cluster]\nkind = 'address'\naddress = 'tcp://127.0.0.1:8786'\n")
    assert main(["run", str(path)]) == 2  # before any server or cluster starts
    err = capsys.readouterr().err
    assert "cluster.address" in err and "cluster.insecure = true" in err and "Traceback" not in err
    path.write_text("[cluster]\nkind = 'address'\naddress = 'tcp://127.0.0.1:8786'\ninsecure = true\n")
    assert load_config(path).cluster.insecure  # the documented opt-out


def test_address_cluster_takes_existing_owner_only_credentials(tmp_path: Path) -> None:
    creds = {k: tmp_path / f"{k}.pem" for k in ("tls_ca_file", "tls_cert", "tls_key")}
    for p in creds.values():
        p.write_text("-----BEGIN-----\n")
        p.chmod(0o600)
    body = "[cluster]\nkind = 'address'\naddress = 'tls://10.0.0.5:8786'\n" + "".join(
        f"{k} = '{p}'\n" for k, p in creds.items()
    )
    path = tmp_path / "tls.toml"
    path.write_text(body)
    c = load_config(path).cluster
    assert (c.tls_ca_file, c.tls_cert, c.tls_key) == tuple(str(p) for p in creds.values())
    creds["tls_key"].chmod(0o644)  # a key others can read is refused, like ssh does
    with pytest.raises(ConfigError, match="cluster.tls_key: .* open to group/others .*chmod 600"):
        load_config(path)
    creds["tls_key"].unlink()
    with pytest.raises(ConfigError, match="cluster.tls_key: no such file"):
        load_config(path)


@pytest.mark.parametrize(
    "line, key",
    [
        ("    security: true\n", "'security'"),
        ("    protocol: tcp://\n", "'protocol'"),
        ("    scheduler_options: {dashboard_address: ':8787'}\n", "scheduler_options.dashboard_address"),
    ],
)
def test_jobqueue_yaml_cannot_turn_tls_or_the_dashboard_off(tmp_path: Path, line: str, key: str) -> None:
    path = tmp_path / "jq.yaml"
    path.write_text((REPO / "deploy" / "jobqueue.yaml").read_text() + line)
    with pytest.raises(ConfigError, match=f"cluster.jobqueue: .*{key}"):
        slurm_kwargs(path)


def test_jobqueue_workers_keep_their_dashboard_on_loopback() -> None:
    extra = slurm_kwargs(REPO / "deploy" / "jobqueue.yaml")["worker_extra_args"]
    assert extra[extra.index("--dashboard-address") + 1] == f"{LOOPBACK}:0"


@pytest.mark.parametrize(
    "extra, key",
    [
        ("task = 'binary'\nlabels = [-1, 1]\n", "data.n_features"),  # the largest index seen: one record changes it
        ("task = 'binary'\nlabels = [-1, 1]\nn_features = 5\nzero_based = 'auto'\n", "data.zero_based"),
        ("source = 'synth'\nzero_based = true\n", "data.zero_based"),
    ],
)
def test_an_svmlight_source_declares_its_columns(tmp_path: Path, extra: str, key: str) -> None:
    (tmp_path / "d.svm").write_text("1 1:1\n")
    src = "" if "source" in extra else "source = 'svmlight'\n"
    path = tmp_path / "c.toml"
    path.write_text(f"[data]\n{src}path = '{tmp_path / 'd.svm'}'\n{extra}")
    with pytest.raises(ConfigError, match=f"c.toml: {key}"):
        load_config(path)
    path.write_text(
        f"[data]\nsource = 'svmlight'\npath = '{tmp_path / 'd.svm'}'\ntask = 'binary'\nlabels = [-1, 1]\n"
        "n_features = 5\n"
    )
    assert load_config(path).data.zero_based is False  # one-based unless declared: LIBSVM's convention


def test_a_model_too_wide_for_the_data_is_refused_by_the_plan_before_any_charge(tmp_path: Path) -> None:
    """select-train's k (100) on 50 columns: the plan (which the run checks before ingest, counts and
    selections are charged) refuses it, not the train stage after the earlier releases."""
    from dpdist.exceptions import ParameterError
    from dpdist.flows.plan import plan

    (tmp_path / "a.toml").write_text(
        'name = "x"\n[data]\nd = 50\n[select]\nmethods = []\n[train]\nmethods = ["dp-sgd", "select-train"]\n'
    )
    cfg = load_config(tmp_path / "a.toml")
    with pytest.raises(ParameterError, match="k=100"):
        plan(cfg)
