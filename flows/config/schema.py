"""The run configuration's schema: one frozen dataclass per section, each key with its meaning.

The help of every key is here, in the field's metadata (``help``), or -- for a method's own
parameter (``train.lam``, ``select.bss_r``, ...) -- in the method registry (:mod:`dpdist.methods`),
which the field names. :func:`dpdist.flows.config.config_reference` renders both as the Markdown
reference; the defaults a file that leaves a key out gets are the main job's
(``flows/defaults.toml``), else the field's.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dpdist.defaults import FW_ITERS, FW_LAM
from dpdist.exceptions import ParameterError
from dpdist.methods import GRADIENT_METHODS, REGISTRY, SEARCH, names
from dpdist.utils.random import derive_seed

__all__ = [
    "BSS_METHODS",
    "CLUSTERS",
    "DEFAULTS_FILE",
    "FW_METHODS",
    "GRADIENT_METHODS",
    "SCREEN_METHODS",
    "SELECT_METHODS",
    "SOURCES",
    "TRAIN_METHODS",
    "BudgetConfig",
    "ClusterConfig",
    "ConfigError",
    "DataConfig",
    "EvaluateConfig",
    "RunConfig",
    "SelectConfig",
    "TrainConfig",
    "store_paths",
]

DEFAULTS_FILE = "defaults.toml"  # the main job, in the dpdist.flows package
SOURCES = ("synth", "svmlight", "store")
CLUSTERS = ("local", "address", "slurm")
# the method names of [select] and [train], from the registry (dpdist.methods)
BSS_METHODS = names("best-subset", front_end="run")
SELECT_METHODS = names(("selection", "best-subset"), front_end="run")
TRAIN_METHODS = names(("learner", "screening"), front_end="run")
FW_METHODS = names(family="frank-wolfe", front_end="run")
SCREEN_METHODS = names("screening", front_end="run")


class ConfigError(ParameterError):
    """A config value that cannot be run; the message names the file and the key."""


def _key(default: Any, help: str) -> Any:
    """A section key with its default and its meaning."""
    return field(default=default, metadata={"help": help})


def _method_key(default: Any, name: str, note: str = "") -> Any:
    """A section key that is a method's own parameter: its meaning is the registry's (``dpdist.methods``)."""
    helps = {p.help for m in REGISTRY.values() for p in m.params if p.name == name}
    if len(helps) != 1:
        raise RuntimeError(f"the method registry has {len(helps)} meanings of the parameter {name!r}")
    takers = [m for m in REGISTRY if name in {p.name for p in REGISTRY[m].params} and "run" in REGISTRY[m].front_ends]
    return field(default=default, metadata={"help": f"{helps.pop()}{note} ({', '.join(takers)})"})


@dataclass(frozen=True)
class DataConfig:
    """The data: a synthetic set, an svmlight file or a dpdist store, and its keyed train/test split."""

    source: str = field(metadata={"help": '"synth" (a generated set), "svmlight" (a file) or "store" (a dpdist store)'})
    name: str | None = _key(None, "synth: the generator's profile (e.g. rcv1, kdda, news20)")
    n: int | None = _key(None, "synth: the number of rows")
    d: int | None = _key(None, "synth: the number of features (default: the profile's)")
    data_seed: int = _key(1, "synth: the generator's seed (the data, not the noise)")
    path: str | None = _key(None, "svmlight: the file; store: the store's directory")
    n_features: int | None = _key(
        None,
        "svmlight: the public number of columns (required: read as the largest index seen, one record could change it)",
    )
    zero_based: bool = _key(False, "svmlight: whether indices start at 0 (default false: one-based, LIBSVM's)")
    test_fraction: float = _key(
        0.2, "each record's chance of the test half (a keyed hash; 0: no split, with evaluate.public_test)"
    )
    bounds: str = _key(
        "check", '"check" refuses records outside |x_ij| <= 1 (and |y_i| <= 1) before any charge, "clip" clips each'
    )
    count_epsilon: float = _key(0.02, "epsilon of the noisy train/test row counts (0: none)")
    task: str | None = _key(None, 'svmlight: "binary", "multiclass" or "regression" (public)')
    labels: tuple[float, ...] | None = _key(None, "svmlight: the classes, e.g. [-1, 1] (public knowledge)")


@dataclass(frozen=True)
class BudgetConfig:
    """The dataset's budget, set only if the ledger has none for it yet (it is permanent)."""

    epsilon: float | None = _key(None, "the budget's epsilon (with delta)")
    delta: float | None = _key(None, "the budget's delta (with epsilon)")
    name: str | None = _key(None, "the dataset's public name in the ledger (default: random)")


@dataclass(frozen=True)
class ClusterConfig:
    """The Dask cluster the flow runs on: local (TLS with fresh credentials), an address, or SLURM."""

    kind: str = _key("local", '"local", "address" (a running scheduler) or "slurm" (dask-jobqueue)')
    n_workers: int = _key(2, "local: the number of workers")
    threads_per_worker: int = _key(1, "local: threads of each worker")
    memory_limit: str | int | None = _key(
        None,
        'local: each worker\'s memory limit, a size with a unit ("14GiB", "12 GB") or a whole number of bytes '
        "(default: Dask's, RAM / n_workers); Dask's nanny restarts a worker past 95% of it: raise it when one fit "
        "needs more than its share (fast DP-FW on all features holds the train half in CSR and CSC)",
    )
    address: str | None = _key(None, "address: the scheduler (tls://host:port)")
    jobqueue: str | None = _key(None, "slurm: the path of a dask-jobqueue YAML (e.g. deploy/jobqueue.yaml)")
    host: str | None = _key(None, "local: where scheduler and workers listen (default 127.0.0.1)")
    dashboard_address: str = _key("127.0.0.1:0", "local, slurm: the dashboard's address (loopback only by default)")
    insecure: bool = _key(
        False, "DANGEROUS: plain, unauthenticated TCP between client, scheduler and workers (a tcp:// address)"
    )
    tls_ca_file: str | None = _key(None, "address: the CA this client trusts")
    tls_cert: str | None = _key(None, "address: this client's certificate")
    tls_key: str | None = _key(None, "address: this client's key (mode 600)")


