"""What every ``dpdist`` command shares: exit codes, common options, output, release keys and noise seeds.

Exit codes: 0 success; 2 bad arguments or input; 3 privacy budget refused; 130 interrupted
(Ctrl-C or SIGTERM); 1 anything else. With ``--json`` exactly one JSON object is printed on
stdout; messages go to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, Protocol

from dpdist.exceptions import ParameterError, PlanExceeded
from dpdist.privacy.ledger.paths import default_ledger_path
from dpdist.utils.io import AtomicFile, check_directory

if TYPE_CHECKING:  # the ledger (and NumPy) are imported by the commands that use them, not at start-up
    from dpdist.privacy.accountant import Accountant

EXIT_OK, EXIT_ERROR, EXIT_BAD_INPUT, EXIT_BUDGET, EXIT_INTERRUPTED = 0, 1, 2, 3, 130

# a command's default --delta: this share of its budget's delta (several commands fit in the budget's delta)
DELTA_SHARE = 0.1


# the held-out metrics a payload carries (those of them a release computed)
_METRIC_KEYS = (
    "accuracy",
    "auc",
    "mse",
    "r2",
    "rows",
    "accuracy_interval",
    "auc_interval",
    "mse_interval",
    "r2_interval",
    "noise_swamps",
    "auc_swamped",
    "balanced_accuracy",
    "predicts_one_class",
    "loss_grew",
)

# what does not make a release different: output and logging options, where the ledger and store are
_NOT_THE_RELEASE = frozenset(
    {
        "json",
        "verbose",
        "ledger",
        "key",
        "fresh",
        "out",
        "func",
        "argv",
        "command",
        "store",
        "budget_command",
        "models_command",
        "out_kind",
        "out_file",
    }
)


class ProgressUpdate(Protocol):
    """``update(done)`` of a progress bar; ``total`` (when given) sets the bar's length."""

    def __call__(self, done: float, total: float | None = None) -> None: ...


def _common_args(parser: argparse.ArgumentParser) -> None:
    """Options of every command: JSON output, logging, the ledger."""
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO on stderr (default: WARNING)")
    parser.add_argument(
        "--ledger",
        default=None,
        help=f"privacy ledger (default: $DPDIST_LEDGER, else {default_ledger_path()})",
    )


def _release_args(parser: argparse.ArgumentParser) -> None:
    """Options of every command that releases a private result."""
    parser.add_argument(
        "--key",
        default=None,
        help="release key (default: derived from the dataset, the command and every parameter, so the "
        "same command again replays its release and charges nothing)",
    )
    parser.add_argument("--fresh", action="store_true", help="a new release (a new key): charged again, with new noise")
    parser.add_argument("--out", default=None, help="also write the JSON result to this file (atomically)")
    parser.add_argument("--seed", type=int, default=None, help="reproducible noise (experiments only)")
    parser.set_defaults(out_kind="file")
    _common_args(parser)


def _unwritable(option: str, path: str, e: OSError) -> ParameterError:
    """The one-line refusal of an output ``option`` naming ``path`` that cannot be written."""
    reason = os.strerror(e.errno) if e.errno else type(e).__name__
    return ParameterError(f"{option} {path}: cannot be written ({reason}); nothing was read or charged")


@contextlib.contextmanager
def _prepared_out(args: argparse.Namespace) -> Iterator[None]:
    """Check ``--out`` before the command reads or charges anything (a charge never precedes a check that
    its result can be delivered): a result file (``out_kind`` "file") is prepared as ``args.out_file``
    (:class:`dpdist.utils.io.AtomicFile`: its temporary made where it will be renamed; removed unless the
    command writes it); a store (``out_kind`` "store") must not exist without ``--force``, and its
    directory must take new files. Refused: a ParameterError naming ``--out`` and the path (exit 2)."""
    kind, path = getattr(args, "out_kind", None), getattr(args, "out", None)
    args.out_file = None
    if kind is None or path is None:
        yield
        return
    if kind == "store":
        if os.path.lexists(path) and not args.force:
            raise ParameterError(f"--out {path}: the store already exists; pass --force")
        try:
            check_directory(os.path.dirname(os.path.abspath(path)))
        except OSError as e:
            raise _unwritable("--out", path, e) from None
        yield
        return
    try:
        args.out_file = AtomicFile(path)
    except OSError as e:
        raise _unwritable("--out", path, e) from None
    try:
        yield
    finally:
        args.out_file.discard()  # a command that failed before writing it leaves no temporary


