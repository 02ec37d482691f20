"""Reading a run config (TOML or YAML) over the embedded defaults, and checking every key.

Unknown keys and bad values fail here, before anything runs, with a :class:`ConfigError` naming
the file and the key. The keys and their meaning: :mod:`dpdist.flows.config.schema`.
"""

from __future__ import annotations

import os
import tomllib
from importlib import resources
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import yaml

from dpdist.exceptions import ParameterError
from dpdist.flows.config.schema import (
    CLUSTERS,
    DEFAULTS_FILE,
    SCREEN_METHODS,
    SELECT_METHODS,
    SOURCES,
    TRAIN_METHODS,
    BudgetConfig,
    ClusterConfig,
    ConfigError,
    DataConfig,
    EvaluateConfig,
    RunConfig,
    SelectConfig,
    TrainConfig,
)
from dpdist.methods import REGISTRY, SEARCH

__all__ = ["load_config", "memory_limit_bytes"]

TOP_LEVEL = ("name", "output", "ledger", "seed", "data", "budget", "cluster", "select", "train", "evaluate")
_Section = TypeVar("_Section")

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
    """The embedded defaults (``flows/defaults.toml``): the main job ``dpdist run`` runs with no file."""
    return tomllib.loads(resources.files("dpdist.flows").joinpath(DEFAULTS_FILE).read_text())


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


class _Checker:
    def __init__(self, source: str) -> None:
        self.source = source

    def fail(self, key: str, msg: str) -> NoReturn:
        raise ConfigError(f"{self.source}: {key}: {msg}")

    def section(self, doc: dict[str, Any], name: str, cls: type[_Section]) -> _Section:
        sec = doc.get(name, {})
        if not isinstance(sec, dict):
            self.fail(name, "must be a table")
        allowed = set(getattr(cls, "__dataclass_fields__"))
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
        return str(v)


def memory_limit_bytes(v: Any) -> int | None:
    """A worker memory size in bytes: a positive int, or a string with a unit that Dask parses
    ("10GiB", "12 GB"); None for anything else (a bare number string is ambiguous, a fraction or a
    negative size means nothing here: they are refused rather than guessed)."""
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


def _check_cluster_kind(c: _Checker, cluster: ClusterConfig) -> None:
    """``[cluster]``: the kind, the sizes, the local memory limit and the bind addresses."""
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


def _check_cluster(c: _Checker, cluster: ClusterConfig) -> None:
    """The ``[cluster]`` section: kind and sizes, bind addresses, and TLS unless ``insecure``."""
    _check_cluster_kind(c, cluster)
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
    address = cluster.address
    if not address or not isinstance(address, str):
        c.fail("cluster.address", "kind 'address' needs the scheduler address (tls://host:port)")
    scheme = address.split("://")[0] if "://" in address else "tcp"
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
            f"{address!r} is not TLS: anyone who reaches a {scheme}:// scheduler "
            "can run code as you and read the data; start it with TLS (tls://) and give "
            "cluster.tls_ca_file, tls_cert, tls_key, or set cluster.insecure = true "
            "(dangerous) on a network only you can reach",
        )
    _check_tls_files(c, tls)


def _check_tls_files(c: _Checker, tls: dict[str, Any]) -> None:
    """A tls:// scheduler's client credentials: all three, existing, the key private to its owner."""
    for k, v in tls.items():
        if v is None:
            c.fail(
                f"cluster.{k}",
                "a tls:// scheduler needs this client's CA, certificate and key (tls_ca_file, tls_cert, tls_key)",
            )
        if not isinstance(v, str) or not Path(v).is_file():
            c.fail(f"cluster.{k}", f"no such file {v!r}")
    mode = Path(tls["tls_key"]).stat().st_mode
    if mode & 0o077:
        c.fail("cluster.tls_key", f"{tls['tls_key']} is open to group/others (mode {mode & 0o777:04o}); chmod 600 it")


def _document(path: str | os.PathLike[str] | None, overrides: dict[str, Any] | None) -> tuple[dict[str, Any], str]:
    """The merged document (defaults, the file at ``path``, ``overrides``) and the name of its source."""
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
    return doc, source


def _normalise(c: _Checker, doc: dict[str, Any]) -> dict[str, Any]:
    """Unknown top-level keys refused; a single method or epsilon made a list, the lists tuples."""
    for k in doc:
        if k not in TOP_LEVEL:
            c.fail(k, f"unknown key (allowed: {', '.join(sorted(TOP_LEVEL))})")
    if isinstance(doc.get("data"), dict) and isinstance(doc["data"].get("labels"), list):
        doc = {**doc, "data": {**doc["data"], "labels": tuple(doc["data"]["labels"])}}
    for k in ("select", "train"):
        if isinstance(doc.get(k), dict):
            for list_key in ("methods", "epsilon") if k == "train" else ("methods",):
                v = doc[k].get(list_key)
                if isinstance(v, (int, float, str)) and not isinstance(v, bool):
                    doc = {**doc, k: {**doc[k], list_key: [v]}}
                if isinstance(doc[k].get(list_key), list):
                    doc = {**doc, k: {**doc[k], list_key: tuple(doc[k][list_key])}}
    return doc


