"""The run configuration of the end-to-end flow (TOML or YAML), validated in one place.

A config file holds any of the sections below; what it leaves out comes from the embedded
defaults (``flows/defaults.toml``), which are the main job ``dpdist run`` runs with no file::

    name = "demo"                  # release keys are <name>/<step>/<method>/<params hash>
    output = "results/run"         # stores, results.json, report.md and its plots
    ledger = "..."                 # default: --ledger, $DPDIST_LEDGER, ~/.dpdist/ledger.sqlite
    seed = 0                       # fixed noise for experiments only; absent = OS entropy

    [data]     source = "synth" | "svmlight" | "store"; name/n/d (synth), path (svmlight, store),
               n_features and zero_based (svmlight: the public number of columns, required, and
               whether indices start at 0, default false: one-based, the LIBSVM convention),
               task and labels (svmlight), test_fraction (0 with evaluate.public_test: no split),
               bounds = "check" | "clip", count_epsilon (the noisy train/test row counts; 0: none)
    [budget]   epsilon, delta, name: set for the dataset if the ledger has no budget for it yet
               (name: its public name, default random)
    [cluster]  kind = "local" | "address" | "slurm"; n_workers, threads_per_worker (local),
               memory_limit (local: each worker's, "10GiB" or bytes; default: RAM / n_workers),
               address (tls://host:port), jobqueue (path of a dask-jobqueue YAML, slurm),
               host (local: where scheduler and workers listen, default 127.0.0.1),
               dashboard_address (local, slurm: default 127.0.0.1:0, loopback only),
               tls_ca_file, tls_cert, tls_key (address: this client's credentials),
               insecure = true (DANGEROUS: plain, unauthenticated TCP; see runtime.py)
    [select]   methods (dp-sis, two-stage, bss-top-r, bss-mistakes), k (the support size s of
               best subset selection), epsilon (each), alpha (two-stage LASSO), n_blocks
               (two-stage; default floor(sqrt) of the noisy train row count); best subset
               selection (seed 002; MIP solves on workers holding the ``mip`` resource):
               bss_loss ("squared": least squares, a regression store; "hinge": a binary one),
               bss_r (l2-ball radius), bss_ridge (default 120 squared, 100 hinge), bss_x_bound,
               bss_y_bound (Assumption 1; data.bounds = "clip" clips to them), bss_tol
               (certified tolerance, a fraction of Delta), bss_nonprivate_time_limit (default
               none: every solve runs to its certificate; seconds per MIP, past which the release
               aborts -- OUTSIDE the privacy guarantee, the ledger marks it), bss_delta and bss_ptr_fraction
               (bss-mistakes' propose-test-release: its delta and its share of epsilon)
    [train]    methods (select-train -- the default learner --, dp-sgd, dp-gd, dp-iht, private-search,
               fast-dp-fw, dp-fw, rnm-screen, adp-screen, objective-perturbation), tune = true (adds
               private-search: the private choice among the default grid), epsilon (one or a list:
               the privacy-utility curve), delta (each model), n_records (the gradient learners'
               public count of the train rows: their batch rate and steps; default for a synthetic
               source its n times 1 - test_fraction; any value is private, a far one costs utility),
               lam, iters (Frank-Wolfe),
               calibration ("safe" | "paper"), features = "all" | a select method
               (objective-perturbation needs one); screening (rnm-screen, adp-screen: fast DP-FW
               with RNM-/ADP-Screen): screen_epsilon, screen_delta (or screen_rho), screen_schedule
               (every m-th iteration, or a list), screen_rule ("safe" | "seed"), n_max (a public
               upper bound on the train rows); dtype ("float64" | "float32": the fit holds the
               train half's values in that type; float32 halves their memory, each value rounded
               to the nearest float32, which keeps every bound)
    [evaluate] epsilon (each model's private held-out metrics and curve), public_test (a
               separate svmlight file or store the user declares public: exact metrics), bins,
               points

Every release is charged to the source dataset and admitted by the budget's privacy filter; the flow
stops with ``BudgetExceeded`` at the first release the ledger refuses. The train/test split
is keyed by the dataset's secret split key (``dpdist.data.split``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tomllib
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from dpdist.exceptions import ParameterError
from dpdist.methods import GRADIENT_METHODS as LEARNER_NAMES
from dpdist.methods import SEARCH
from dpdist.utils.random import derive_seed

__all__ = ["RunConfig", "load_config", "store_paths", "DEFAULTS_FILE", "BSS_METHODS"]

DEFAULTS_FILE = "defaults.toml"
SOURCES = ("synth", "svmlight", "store")
CLUSTERS = ("local", "address", "slurm")
BSS_METHODS = ("bss-top-r", "bss-mistakes")
SELECT_METHODS = ("dp-sis", "two-stage", *BSS_METHODS)
GRADIENT_METHODS = (*LEARNER_NAMES, SEARCH)  # dpdist.gradient_models, dpdist.tuning
TRAIN_METHODS = (*GRADIENT_METHODS, "fast-dp-fw", "dp-fw", "rnm-screen", "adp-screen", "objective-perturbation")
FW_METHODS = ("fast-dp-fw", "dp-fw", "rnm-screen", "adp-screen")
SCREEN_METHODS = ("rnm-screen", "adp-screen")


_REMOVED = {
    "data": {
        "split_seed": "removed: each record's side of the split is decided by the record and the "
        "dataset's secret split key in the ledger (a split by row position with a public "
        "seed broke the privacy guarantee); delete the key"
    },
    "select": {
        "bss_time_limit": "removed: a release that aborted at a time limit published whether the "
        "solve was slow, a function of the data, un-noised. Best subset selection "
        "now runs every solve to its certificate; delete the key (or, outside the "
        "privacy guarantee and marked so in the ledger, set "
        "bss_nonprivate_time_limit)"
    },
}


class ConfigError(ParameterError):
    """A config value that cannot be run; the message names the file and the key."""


@dataclass(frozen=True)
class DataConfig:
    source: str
    name: str | None = None
    n: int | None = None
    d: int | None = None
    data_seed: int = 1
    path: str | None = None
    n_features: int | None = None
    zero_based: bool = False
    test_fraction: float = 0.2
    bounds: str = "check"
    count_epsilon: float = 0.02
    task: str | None = None
    labels: tuple[float, ...] | None = None


@dataclass(frozen=True)
class BudgetConfig:
    epsilon: float | None = None
    delta: float | None = None
    name: str | None = None


@dataclass(frozen=True)
class ClusterConfig:
    kind: str = "local"
    n_workers: int = 2
    threads_per_worker: int = 1
    memory_limit: str | int | None = None  # local: per worker, "10GiB" or bytes; None = Dask's (RAM / n_workers)
    address: str | None = None
    jobqueue: str | None = None
    host: str | None = None  # local: None = 127.0.0.1
    dashboard_address: str = "127.0.0.1:0"
    insecure: bool = False  # True: plain TCP with no authentication between client, scheduler, workers
    tls_ca_file: str | None = None  # address: the CA, certificate and key this client presents
    tls_cert: str | None = None
    tls_key: str | None = None


@dataclass(frozen=True)
class SelectConfig:
    methods: tuple[str, ...] = ()
    k: int = 10
    epsilon: float = 0.5
    alpha: float = 0.1
    n_blocks: int | None = None
    bss_loss: str = "squared"
    bss_r: float = 1.1
    bss_ridge: float | None = None  # None: 120 (squared), 100 (hinge), seed 002's values
    bss_x_bound: float = 0.5
    bss_y_bound: float = 0.5
    bss_tol: float = 1e-3
    bss_nonprivate_time_limit: float | None = None
    bss_delta: float = 1e-6
    bss_ptr_fraction: float = 0.5


@dataclass(frozen=True)
class TrainConfig:
    methods: tuple[str, ...] = ()
    epsilon: tuple[float, ...] = ()
    delta: float = 1e-7
    n_records: int | None = None
    tune: bool = False
    lam: float = 50.0
    iters: int = 4000
    features: str = "all"
    calibration: str = "safe"
    screen_epsilon: float | None = None
    screen_delta: float | None = None
    screen_rho: float | None = None
    screen_schedule: Any = 1
    screen_rule: str = "safe"
    n_max: int | None = None
    dtype: str = "float64"

    def screening(self) -> dict[str, Any]:
        """The estimator options of the screening methods."""
        sched = list(self.screen_schedule) if isinstance(self.screen_schedule, (list, tuple)) else self.screen_schedule
        return {
            "screen_epsilon": self.screen_epsilon,
            "screen_delta": self.screen_delta,
            "screen_rho": self.screen_rho,
            "screen_schedule": sched,
            "screen_rule": self.screen_rule,
            "n_max": self.n_max,
        }


@dataclass(frozen=True)
class EvaluateConfig:
    epsilon: float = 0.1
    public_test: str | None = None
    bins: int = 40
    points: int = 8


@dataclass(frozen=True)
class RunConfig:
    name: str
    output: str
    data: DataConfig
    budget: BudgetConfig
    cluster: ClusterConfig
    select: SelectConfig
    train: TrainConfig
    evaluate: EvaluateConfig
    ledger: str | None = None
    seed: int | None = None
    source_file: str = "<defaults>"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def train_methods(self) -> tuple[str, ...]:
        """The learners the train stage releases: ``train.methods``, and ``private-search`` with ``tune``."""
        t = self.train
        return t.methods + (("private-search",) if t.tune and "private-search" not in t.methods else ())

    def train_records(self, counts: dict[str, float] | None = None) -> int | None:
        """The gradient learners' public count of the train rows: ``train.n_records``, a synthetic
        source's n times 1 - test_fraction (the generator's public parameters), or the run's released
        noisy train count (``counts``: the counts release's result; post-processing). None before it."""
        if self.train.n_records is not None:
            return int(self.train.n_records)
        if self.data.source == "synth" and self.data.n is not None:
            return max(1, int(round(self.data.n * (1.0 - self.data.test_fraction))))
        if counts and counts.get("train") is not None:
            return max(1, int(round(counts["train"])))
        return None

    def step_key(self, step: str, method: str, params: dict[str, Any]) -> str:
        """The release key of one step: the same config re-run replays, never re-charges. A data key
        added later enters the hash only when set away from its default (``zero_based``), so the
        keys of configs written before it stay the same."""
        data = asdict(self.data)
        if not data["zero_based"]:
            del data["zero_based"]
        digest = hashlib.sha256(json.dumps({"data": data, **params}, sort_keys=True, default=str).encode()).hexdigest()[
            :12
        ]
        return f"{self.name}/{step}/{method}/{digest}"

    def step_seed(self, key: str) -> int | None:
        """Noise seed of one step: None (OS entropy) unless the config fixes ``seed``."""
        return derive_seed(self.seed, key)


def store_paths(cfg: RunConfig) -> dict[str, str]:
    """Where a run puts (or finds) the source store, the two halves of the split and a public test set."""
    root = Path(cfg.output) / "stores"
    source = cfg.data.path if cfg.data.source == "store" else str(root / "source")
    return {
        "source": str(source),
        "train": str(root / "train"),
        "test": str(root / "test"),
        "public_test": str(root / "public-test"),
    }


def _read(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigError(f"cannot read config {path}: {e.strerror}") from None
    try:
        if path.suffix in (".yaml", ".yml"):
            doc = yaml.safe_load(text) or {}
        else:
            doc = tomllib.loads(text)
    except (tomllib.TOMLDecodeError, yaml.YAMLError) as e:
        raise ConfigError(f"{path}: not valid {'YAML' if path.suffix in ('.yaml', '.yml') else 'TOML'}: {e}") from None
    if not isinstance(doc, dict):
        raise ConfigError(f"{path}: the config must be a table/mapping at top level")
    return doc


def _defaults() -> dict[str, Any]:
    return tomllib.loads(resources.files("dpdist.flows").joinpath(DEFAULTS_FILE).read_text())


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, msg: str) -> None:
        raise ConfigError(f"{self.source}: {key}: {msg}")

    def section(self, doc: dict[str, Any], name: str, cls: type) -> Any:
        sec = doc.get(name, {})
        if not isinstance(sec, dict):
            self.fail(name, "must be a table")
        allowed = set(cls.__dataclass_fields__)
        for k in sec:
            if k in _REMOVED.get(name, {}):
                self.fail(f"{name}.{k}", _REMOVED[name][k])
            if k not in allowed:
                self.fail(f"{name}.{k}", f"unknown key (allowed: {', '.join(sorted(allowed))})")
        try:
            return cls(**sec)
        except TypeError as e:
            self.fail(name, str(e))

    def number(
        self,
        key: str,
        v: Any,
        lo: float | None = None,
        hi: float | None = None,
        integer: bool = False,
        lo_open: bool = False,
        hi_open: bool = False,
    ) -> Any:
        if isinstance(v, bool) or not isinstance(v, int if integer else (int, float)):
            self.fail(key, f"must be {'an integer' if integer else 'a number'}, got {v!r}")
        if v != v:
            self.fail(key, "must not be NaN")
        if lo is not None and (v <= lo if lo_open else v < lo):
            self.fail(key, f"must be {'>' if lo_open else '>='} {lo}, got {v}")
        if hi is not None and (v >= hi if hi_open else v > hi):
            self.fail(key, f"must be {'<' if hi_open else '<='} {hi}, got {v}")
        return int(v) if integer else float(v)

    def choice(self, key: str, v: Any, options: tuple[str, ...]) -> str:
        if v not in options:
            self.fail(key, f"must be one of {', '.join(options)}, got {v!r}")
        return v


def memory_limit_bytes(v: Any) -> int | None:
    """``cluster.memory_limit`` in bytes: a size with a unit ("10GiB", "12 GB", Dask's
    ``parse_bytes``) or a whole number of bytes, > 0; None for anything else (a fraction, "auto",
    a bool, zero: Dask reads those differently, so they are refused rather than guessed)."""
    from dask.utils import parse_bytes

    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        n = v
    elif isinstance(v, str) and v.strip() and not v.strip().replace(".", "", 1).isdigit():
        try:
            n = parse_bytes(v)
        except (ValueError, TypeError):
            return None
    else:
        return None
    return int(n) if n > 0 else None


def _check_cluster(c: _Checker, cluster: ClusterConfig) -> None:
    """The ``[cluster]`` section: kind and sizes, bind addresses, and TLS unless ``insecure``."""
    c.choice("cluster.kind", cluster.kind, CLUSTERS)
    c.number("cluster.n_workers", cluster.n_workers, 1, integer=True)
    c.number("cluster.threads_per_worker", cluster.threads_per_worker, 1, integer=True)
    if cluster.memory_limit is not None:
        if cluster.kind != "local":
            c.fail(
                "cluster.memory_limit",
                "only for kind 'local' (SLURM workers take the jobqueue YAML's memory, "
                "an address cluster's workers their own --memory-limit)",
            )
        if memory_limit_bytes(cluster.memory_limit) is None:
            c.fail(
                "cluster.memory_limit",
                f'must be a positive size with a unit (e.g. "10GiB", "12 GB") or a '
                f"positive number of bytes, got {cluster.memory_limit!r}",
            )
    if not isinstance(cluster.insecure, bool):
        c.fail("cluster.insecure", f"must be true or false, got {cluster.insecure!r}")
    for key in ("host", "dashboard_address"):
        v = getattr(cluster, key)
        if v is not None and (not isinstance(v, str) or not v):
            c.fail(f"cluster.{key}", f"must be a non-empty string, got {v!r}")
    if cluster.host is not None and cluster.kind != "local":
        c.fail("cluster.host", "only for kind 'local' (a SLURM scheduler listens where its workers reach it)")
    tls = {k: getattr(cluster, k) for k in ("tls_ca_file", "tls_cert", "tls_key")}
    if cluster.kind != "address":
        for k, v in tls.items():
            if v is not None:
                c.fail(
                    f"cluster.{k}",
                    "only for kind 'address': local and slurm clusters get fresh credentials for every run",
                )
    if cluster.kind == "slurm" and not cluster.jobqueue:
        c.fail("cluster.jobqueue", "kind 'slurm' needs a dask-jobqueue YAML (e.g. deploy/jobqueue.yaml)")
    if cluster.kind != "address":
        return
    if not cluster.address or not isinstance(cluster.address, str):
        c.fail("cluster.address", "kind 'address' needs the scheduler address (tls://host:port)")
    scheme = cluster.address.split("://")[0] if "://" in cluster.address else "tcp"
    if cluster.insecure:
        if scheme == "tls" or any(v is not None for v in tls.values()):
            c.fail(
                "cluster.insecure",
                "insecure = true is for a plain tcp:// scheduler; a tls:// one takes "
                "tls_ca_file, tls_cert and tls_key without it",
            )
        return
    if scheme != "tls":
        c.fail(
            "cluster.address",
            f"{cluster.address!r} is not TLS: anyone who reaches a {scheme}:// scheduler "
            "can run code as you and read the data; start it with TLS (tls://) and give "
            "cluster.tls_ca_file, tls_cert, tls_key, or set cluster.insecure = true "
            "(dangerous) on a network only you can reach",
        )
    for k, v in tls.items():
        if v is None:
            c.fail(
                f"cluster.{k}",
                "a tls:// scheduler needs this client's CA, certificate and key (tls_ca_file, tls_cert, tls_key)",
            )
        if not isinstance(v, str) or not Path(v).is_file():
            c.fail(f"cluster.{k}", f"no such file {v!r}")
    if Path(tls["tls_key"]).stat().st_mode & 0o077:
        c.fail(
            "cluster.tls_key",
            f"{tls['tls_key']} is open to group/others "
            f"(mode {Path(tls['tls_key']).stat().st_mode & 0o777:04o}); chmod 600 it",
        )


def load_config(path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The embedded defaults, updated by the file at ``path`` and then by ``overrides``."""
    doc = _defaults()
    source = "<defaults>"
    if path is not None:
        source = str(path)
        user = _read(Path(path))
        if "budget" not in user and "data" in user and _merge(doc["data"], user["data"]) != doc["data"]:
            # the embedded budget belongs to the demo's synthetic data: other data needs its own choice
            doc = {**doc, "budget": {}}
        doc = _merge(doc, user)
    if overrides:
        doc = _merge(doc, overrides)
    c = _Checker(source)
    known = {"name", "output", "ledger", "seed", "data", "budget", "cluster", "select", "train", "evaluate"}
    for k in doc:
        if k not in known:
            c.fail(k, f"unknown key (allowed: {', '.join(sorted(known))})")
    if isinstance(doc.get("data"), dict) and isinstance(doc["data"].get("labels"), list):
        doc["data"] = {**doc["data"], "labels": tuple(doc["data"]["labels"])}
    for k in ("select", "train"):
        if isinstance(doc.get(k), dict):
            for list_key in ("methods", "epsilon") if k == "train" else ("methods",):
                v = doc[k].get(list_key)
                if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                    doc[k] = {**doc[k], list_key: [v]}
                if isinstance(doc[k].get(list_key), list):
                    doc[k] = {**doc[k], list_key: tuple(doc[k][list_key])}
    data = c.section(doc, "data", DataConfig)
    budget = c.section(doc, "budget", BudgetConfig)
    cluster = c.section(doc, "cluster", ClusterConfig)
    select = c.section(doc, "select", SelectConfig)
    train = c.section(doc, "train", TrainConfig)
    evaluate = c.section(doc, "evaluate", EvaluateConfig)

    name = doc.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        c.fail("name", f"must be a non-empty string without '/', got {name!r}")
    if not isinstance(doc.get("output"), str) or not doc["output"]:
        c.fail("output", "must be a directory path")
    seed = doc.get("seed")
    if seed is not None:
        seed = c.number("seed", seed, 0, integer=True)

    c.choice("data.source", data.source, SOURCES)
    if data.source == "synth" and not data.name:
        c.fail("data.name", "a synthetic set needs its name (e.g. rcv1, kdda, news20)")
    if data.source in ("svmlight", "store") and not data.path:
        c.fail("data.path", f"source {data.source!r} needs a path")
    if data.source == "svmlight" and data.path and not Path(data.path).is_file():
        c.fail("data.path", f"no such file {data.path}")
    if data.source == "store" and data.path and not Path(data.path).is_dir():
        c.fail("data.path", f"no such store {data.path}")
    if data.source == "svmlight":  # the task, classes and columns must be public: one record cannot recode the others
        if data.n_features is None:
            c.fail(
                "data.n_features",
                "an svmlight source needs its number of columns (public, e.g. the data set's "
                "documented dimension): read as the largest index seen, one record could "
                "change it",
            )
        if not isinstance(data.zero_based, bool):
            c.fail("data.zero_based", f"must be true or false, got {data.zero_based!r}")
        c.choice("data.task", data.task, ("binary", "multiclass", "regression"))
        if data.task != "regression" and not data.labels:
            c.fail("data.labels", f"task {data.task!r} needs its classes, e.g. labels = [-1, 1] (public knowledge)")
        if data.task == "regression" and data.labels:
            c.fail("data.labels", "a regression has no classes")
    elif data.zero_based:
        c.fail("data.zero_based", "give the index base of an svmlight source only")
    elif data.task is not None or data.labels is not None:
        c.fail(
            "data.task",
            "give the task and labels of an svmlight source only (a store or a synthetic set records its own)",
        )
    if data.labels is not None:
        for v in data.labels:
            c.number("data.labels", v)
    for key in ("n", "d", "n_features"):
        if getattr(data, key) is not None:
            c.number(f"data.{key}", getattr(data, key), 1, integer=True)
    if data.test_fraction == 0 and not evaluate.public_test:
        c.fail("data.test_fraction", "0 (no split) needs evaluate.public_test: a separate test file declared public")
    c.number("data.test_fraction", data.test_fraction, 0, 1, hi_open=True)
    c.choice("data.bounds", data.bounds, ("check", "clip"))
    c.number("data.count_epsilon", data.count_epsilon, 0)

    if (budget.epsilon is None) != (budget.delta is None):
        c.fail("budget", "give both epsilon and delta, or neither")
    if budget.epsilon is not None:
        c.number("budget.epsilon", budget.epsilon, 0, lo_open=True)
        c.number("budget.delta", budget.delta, 0, 1, hi_open=True)
    if budget.name is not None and (not isinstance(budget.name, str) or not budget.name.strip()):
        c.fail("budget.name", f"must be a non-empty string, got {budget.name!r}")

    _check_cluster(c, cluster)

    for m in select.methods:
        c.choice("select.methods", m, SELECT_METHODS)
    c.number("select.k", select.k, 1, integer=True)
    c.number("select.epsilon", select.epsilon, 0, lo_open=True)
    c.number("select.alpha", select.alpha, 0, lo_open=True)
    if select.n_blocks is not None:
        c.number("select.n_blocks", select.n_blocks, 1, integer=True)
    elif "two-stage" in select.methods and data.count_epsilon == 0:
        c.fail(
            "select.n_blocks",
            "two-stage needs a public number of blocks, or data.count_epsilon > 0 to derive "
            "it from the noisy train row count",
        )
    c.choice("select.bss_loss", select.bss_loss, ("squared", "hinge"))
    for key in ("bss_r", "bss_x_bound", "bss_y_bound"):
        c.number(f"select.{key}", getattr(select, key), 0, lo_open=True)
    if select.bss_nonprivate_time_limit is not None:
        c.number("select.bss_nonprivate_time_limit", select.bss_nonprivate_time_limit, 0, lo_open=True)
    if select.bss_ridge is not None:
        c.number("select.bss_ridge", select.bss_ridge, 0, lo_open=True)
    c.number("select.bss_tol", select.bss_tol, 0, 0.05, lo_open=True)
    c.number("select.bss_delta", select.bss_delta, 0, 0.5, lo_open=True, hi_open=True)
    c.number("select.bss_ptr_fraction", select.bss_ptr_fraction, 0, 1, lo_open=True, hi_open=True)

    for m in train.methods:
        c.choice("train.methods", m, TRAIN_METHODS)
    if not isinstance(train.tune, bool):
        c.fail("train.tune", f"must be true or false, got {train.tune!r}")
    if train.n_records is not None:
        c.number("train.n_records", train.n_records, 1, integer=True)

    if (train.methods or train.tune) and not train.epsilon:
        c.fail("train.epsilon", "give at least one epsilon")
    for e in train.epsilon:
        c.number("train.epsilon", e, 0, lo_open=True)
    c.number("train.delta", train.delta, 0, 1, lo_open=True, hi_open=True)
    c.number("train.lam", train.lam, 0, lo_open=True)
    c.number("train.iters", train.iters, 1, integer=True)
    c.choice("train.calibration", train.calibration, ("safe", "paper"))
    c.choice("train.dtype", train.dtype, ("float64", "float32"))
    if train.features != "all" and train.features not in select.methods:
        c.fail(
            "train.features", f"must be 'all' or one of select.methods {list(select.methods)}, got {train.features!r}"
        )
    if "objective-perturbation" in train.methods and train.features == "all":
        c.fail("train.features", "objective-perturbation fits on a released selection: name a select method")
    if any(m in SCREEN_METHODS for m in train.methods):
        if train.screen_rho is not None:
            c.number("train.screen_rho", train.screen_rho, 0, lo_open=True)
            if train.screen_epsilon is not None:
                c.fail("train.screen_rho", "give screen_epsilon/screen_delta or screen_rho, not both")
        else:
            for key in ("screen_epsilon", "screen_delta"):
                if getattr(train, key) is None:
                    c.fail(f"train.{key}", "rnm-screen/adp-screen need screen_epsilon and screen_delta (or screen_rho)")
            c.number("train.screen_epsilon", train.screen_epsilon, 0, lo_open=True)
            c.number("train.screen_delta", train.screen_delta, 0, 1, lo_open=True, hi_open=True)
        if train.n_max is None:
            c.fail("train.n_max", "rnm-screen/adp-screen need a public upper bound on the number of train rows")
        c.number("train.n_max", train.n_max, 1, integer=True)
        c.choice("train.screen_rule", train.screen_rule, ("safe", "seed"))
        from dpdist.solvers.screening import schedule_mask

        try:
            schedule_mask(
                list(train.screen_schedule)
                if isinstance(train.screen_schedule, (list, tuple))
                else train.screen_schedule,
                train.iters,
            )
        except ParameterError as e:
            c.fail("train.screen_schedule", str(e).removeprefix("screen_schedule: "))
    c.number("evaluate.epsilon", evaluate.epsilon, 0, lo_open=True)
    c.number("evaluate.bins", evaluate.bins, 2, integer=True)
    if evaluate.bins % 2:
        c.fail("evaluate.bins", f"must be even (one bin edge at margin 0), got {evaluate.bins}")
    c.number("evaluate.points", evaluate.points, 1, integer=True)
    if evaluate.public_test is not None and not Path(evaluate.public_test).exists():
        c.fail("evaluate.public_test", f"no such file or store {evaluate.public_test}")
    if not select.methods and not train.methods:
        c.fail("select.methods", "nothing to run: give select.methods or train.methods")
    gradient = [m for m in train.methods if m in GRADIENT_METHODS] or (["private-search"] if train.tune else [])
    if gradient and train.n_records is None and data.source != "synth" and data.count_epsilon == 0:
        c.fail(
            "train.n_records",
            f"{gradient[0]} needs a public count of the train rows (it sets the batch rate "
            "and the number of steps; any value keeps the guarantee, a far one costs utility): "
            "give the documented size of the data times 1 - test_fraction, or release a noisy "
            "count (data.count_epsilon > 0)",
        )

    return RunConfig(
        name=name,
        output=doc["output"],
        data=data,
        budget=budget,
        cluster=cluster,
        select=select,
        train=train,
        evaluate=evaluate,
        ledger=doc.get("ledger"),
        seed=seed,
        source_file=source,
    )