def _write_out(args: argparse.Namespace, payload: dict[str, Any]) -> None:
    """The command's JSON result into its prepared ``--out`` file, if it has one."""
    if args.out_file is not None:
        args.out_file.write_json(payload)


def _write_result(
    args: argparse.Namespace, payload: dict[str, Any], coef: dict[str, Any], record: Any, human: Callable[[], str]
) -> None:
    """A fit's result: ``--out`` gets ``payload`` with the weights (and the release's record, the model
    ``predict``/``evaluate`` read, when there is one); stdout gets ``payload`` or ``human()``'s text."""
    _write_out(args, {**payload, "coef": coef, **({"result": record} if record is not None else {})})
    _emit(args, payload, human)


def _reported_metrics(metrics: dict[str, Any]) -> dict[str, Any]:
    """The held-out metrics a command reports (:data:`_METRIC_KEYS`, those ``metrics`` has)."""
    return {k: metrics[k] for k in _METRIC_KEYS if k in metrics}


def _release_held_out(
    args: argparse.Namespace, acc: Any, dataset: str, key: str, evaluation: Any, compute: Callable[[], Any]
) -> dict[str, Any]:
    """The model ``key``'s held-out metrics, released by ``evaluation`` (its charge, at ``--eval-epsilon``)
    under ``key/evaluation``: the reported metrics, their epsilon and their key."""
    metrics = acc.release(
        dataset,
        evaluation.privacy_charge(),
        f"{key}/evaluation",
        compute,
        {"model": key, "epsilon": args.eval_epsilon},
    )
    return {**_reported_metrics(metrics), "eval_epsilon": args.eval_epsilon, "eval_key": f"{key}/evaluation"}


def _emit(args: argparse.Namespace, payload: dict[str, Any], human: Callable[[], str]) -> None:
    """Print a command's result: the JSON object with ``--json``, else ``human()``'s text."""
    if args.json:
        sys.stdout.write(json.dumps(payload, sort_keys=True) + "\n")
    else:
        sys.stdout.write(human() + "\n")


def _emit_store(args: argparse.Namespace, meta: dict[str, Any], extra: dict[str, Any], what: str) -> None:
    """Ingest/synth output: the store, its public name and schema (no row count, no content hash)."""
    payload = {
        "store": str(args.out),
        "name": meta["name"],
        "n_features": meta["n_features"],
        "task": meta["task"],
        "schema": meta["schema"],
        **extra,
    }
    _emit(
        args,
        payload,
        lambda: f"{args.out}: {what}store {meta['name']}, {meta['n_features']} features, task {meta['task']}",
    )


def _selected(path: str) -> list[int]:
    """The store columns a ``dpdist select --out`` file released."""
    try:
        return [int(j) for j in json.loads(open(path).read())["features"]]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise ParameterError(f"--features {path}: not a select result ({e})") from None


def _metric_text(p: dict[str, Any]) -> str:
    """Held-out metrics in words: a private one with its noise's 95% interval, and a warning when the noise
    swamps it; an exact one (a public test set, a non-private fit) as exact."""

    def f(v: float | None, spec: str) -> str:
        return "undefined" if v is None else format(v, spec)

    def within(second: list[float] | None) -> str:
        return "" if second is None else f" (noise's 95% interval [{second[0]:.3g}, {second[1]:.3g}])"

    if "accuracy" in p:
        first = f"held-out accuracy {f(p['accuracy'], '.3f')}"
        second = f"AUC {f(p.get('auc'), '.3f')}{within(p.get('auc_interval'))}"
        if p.get("auc_swamped"):  # its noisy histograms give no AUC in [0, 1]
            second = "AUC swamped by the noise (no value)"
        if "balanced_accuracy" in p:
            second = f"balanced accuracy {f(p['balanced_accuracy'], '.3f')}, {second}"
        interval = p.get("accuracy_interval")
    elif "mse" in p:
        first = f"held-out MSE {f(p['mse'], '.4g')}"
        second = f"R^2 {f(p.get('r2'), '.3f')}{within(p.get('r2_interval'))}"
        interval = p.get("mse_interval")
    else:
        return "no held-out rows"
    if interval is None:
        return f"{first}, {second} (exact)"
    text = f"{first} (private; the noise's 95% interval [{interval[0]:.3g}, {interval[1]:.3g}]), {second}"
    if p.get("noise_swamps"):
        text += (
            " -- the noise swamps these metrics at this test size: a larger --eval-epsilon, or more held-out rows "
            "(--test-fraction), gives a usable figure"
        )
    from dpdist.evaluation import metric_warnings

    return text + "".join(f" -- WARNING: {w}" for w in metric_warnings(p))