def _check_top(c: _Checker, doc: dict[str, Any]) -> tuple[str, str, int | None]:
    """The top-level keys: name, output and seed."""
    name = doc.get("name")
    if not isinstance(name, str) or not name or "/" in name:
        c.fail("name", f"must be a non-empty string without '/', got {name!r}")
    output = doc.get("output")
    if not isinstance(output, str) or not output:
        c.fail("output", "must be a directory path")
    seed = doc.get("seed")
    if seed is not None:
        seed = c.number("seed", seed, 0, integer=True)
    return name, output, seed


def _check_data_source(c: _Checker, data: DataConfig) -> None:
    """``[data]``: the source, its path, and an svmlight file's public task, classes and columns."""
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


def _check_data(c: _Checker, data: DataConfig, evaluate: EvaluateConfig) -> None:
    """``[data]``: the source, then the numbers and the split."""
    _check_data_source(c, data)
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


def _check_budget(c: _Checker, budget: BudgetConfig) -> None:
    if (budget.epsilon is None) != (budget.delta is None):
        c.fail("budget", "give both epsilon and delta, or neither")
    if budget.epsilon is not None:
        c.number("budget.epsilon", budget.epsilon, 0, lo_open=True)
        c.number("budget.delta", budget.delta, 0, 1, hi_open=True)
    if budget.name is not None and (not isinstance(budget.name, str) or not budget.name.strip()):
        c.fail("budget.name", f"must be a non-empty string, got {budget.name!r}")


def _check_select(c: _Checker, select: SelectConfig, data: DataConfig) -> None:
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


def _check_train(c: _Checker, train: TrainConfig, select: SelectConfig) -> None:
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
        _check_screening(c, train)


def _check_screening(c: _Checker, train: TrainConfig) -> None:
    """The screening options of rnm-screen / adp-screen: a budget, a public row bound and a schedule."""
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
            list(train.screen_schedule) if isinstance(train.screen_schedule, (list, tuple)) else train.screen_schedule,
            train.iters,
        )
    except ParameterError as e:
        c.fail("train.screen_schedule", str(e).removeprefix("screen_schedule: "))


def _check_evaluate(c: _Checker, evaluate: EvaluateConfig) -> None:
    c.number("evaluate.epsilon", evaluate.epsilon, 0, lo_open=True)
    c.number("evaluate.bins", evaluate.bins, 2, integer=True)
    if evaluate.bins % 2:
        c.fail("evaluate.bins", f"must be even (one bin edge at margin 0), got {evaluate.bins}")
    c.number("evaluate.points", evaluate.points, 1, integer=True)
    if evaluate.public_test is not None and not Path(evaluate.public_test).exists():
        c.fail("evaluate.public_test", f"no such file or store {evaluate.public_test}")


def _check_run(c: _Checker, data: DataConfig, select: SelectConfig, train: TrainConfig) -> None:
    """Across sections: something to run, and the gradient learners' public count of the train rows."""
    if not select.methods and not train.methods:
        c.fail("select.methods", "nothing to run: give select.methods or train.methods")
    methods = train.methods + ((SEARCH,) if train.tune else ())
    gradient = [m for m in methods if m in REGISTRY and REGISTRY[m].counted]  # they take a public count of the rows
    if gradient and train.n_records is None and data.source != "synth" and data.count_epsilon == 0:
        c.fail(
            "train.n_records",
            f"{gradient[0]} needs a public count of the train rows (it sets the batch rate "
            "and the number of steps; any value keeps the guarantee, a far one costs utility): "
            "give the documented size of the data times 1 - test_fraction, or release a noisy "
            "count (data.count_epsilon > 0)",
        )


def load_config(path: str | os.PathLike[str] | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The embedded defaults, updated by the file at ``path`` and then by ``overrides``, checked."""
    doc, source = _document(path, overrides)
    c = _Checker(source)
    doc = _normalise(c, doc)
    data = c.section(doc, "data", DataConfig)
    budget = c.section(doc, "budget", BudgetConfig)
    cluster = c.section(doc, "cluster", ClusterConfig)
    select = c.section(doc, "select", SelectConfig)
    train = c.section(doc, "train", TrainConfig)
    evaluate = c.section(doc, "evaluate", EvaluateConfig)
    name, output, seed = _check_top(c, doc)
    _check_data(c, data, evaluate)
    _check_budget(c, budget)
    _check_cluster(c, cluster)
    _check_select(c, select, data)
    _check_train(c, train, select)
    _check_evaluate(c, evaluate)
    _check_run(c, data, select, train)
    return RunConfig(
        name=name,
        output=output,
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