@dataclass(frozen=True)
class SelectConfig:
    """The feature selections the select stage releases (best subset selection: MIP solves on workers
    holding the ``mip`` resource)."""

    methods: tuple[str, ...] = _key((), f"the selections to release, any of {', '.join(SELECT_METHODS)}")
    k: int = _key(10, "the number of features each selection releases (best subset selection's support size s)")
    epsilon: float = _key(0.5, "each selection's epsilon")
    alpha: float = _method_key(0.1, "alpha")
    n_blocks: int | None = _method_key(None, "n_blocks", " (default: floor(sqrt) of the noisy train row count)")
    bss_loss: str = _method_key("squared", "bss_loss")
    bss_r: float = _method_key(1.1, "bss_r")
    bss_ridge: float | None = _method_key(None, "bss_ridge")
    bss_x_bound: float = _method_key(0.5, "bss_x_bound", '; data.bounds = "clip" clips to it')
    bss_y_bound: float = _method_key(0.5, "bss_y_bound", '; data.bounds = "clip" clips to it')
    bss_tol: float = _method_key(1e-3, "bss_tol")
    bss_nonprivate_time_limit: float | None = _method_key(
        None, "bss_nonprivate_time_limit", " (default none: every solve runs to its certificate)"
    )
    bss_delta: float = _method_key(1e-6, "bss_delta")
    bss_ptr_fraction: float = _method_key(0.5, "bss_ptr_fraction")


@dataclass(frozen=True)
class TrainConfig:
    """The models the train stage releases: one per method and epsilon (a privacy-utility curve)."""

    methods: tuple[str, ...] = _key(
        (), f"the learners, any of {', '.join(TRAIN_METHODS)} ({names(family='gradient')[0]}: the default learner)"
    )
    epsilon: tuple[float, ...] = _key((), "each model's epsilon: one or a list (the privacy-utility curve)")
    delta: float = _key(1e-7, "each model's delta")
    n_records: int | None = _method_key(
        None,
        "n_records",
        "; default for a synthetic source its n times 1 - test_fraction, else the noisy train count; any value "
        "is private, a far one costs utility",
    )
    tune: bool = _key(False, f"adds {SEARCH}: the private choice among the default grid")
    lam: float = _method_key(FW_LAM, "lam")
    iters: int = _method_key(FW_ITERS, "iters")
    features: str = _key(
        "all", '"all", or a select method: the model fits on its released features (objective-perturbation needs one)'
    )
    calibration: str = _method_key("safe", "calibration")
    screen_epsilon: float | None = _method_key(None, "screen_epsilon")
    screen_delta: float | None = _method_key(None, "screen_delta")
    screen_rho: float | None = _method_key(None, "screen_rho")
    screen_schedule: int | list[int] = _method_key(1, "screen_schedule")
    screen_rule: str = _method_key("safe", "screen_rule")
    n_max: int | None = _method_key(None, "n_max")
    dtype: str = _key(
        "float64",
        '"float64" or "float32": the type the fit holds the train values in (float32 halves their memory, each '
        "value rounded to the nearest float32, which keeps every bound)",
    )

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
    """The evaluation of each model on the test half: private metrics, or exact ones on a public test set."""

    epsilon: float = _key(0.1, "each model's private held-out metrics and curve")
    public_test: str | None = _key(
        None, "a separate svmlight file or store the user declares public: exact metrics, no charge"
    )
    bins: int = _key(40, "the AUC histogram's bins of the margins (even: one edge at margin 0)")
    points: int = _key(8, "the points of the private loss curve along the Frank-Wolfe path")


@dataclass(frozen=True)
class RunConfig:
    """A validated run: the top-level keys and one section of each kind."""

    name: str = field(metadata={"help": "the run's name: release keys are <name>/<step>/<method>/<params hash>"})
    output: str = field(metadata={"help": "the directory of the stores, results.json, report.md and its plots"})
    data: DataConfig
    budget: BudgetConfig
    cluster: ClusterConfig
    select: SelectConfig
    train: TrainConfig
    evaluate: EvaluateConfig
    ledger: str | None = _key(
        None,
        "the ledger: an SQLite file's path, or a PostgreSQL URL postgresql://user@host/db shared by a team "
        "(default: --ledger, $DPDIST_LEDGER, ~/.dpdist/ledger.sqlite)",
    )
    seed: int | None = _key(None, "a fixed noise seed, for experiments only (absent: OS entropy)")
    source_file: str = "<defaults>"  # set by load_config: the file the config came from

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def train_methods(self) -> tuple[str, ...]:
        """The learners the train stage releases: ``train.methods``, and the private search with ``tune``."""
        t = self.train
        return t.methods + ((SEARCH,) if t.tune and SEARCH not in t.methods else ())

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