def _check_held_out(args: argparse.Namespace) -> None:
    """Refuse a held-out fraction outside [0, 1) and a held-out metrics' epsilon that is not positive."""
    if not 0.0 <= args.test_fraction < 1.0:
        raise ParameterError(f"--test-fraction must lie in [0, 1), got {args.test_fraction}")
    if args.eval_epsilon <= 0:
        raise ParameterError(
            f"--eval-epsilon must be > 0, got {args.eval_epsilon:g} (held-out metrics are a release "
            "of their own; for none, hold out nothing: --test-fraction 0)"
        )


def _release_key(args: argparse.Namespace, command: str, method: str, dataset_name: str) -> str:
    """``--key``, else a key derived from the dataset's public name, the command and every parameter that
    shapes the release: the same command again replays it (and charges nothing); ``--fresh`` adds a
    random suffix (a new release, charged again). Public inputs only: no content of the data."""
    import hashlib
    import uuid

    if args.key:
        return str(args.key)
    params = {k: v for k, v in sorted(vars(args).items()) if k not in _NOT_THE_RELEASE and not callable(v)}
    doc = json.dumps({"command": command, "dataset": dataset_name, "params": params}, sort_keys=True, default=str)
    key = f"{command}-{method}-{hashlib.sha256(doc.encode()).hexdigest()[:16]}"
    return f"{key}-{uuid.uuid4().hex[:8]}" if args.fresh else key


def _charged_text(
    replayed: bool,
    key: str,
    epsilon: float,
    delta: float,
    also: tuple[tuple[str, float], ...] = (),
    main: str = "the model",
) -> str:
    """What a command cost, in words: its charges -- the release's (``main``: what it released), then
    each of ``also`` (the other releases the command made: a record count, held-out metrics, a stage-2
    model; (what, epsilon) pairs) -- or the replay (nothing charged)."""
    if replayed:
        return f"replayed from the ledger (key {key}): nothing charged (--fresh asks for a new, charged release)"
    others = "".join(f", plus epsilon={e:.4g} for {what}" for what, e in also)
    what = f" for {main}" if also else ""
    return (
        f"charged epsilon={epsilon:.4g}, delta={delta:g}{what}{others} (key {key}; the same command again replays it)"
    )


def _noise_seed(args: argparse.Namespace, purpose: str) -> int | None:
    """The noise seed of one release of a command (``--seed``: experiments only; one per purpose)."""
    from dpdist.utils.random import derive_seed

    return derive_seed(args.seed, purpose)


def _dataset(acc: Accountant, ref: str) -> str:
    """The content hash a command refers to: a store's (a path) or the ledger's for a public name."""
    from dpdist.data.store import open_store

    if os.path.isdir(ref):
        return acc.budget_of(open_store(ref))
    return acc.resolve(ref)


