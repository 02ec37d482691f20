"""Where a flow runs: its Dask task runner and, with no Prefect server configured, a temporary one.

Three cluster kinds (``[cluster]`` in the run config):

* ``local``: a ``distributed.LocalCluster`` of worker processes, each holding the
  ``solver=1`` and ``mip=1`` resources so single-process solvers (``dpdist.pipelines.train``) and
  best-subset MIP solves (``dpdist.pipelines.best_subset``) run one per worker;
* ``address``: an existing scheduler (``tls://host:port``), started by the user;
* ``slurm``: a ``dask_jobqueue.SLURMCluster`` built from a dask-jobqueue YAML file
  (``deploy/jobqueue.yaml``): the ``jobqueue.slurm`` mapping becomes its keyword arguments
  and the cluster is scaled to ``n_workers`` jobs; workers get ``--resources solver=1,mip=1``
  unless the YAML sets ``--resources`` itself. An ``address`` cluster's workers must be started
  with those resources (``dask worker ... --resources solver=1,mip=1``) to run such steps.

Who can reach the cluster. Whoever can talk to a Dask scheduler can run code as the job's
owner and read the rows in flight, so every cluster dpdist starts or joins uses Dask's TLS
with mutual authentication (``distributed.security.Security``, ``require_encryption``): a
peer without a certificate signed by the cluster's CA is refused at the handshake.

* ``local`` and ``slurm``: fresh credentials for every run (``Security.temporary()``: a new
  2048-bit RSA key and self-signed CA certificate, in memory), so no earlier run's peer is
  accepted. A LocalCluster hands them to its worker processes in memory. SLURM workers run
  elsewhere: the CA, certificate and key are written owner-only (0600) into a per-run 0700
  directory ``<output>/.dask-tls-*`` (the output is on a filesystem the workers share: they
  read the stores there) and dask-jobqueue passes their paths to ``dask worker``
  (``--tls-ca-file/--tls-cert/--tls-key``); the job scripts carry only the paths and are
  written 0600 (``_private_slurm_job``); the directory is removed when the run ends.
* ``address``: the user starts the scheduler with TLS; ``cluster.tls_ca_file``,
  ``tls_cert`` and ``tls_key`` are the CA and the certificate/key this client presents.

``cluster.insecure = true`` turns TLS off (plain TCP, no authentication): only for a
network that no one else can reach. Independently of TLS, a local cluster listens on
127.0.0.1 (``cluster.host``) and the scheduler's dashboard, which has no authentication,
on 127.0.0.1 for local and SLURM runs (``cluster.dashboard_address``); SLURM workers' own
dashboards on their node's loopback.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import shutil
import socket
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import dask
import yaml
from distributed.security import Security
from prefect import flow
from prefect.context import FlowRunContext
from prefect.logging import get_run_logger
from prefect_dask import DaskTaskRunner

from dpdist.exceptions import DPDistError
from dpdist.flows.config import ClusterConfig, ConfigError, memory_limit_bytes
from dpdist.flows.results import check_output
from dpdist.pipelines.memory import malloc_trim
from dpdist.pipelines.placement import LooseRestrictionRescue
from dpdist.pipelines.train import MIP_RESOURCE, SOLVER_RESOURCE
from dpdist.utils.files import open_private

__all__ = [
    "task_runner",
    "cluster_security",
    "slurm_kwargs",
    "prefect_api",
    "on_cluster",
    "dashboard_link",
    "client_dashboard_link",
    "cluster_client",
    "on_a_worker",
    "Secret",
    "trim_workers",
    "WORKER_ENVIRON",
]

T = TypeVar("T")

LOOPBACK = "127.0.0.1"
_SERVER_MIN_FREE = 64 << 20  # bytes free where the temporary Prefect server's database is


class PrefectServerUnavailable(DPDistError):
    """The temporary Prefect server of a run could not start (exit 1, one line)."""


# keys of the jobqueue YAML that dpdist sets itself (TLS, credentials, where the dashboard listens)
_DPDIST_SLURM_KEYS = ("security", "protocol", "job_cls")

# Dask's nanny starts each worker with MALLOC_TRIM_THRESHOLD_=65536 (memory freed goes back to the system at
# once). Setting any of glibc's thresholds also turns off its adjustment of the mmap threshold: every array
# over 128 KiB is then a fresh mapping whose pages are faulted in as they are first written. A worker ingesting
# the KDDA-shaped text took 62.0 s so, 34.9 s with glibc's defaults (its split 57.8 s and 40.4 s; arrays up to
# 32 MiB reuse the heap's memory, larger ones are mapped and unmapped as before). What the heap keeps is given
# back between stages (trim_workers).
# None unsets a variable in Dask's configuration; a SLURM worker's nanny reads it from the job's environment (the
# job script's first line: a user's own prologue, after it, may set it again). benchmarks/worker_allocator.py.
WORKER_ENVIRON = {"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}
_SLURM_WORKER_ENVIRON = "export DASK_DISTRIBUTED__NANNY__PRE_SPAWN_ENVIRON=\"{'MALLOC_TRIM_THRESHOLD_': None}\""


def slurm_kwargs(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Keyword arguments of ``SLURMCluster`` from a dask-jobqueue YAML (``jobqueue: slurm: ...``)."""
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as e:
        raise ConfigError(f"cluster.jobqueue: cannot read {p}: {e.strerror}") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"cluster.jobqueue: {p} is not valid YAML: {e}") from None
    try:
        kw = dict(doc["jobqueue"]["slurm"])
    except (KeyError, TypeError):
        raise ConfigError(f"cluster.jobqueue: {p} has no 'jobqueue: slurm:' mapping") from None
    kw = {k.replace("-", "_"): v for k, v in kw.items()}
    for key in _DPDIST_SLURM_KEYS:
        if key in kw:
            raise ConfigError(
                f"cluster.jobqueue: {p} sets {key!r}, which dpdist sets itself (TLS with fresh "
                "credentials per run; cluster.insecure = true turns it off)"
            )
    sched = dict(kw.get("scheduler_options") or {})
    for key in ("dashboard_address", "security", "protocol"):
        if key in sched:
            raise ConfigError(
                f"cluster.jobqueue: {p} sets scheduler_options.{key}, which dpdist sets itself "
                "(the dashboard: cluster.dashboard_address)"
            )
    extra = list(kw.get("worker_extra_args") or [])
    if "--resources" not in extra:
        extra += ["--resources", f"{SOLVER_RESOURCE}=1,{MIP_RESOURCE}=1"]
    if "--dashboard-address" not in extra:  # a worker's dashboard on its node's loopback only
        extra += ["--dashboard-address", f"{LOOPBACK}:0"]
    kw["worker_extra_args"] = extra
    kw["job_script_prologue"] = [_SLURM_WORKER_ENVIRON, *_prologue(kw)]
    kw.pop("name", None)
    return kw


