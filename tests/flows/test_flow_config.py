"""The run config: embedded defaults, TOML and YAML files, and errors that name file and key."""

from __future__ import annotations

from pathlib import Path

import pytest

from flows.config import ConfigError, load_config
from flows.runtime import LOOPBACK, slurm_kwargs

REPO = Path(__file__).resolve().parents[2]


def test_embedded_defaults_are_the_main_job() -> None:
    cfg = load_config()
    assert cfg.source_file == "<defaults>"
    assert cfg.data.source == "synth" and cfg.cluster.kind == "local" and cfg.cluster.n_workers == 2
    assert cfg.select.methods == ("dp-sis", "two-stage") and cfg.train.methods == ("fast-dp-fw",)
    assert cfg.seed is None and cfg.step_seed("k") is None  # noise from OS entropy unless a seed is given
    spend = len(cfg.select.methods) * cfg.select.epsilon + len(cfg.train.methods) * sum(cfg.train.epsilon)
    assert spend <= cfg.budget.epsilon  # the embedded budget covers the embedded epsilon split


def test_toml_and_yaml_files_override_the_defaults(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('name = "x"\n[train]\nepsilon = 0.5\niters = 10\n')
    (tmp_path / "a.yaml").write_text("name: x\ntrain:\n  epsilon: 0.5\n  iters: 10\n")
    a, b = load_config(tmp_path / "a.toml"), load_config(tmp_path / "a.yaml")
    assert a.train == b.train and a.train.epsilon == (0.5,) and a.train.iters == 10
    assert a.data == load_config().data  # untouched sections keep the defaults
    assert a.source_file.endswith("a.toml")


@pytest.mark.parametrize("text, key", [
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
    ("[cluster]\nkind = 'slurm'\njobqueue = 'j.yaml'\nhost = '0.0.0.0'\n", "cluster.host"),
    ("[train]\nfeatures = 'two-stage'\n[select]\nmethods = ['dp-sis']\n", "train.features"),
    ("[budget]\nepsilon = 1.0\ndelta = 1e-6\nextra = 1\n", "budget.extra"),
    ("[budget]\nepsilon = 0\ndelta = 1e-6\n", "budget.epsilon"),
    ("colour = 'red'\n", "colour"),
])
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


def test_release_keys_follow_the_parameters() -> None:
    cfg = load_config()
    k1 = cfg.step_key("train", "fast-dp-fw", {"epsilon": 1.0})
    assert k1 == cfg.step_key("train", "fast-dp-fw", {"epsilon": 1.0})  # a re-run replays
    assert k1 != cfg.step_key("train", "fast-dp-fw", {"epsilon": 2.0})  # new parameters: a new release
    assert k1.startswith("demo/train/fast-dp-fw/")
    seeded = load_config(overrides={"seed": 3})
    assert seeded.step_seed(k1) == seeded.step_seed(k1) != seeded.step_seed(k1 + "x")


def test_jobqueue_yaml_gives_slurm_workers_the_solver_resource() -> None:
    kw = slurm_kwargs(REPO / "deploy" / "jobqueue.yaml")
    assert kw["queue"] == "debug" and kw["processes"] == 1
    extra = kw["worker_extra_args"]
    assert extra[extra.index("--resources") + 1] == "solver=1"


def test_missing_jobqueue_file_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cluster.jobqueue"):
        slurm_kwargs(tmp_path / "nope.yaml")


def test_local_cluster_defaults_to_loopback_and_tls() -> None:
    c = load_config().cluster
    assert c.host is None and c.dashboard_address == f"{LOOPBACK}:0" and c.insecure is False


def test_plain_tcp_scheduler_is_refused_with_exit_2_naming_the_key(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture) -> None:
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
        f"{k} = '{p}'\n" for k, p in creds.items())
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


@pytest.mark.parametrize("line, key", [
    ("    security: true\n", "'security'"),
    ("    protocol: tcp://\n", "'protocol'"),
    ("    scheduler_options: {dashboard_address: ':8787'}\n", "scheduler_options.dashboard_address"),
])
def test_jobqueue_yaml_cannot_turn_tls_or_the_dashboard_off(tmp_path: Path, line: str, key: str) -> None:
    path = tmp_path / "jq.yaml"
    path.write_text((REPO / "deploy" / "jobqueue.yaml").read_text() + line)
    with pytest.raises(ConfigError, match=f"cluster.jobqueue: .*{key}"):
        slurm_kwargs(path)


def test_jobqueue_workers_keep_their_dashboard_on_loopback() -> None:
    extra = slurm_kwargs(REPO / "deploy" / "jobqueue.yaml")["worker_extra_args"]
    assert extra[extra.index("--dashboard-address") + 1] == f"{LOOPBACK}:0"