@contextlib.contextmanager
def _progress_bar(
    args: argparse.Namespace, what: str, total: float | None, count: bool = False, private: bool = True
) -> Iterator[ProgressUpdate]:
    """A progress bar on stderr when it is a terminal (and not --json); silent otherwise.

    Yields ``update(done)``; ``total`` is in bytes, or in items (``count``: shown as "done/total").
    The bar is the operator's own view of their data (never a release); its clock, for ``private``
    work (a fit, a selection: its duration is a function of the data), only with ``-v``.
    """
    if args.json or not sys.stderr.isatty():

        def silent(done: float, total: float | None = None) -> None:
            return None

        yield silent
        return
    from rich.console import Console
    from rich.progress import BarColumn, DownloadColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    amount = MofNCompleteColumn() if count else DownloadColumn() if total else TextColumn("")
    columns = [TextColumn(what), BarColumn(), amount, *([TimeElapsedColumn()] if args.verbose or not private else [])]
    with Progress(*columns, console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task(what, total=total)

        def update(done: float, total: float | None = None) -> None:
            if total:
                bar.update(task, completed=done, total=total)
            else:
                bar.update(task, completed=done)

        yield update


class CommandPlan:
    """A command's ``--epsilon``/``--delta``, what it spends in all, split over its releases: the fixed parts
    (a noisy count, held-out metrics, a screening, a stage-2 model: (what, epsilon) pairs) and the command's main
    release (``main``: the model, a selection), which gets the rest.

    The command's (epsilon, delta) is a budget of its own: its releases must pass a privacy filter of that
    budget (:class:`dpdist.privacy.filter.PrivacyFilter`). The main release is calibrated at the filter's basic
    share of delta (less the parts' own, ``fixed_delta``), so basic composition -- the epsilons added -- holds the
    plan within (epsilon, delta) exactly.
    """

    def __init__(
        self,
        epsilon: float,
        delta: float,
        fixed: list[tuple[str, float]],
        fixed_delta: float = 0.0,
        main: str = "the model",
    ) -> None:
        from dpdist.privacy.filter import PrivacyFilter

        self.epsilon, self.delta, self.fixed, self.main = float(epsilon), float(delta), fixed, main
        self.model_epsilon = self.epsilon - sum(e for _, e in fixed)
        self.model_delta = PrivacyFilter.basic_share * self.delta - fixed_delta  # a part's own delta (screening's)
        if fixed_delta and not self.model_delta > 0:
            raise ParameterError(
                f"--delta {self.delta:g} is what the command spends in all: a quarter of it ({main}'s and its "
                f"parts' deltas, added) does not cover the screening's delta {fixed_delta:g}; give a larger --delta"
            )
        if not self.model_epsilon > 0:
            parts = " + ".join(f"{what} {e:g}" for what, e in fixed)
            raise ParameterError(
                f"--epsilon {self.epsilon:g} is what the command spends in all, and {parts} take all of it: give "
                "a larger --epsilon, or smaller parts"
            )

    def check(self, losses: list[Any], why: str = "") -> None:
        """Refuse (:class:`~dpdist.exceptions.PlanExceeded`, exit 3) a plan whose releases ``losses`` do not pass
        the command's own filter, before anything is read or charged; ``why`` says what made them larger than
        planned (a seed's calibration, charged its true epsilon)."""
        import math

        from dpdist.privacy.filter import PrivacyFilter

        spent = PrivacyFilter.for_budget(self.epsilon, self.delta).spent(losses)[0]
        if spent <= self.epsilon * (1 + 1e-9):
            return
        figure = (
            f"epsilon {spent:.6g}"
            if math.isfinite(spent)
            else f"more delta than a quarter of --delta {self.delta:g} (their deltas added)"
        )
        raise PlanExceeded(
            f"the command's releases would spend {figure}, above what it spends in all (--epsilon {self.epsilon:g}, "
            f"--delta {self.delta:g}){why}: give a larger --epsilon or --delta; nothing was read or charged"
        )

    def charged_text(self, replayed: bool, key: str, epsilon: float) -> str:
        """What the command cost, in words (``_charged_text``): the main release's ``epsilon`` (a seed's
        calibration: its true epsilon) at the plan's delta, then the fixed parts; or the replay."""
        return _charged_text(replayed, key, epsilon, self.model_delta, tuple(self.fixed), self.main)

    def to_dict(self) -> dict[str, Any]:
        """The split, as the command's JSON output states it (``model_*``: the main release's share)."""
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "main": self.main,
            "model_epsilon": self.model_epsilon,
            "model_delta": self.model_delta,
            "parts": [{"what": what, "epsilon": e} for what, e in self.fixed],
        }

    def text(self) -> str:
        """The split in words: each part's epsilon, their sum, the delta."""
        counts = [p for p in self.fixed if "count" in p[0]]  # released first
        parts = [*counts, (self.main, self.model_epsilon), *(p for p in self.fixed if p not in counts)]
        split = " + ".join(f"{what} {e:.4g}" for what, e in parts)
        return (
            f"plan: {split} = epsilon {self.epsilon:g} in all; {self.main}'s delta {self.model_delta:.3g} "
            f"(of the command's {self.delta:.3g})"
        )


def command_delta(args: argparse.Namespace, budget_delta: float) -> float:
    """The command's ``--delta``, by default :data:`DELTA_SHARE` of its budget's delta."""
    return float(args.delta) if args.delta is not None else DELTA_SHARE * float(budget_delta)