def _prologue(kw: dict[str, Any]) -> list[str]:
    """The job script's prologue lines dask-jobqueue would take (taken out of ``kw``): ``job_script_prologue``, or
    ``env_extra`` (its old name) when that is unset or empty; from the YAML, else from Dask's configuration."""
    lines, old = kw.pop("job_script_prologue", None), kw.pop("env_extra", None)
    if lines is None:
        lines = dask.config.get("jobqueue.slurm.job-script-prologue", None)
    if old is None:
        old = dask.config.get("jobqueue.slurm.env-extra", None)
    return list((lines or old) or [])


def _private_slurm_job() -> type:
    """``SLURMJob`` whose job script is written owner-only (dask-jobqueue's follows the umask)."""
    from dask_jobqueue.slurm import SLURMJob

    class _PrivateSLURMJob(SLURMJob):
        @contextmanager
        def job_file(self) -> Iterator[str]:
            fd, fn = tempfile.mkstemp(suffix=".sh", prefix="dpdist-job-")  # 0600
            try:
                with os.fdopen(fd, "w") as f:
                    f.write(self.job_script())
                yield fn
            finally:
                Path(fn).unlink(missing_ok=True)

    return _PrivateSLURMJob


def _address_security(cluster: ClusterConfig) -> Security:
    return Security(
        require_encryption=True,
        tls_ca_file=cluster.tls_ca_file,
        tls_client_cert=cluster.tls_cert,
        tls_client_key=cluster.tls_key,
    )


def _slurm_security(tls_dir: Path) -> Security:
    """Fresh credentials of one SLURM run: in memory for the scheduler and the client, as files
    (0600, in the run's 0700 ``tls_dir``) for the worker jobs, whose scripts pass their paths."""
    tmp = Security.temporary()
    files = {"ca.pem": tmp.tls_ca_file, "worker.pem": tmp.tls_worker_cert, "worker.key": tmp.tls_worker_key}
    for name, pem in files.items():
        with open_private(tls_dir / name, "w") as f:
            f.write(pem)
    return Security(
        require_encryption=True,
        tls_ca_file=str(tls_dir / "ca.pem"),
        tls_client_cert=tmp.tls_client_cert,
        tls_client_key=tmp.tls_client_key,
        tls_scheduler_cert=tmp.tls_scheduler_cert,
        tls_scheduler_key=tmp.tls_scheduler_key,
        tls_worker_cert=str(tls_dir / "worker.pem"),
        tls_worker_key=str(tls_dir / "worker.key"),
    )


@contextmanager
def cluster_security(cluster: ClusterConfig, output: str | os.PathLike[str]) -> Iterator[Security | None]:
    """The TLS credentials of one run on ``cluster`` (None with ``cluster.insecure``).

    For SLURM, the per-run directory holding the workers' credentials (0700, under ``output``,
    which the worker jobs share) is removed when the context ends, after the cluster closed.
    """
    if cluster.insecure:
        yield None
    elif cluster.kind == "address":
        yield _address_security(cluster)
    elif cluster.kind == "local":
        yield Security.temporary()
    else:
        out = Path(output).resolve()
        out.mkdir(parents=True, exist_ok=True)
        tls_dir = Path(tempfile.mkdtemp(prefix=".dask-tls-", dir=out))  # 0700
        try:
            yield _slurm_security(tls_dir)
        finally:
            shutil.rmtree(tls_dir, ignore_errors=True)


def task_runner(cluster: ClusterConfig, security: Security | None = None) -> DaskTaskRunner:
    """The ``DaskTaskRunner`` for a ``[cluster]`` section, with the run's credentials (:func:`cluster_security`)."""
    if cluster.kind == "address":
        return DaskTaskRunner(address=cluster.address, client_kwargs={"security": security} if security else None)
    if cluster.kind == "slurm":
        kw = slurm_kwargs(cluster.jobqueue)
        kw["scheduler_options"] = {
            **(kw.get("scheduler_options") or {}),
            "dashboard_address": cluster.dashboard_address,
        }
        kw["job_cls"] = _private_slurm_job()
        if security is not None:
            kw.update(security=security, protocol="tls://")
        return DaskTaskRunner(
            cluster_class="dask_jobqueue.SLURMCluster",
            cluster_kwargs=kw,
            adapt_kwargs={"minimum": cluster.n_workers, "maximum": cluster.n_workers},
        )
    kw = {
        "n_workers": cluster.n_workers,
        "threads_per_worker": cluster.threads_per_worker,
        "processes": True,
        "resources": {SOLVER_RESOURCE: 1, MIP_RESOURCE: 1},
        "host": cluster.host or LOOPBACK,
        "dashboard_address": cluster.dashboard_address,
    }
    if cluster.memory_limit is not None:  # each worker's; the nanny restarts a worker past 95% of it
        kw["memory_limit"] = memory_limit_bytes(cluster.memory_limit)
    if security is not None:
        kw.update(security=security, protocol="tls://")
    return DaskTaskRunner(cluster_class="distributed.LocalCluster", cluster_kwargs=kw)


@contextmanager
def prefect_api() -> Iterator[str]:
    """The Prefect API to report to: ``$PREFECT_API_URL`` if set, else a temporary local server.

    Prefect's own ephemeral mode would start one server per process, the flow's and every
    Dask worker's; one server, started here and handed to the workers through the
    environment, serves them all and stops with the run.

    The temporary server's database is the run's own: a SQLite file in an owner-only (0700)
    directory under the system's temporary directory, deleted when the run ends (unless the
    operator names a database: ``$PREFECT_API_DATABASE_CONNECTION_URL`` or Prefect's own
    ``$PREFECT_SERVER_DATABASE_CONNECTION_URL``, which takes precedence; a run killed by SIGKILL
    leaves the directory, still owner-only). It starts as a copy of an empty, migrated database kept
    in ``$PREFECT_HOME`` (``_migrated_database``: made by Prefect's migrations alone, with no server,
    and checked to hold nothing but its schema), which saves the migrations at each start. Its telemetry to
    Prefect is off unless the operator sets ``$PREFECT_SERVER_ANALYTICS_ENABLED`` (the server's) or
    ``$DO_NOT_TRACK`` (the client's). Prefect stores every
    task run's start and end times and every log line's timestamp -- how long each private
    computation took -- so with the default run they live only as long as the run, on the
    operator's loopback, like its terminal; they are not kept for a later server to show.
    """
    url = os.environ.get("PREFECT_API_URL")
    if url:
        yield url
        return
    with tempfile.TemporaryDirectory(prefix="dpdist-prefect-") as tmp:  # created 0700
        with _temporary_server(Path(tmp)) as api_url:
            yield api_url


def _template_path() -> Path:
    """Where the empty, migrated Prefect database is kept between runs: ``$PREFECT_HOME``, per Prefect
    version (its migrations made it; a server of another version could not open it)."""
    import prefect
    from prefect.settings import PREFECT_HOME

    return Path(PREFECT_HOME.value()) / f"dpdist-empty-prefect-{prefect.__version__}.db"


def _is_empty_database(path: Path) -> bool:
    """Whether ``path`` is a Prefect database as its migrations alone leave it: one ``alembic_version``
    row and every other table empty (no run, log, event, state, artifact, block or setting)."""
    try:
        with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as con:
            names = [t for (t,) in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
            if "alembic_version" not in names or "flow_run" not in names:
                return False
            counts = {t: con.execute(f'SELECT count(*) FROM "{t}"').fetchone()[0] for t in names}
    except sqlite3.Error:
        return False
    return counts.pop("alembic_version") == 1 and not any(n for t, n in counts.items() if not t.startswith("sqlite_"))


def _sqlite_copy(source: Path, target: Path) -> None:
    """A consistent copy of a SQLite database (the backup API), in one file (rollback journal, not a
    write-ahead log, whose side files a rename would leave)."""
    with contextlib.closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as src:
        with contextlib.closing(sqlite3.connect(target)) as dst:
            src.backup(dst)
            dst.execute("PRAGMA journal_mode=DELETE")
    os.chmod(target, 0o600)


_MIGRATE = (
    "import asyncio; from prefect.server.database import provide_database_interface; "
    "asyncio.run(provide_database_interface().create_db())"
)


def _migrated_database(db: Path) -> None:
    """Make the run's database ``db`` before its server starts, already migrated, so the server skips
    Prefect's migrations (about half of its start): a copy of the template
    (``_template_path``) if it is one (``_is_empty_database``); else Prefect's migrations run here, in a
    process of their own with no server, and the result -- schema only, nothing of any run -- is kept as
    the template, atomically and owner-only. Any failure leaves ``db`` absent: the server then migrates
    a fresh database itself, as it would without a template."""
    template = _template_path()
    try:
        if _is_empty_database(template):
            _sqlite_copy(template, db)
            if _is_empty_database(db):
                return
        db.unlink(missing_ok=True)
        env = {**os.environ, "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{db}"}
        subprocess.run([sys.executable, "-c", _MIGRATE], env=env, check=True, capture_output=True, timeout=600)
        if not _is_empty_database(db):
            raise sqlite3.DatabaseError("not a migrated, empty Prefect database")
    except (OSError, sqlite3.Error, subprocess.SubprocessError):
        for made in _sqlite_files(db):
            made.unlink(missing_ok=True)
        return
    with contextlib.suppress(OSError, sqlite3.Error):  # a read-only $PREFECT_HOME: the next run migrates again
        template.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=template.parent, prefix=".dpdist-empty-", suffix=".db")  # 0600
        os.close(fd)
        try:
            _sqlite_copy(db, Path(tmp))
            if _is_empty_database(Path(tmp)):
                os.replace(tmp, template)
        finally:
            Path(tmp).unlink(missing_ok=True)


def _sqlite_files(db: Path) -> list[Path]:
    """``db`` and SQLite's side files of it."""
    return [db, db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm"), db.with_name(db.name + "-journal")]


@contextmanager
def _temporary_server(directory: Path) -> Iterator[str]:
    """A Prefect server on loopback whose database (unless the operator names one) is in ``directory``."""
    from prefect.server.api.server import SubprocessASGIServer
    from prefect.settings import PREFECT_API_URL, temporary_settings

    if (free := shutil.disk_usage(directory).free) < _SERVER_MIN_FREE:  # its database would not open: say so now
        raise PrefectServerUnavailable(
            f"the temporary Prefect server keeps its database in a directory under {directory.parent}, whose disk "
            f"has {free / 2**20:.0f} MiB free (it needs {_SERVER_MIN_FREE >> 20} MiB); free some space, or set "
            f"TMPDIR to another disk, or PREFECT_API_URL to a running server"
        )
    ours = {
        "PREFECT_API_DATABASE_CONNECTION_URL": f"sqlite+aiosqlite:///{directory / 'prefect.db'}",
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",  # no telemetry to Prefect's servers from a private run
        "DO_NOT_TRACK": "1",  # nor from its client (and no notice about it on the operator's terminal)
    }
    ours = {k: v for k, v in ours.items() if k not in os.environ}  # the operator's own settings stand
    named = "PREFECT_SERVER_DATABASE_CONNECTION_URL" in os.environ  # Prefect's newer name, which wins
    own_db = "PREFECT_API_DATABASE_CONNECTION_URL" in ours and not named
    if own_db:
        _migrated_database(directory / "prefect.db")
    try:
        os.environ.update(ours)
        server = SubprocessASGIServer()
        try:
            server.start(timeout=120)
        except RuntimeError as e:  # Prefect's message holds the server's whole output: its last exception's line
            said = [ln.strip() for ln in str(e).splitlines() if re.search(r"\w(Error|Exception): ", ln)]
            raise PrefectServerUnavailable(
                f"the temporary Prefect server did not start ({said[-1] if said else str(e).splitlines()[0]}); "
                f"its database: {directory} (a full or read-only disk there? or set PREFECT_API_URL to a "
                f"running server)"
            ) from e
        os.environ["PREFECT_API_URL"] = server.api_url
        try:
            with temporary_settings({PREFECT_API_URL: server.api_url}):
                yield server.api_url
        finally:
            from prefect.logging.handlers import APILogWorker

            APILogWorker.drain_all(timeout=5)  # the run's last log lines reach the server before it stops
            os.environ.pop("PREFECT_API_URL", None)
            server.stop()
    finally:
        for k in ours:
            os.environ.pop(k, None)


@contextmanager
def cluster_client() -> Iterator[Any]:
    """The running flow's Dask client, made current so Dask graphs computed inside run on it.

    Works in the flow and in tasks the flow calls directly (they run in the flow process).
    """
    ctx = FlowRunContext.get()
    runner = getattr(ctx, "task_runner", None)
    if not isinstance(runner, DaskTaskRunner):
        raise RuntimeError("no Dask task runner: call this inside a flow run on a DaskTaskRunner")
    client = runner.client
    with client.as_current():
        yield client


def trim_workers(cluster: ClusterConfig) -> None:
    """Between a run's stages: each worker of a cluster dpdist started gives the memory its allocator holds free
    back to the system (Dask's "manual trim"). With glibc's thresholds (``WORKER_ENVIRON``) a worker's heap keeps
    what a stage freed between blocks still in use: the KDDA run's workers went from ~1 GiB to 4.1 GiB in the select
    stage and stayed there for the fit. A user's scheduler (``address``) is left as it is: its workers may not have
    dpdist."""
    if cluster.kind != "address":
        with cluster_client() as client:
            client.run(malloc_trim)  # a function of dpdist.pipelines: the worker imports nothing of the flows


def _outcome(fn: Callable[..., T], *args: Any) -> tuple[bool, Any]:
    """On a worker: ``(True, fn(*args))``, or ``(False, the exception it raised)``."""
    try:
        return True, fn(*args)
    except Exception as e:  # noqa: BLE001 - raised again in the flow process (on_a_worker)
        return False, e


@dataclass(frozen=True)
class Secret:
    """A secret (a split key) handed to :func:`on_a_worker` as an argument: its repr holds nothing of it,
    so a failed Dask task's log of its arguments ("Compute Failed") does not show the secret."""

    value: bytes = field(repr=False)


def on_a_worker(name: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` on a worker of the running flow's cluster, under the Dask key ``<name>-<random>`` (its
    name on the dashboard; nothing of the data in it), waited for here. A task of the flow process hands its
    work over this way rather than running as a Prefect task on a worker, which would need the flow's
    Prefect server (on the flow's loopback) from the worker's node. What ``fn`` raises is raised here, in
    the flow process's task (Prefect records it in one line); on the worker it would be a failed Dask task,
    whose traceback and arguments the worker logs to the operator's terminal ("Compute Failed"): a secret
    argument goes in a :class:`Secret`."""
    with cluster_client() as client:
        ok, value = client.submit(_outcome, fn, *args, pure=False, key=f"{name}-{os.urandom(6).hex()}").result()
    if not ok:
        raise value
    return value


def _dashboard_link_template(cluster: ClusterConfig) -> dict[str, str]:
    """Dask's dashboard-link template naming the host the dashboard is bound to, when that is one
    host (Dask's own link names the scheduler's host, not the dashboard's)."""
    if cluster.kind == "address":
        return {}
    host = cluster.dashboard_address.rsplit(":", 1)[0] if ":" in cluster.dashboard_address else ""
    host = host.strip("[]")
    if host in ("", "0.0.0.0", "::"):
        return {}
    return {"distributed.dashboard.link": f"{{scheme}}://{f'[{host}]' if ':' in host else host}:{{port}}/status"}


def client_dashboard_link(client: Any) -> str | None:
    """The dashboard of ``client``'s cluster where it really listens.

    For a scheduler in this process (local, SLURM) the address its HTTP server is bound to,
    saying so when that is every interface; for a remote scheduler the link it reports.
    """
    server = getattr(getattr(client.cluster, "scheduler", None), "http_server", None)
    if server is None or not getattr(server, "port", None):
        return client.dashboard_link or None
    scheme = "https" if dask.config.get("distributed.scheduler.dashboard.tls.cert") else "http"
    host = server.address
    if host in ("", "0.0.0.0", "::"):
        return f"{scheme}://{socket.getfqdn()}:{server.port}/status (listening on all interfaces)"
    return f"{scheme}://{f'[{host}]' if ':' in host else host}:{server.port}/status"


def dashboard_link() -> str | None:
    """The Dask dashboard of the running flow's cluster (None outside a Dask flow run)."""
    try:
        with cluster_client() as client:
            return client_dashboard_link(client)
    except RuntimeError:
        return None


def on_cluster(cfg: Any, name: str, stage: Callable[..., T], *args: Any) -> T:
    """Run ``stage(cfg, *args)`` as a subflow on the cluster of ``cfg.cluster`` (``cfg``: a RunConfig).

    The subflow owns the ``DaskTaskRunner``: its tasks (and the Dask graphs they submit) run on
    that cluster, which starts before the stage and is closed after it, with the run's TLS
    credentials (:func:`cluster_security`), removed after it. The dashboard link is logged
    (and printed to stderr) as soon as the cluster is up.
    """

    @functools.wraps(stage)
    def run(cfg: Any, *args: Any) -> T:
        if cfg.cluster.kind != "address":  # a scheduler dpdist started (an address's may not have dpdist)
            with cluster_client() as client:
                client.register_plugin(LooseRestrictionRescue())
        link = dashboard_link()
        if link:
            get_run_logger().info("Dask dashboard: %s", link)
            print(f"Dask dashboard: {link}", file=sys.stderr, flush=True)
        return stage(cfg, *args)

    check_output(cfg)  # an output the results cannot be written to: refused before any work or charge
    # the stage's return value holds store paths and content hashes: never persisted by Prefect
    settings = {**_dashboard_link_template(cfg.cluster), **WORKER_ENVIRON}  # the local cluster's nannies read it
    with cluster_security(cfg.cluster, cfg.output) as security, dask.config.set(settings):
        runner = task_runner(cfg.cluster, security)
        subflow = flow(
            name=name,
            # prefect's stub wants TaskRunner[PrefectFuture[Any]]; DaskTaskRunner's futures subclass it (invariance)
            task_runner=runner,  # type: ignore[arg-type]
            validate_parameters=False,
            persist_result=False,
        )(run)
        return subflow(cfg, *args)
