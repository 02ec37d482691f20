"""The run's progress on the operator's terminal: which stage and which fit, and how far it is.

``dpdist run`` shows a progress bar (rich) of its stages -- ingest, select, train, evaluate,
report -- and, under it, the release being computed with its iterations done out of its public
count. The counts are public (a schedule fixed before any data is read); how fast they advance is
timing, which, like every duration, goes to the operator's terminal only, and only when asked: the
clocks (the run's, each fit's) are drawn when timings are on (``dpdist -v``), never the clock of a fit
whose duration is secret (the private search's). The display is never
logged and never sent to Prefect (after a Ctrl-C, the stopping run's last frames go with the rest of
its output to the owner-only ``interrupted-run.log`` the operator is pointed to).

The run's flow runs in a supervised child process whose standard error is a pipe that the
``dpdist run`` parent copies byte for byte to its terminal (``dpdist.cli.supervise``). So the
parent, when its own standard error is a terminal (and not ``--json``), sets ``$DPDIST_PROGRESS``
to the terminal's width, and the child draws on its pipe as on that terminal. Without it (a
library call, CI, a redirected run) every function here does nothing.

While the display is live, :func:`console` returns its console, through which the run's console
log handler prints (its lines appear above the bar, not through it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from dpdist.utils import operator_log

__all__ = ["ENV", "console", "enabled", "showing", "stage", "work"]

ENV = "DPDIST_PROGRESS"
_live: dict[str, Any] = {}


def enabled() -> bool:
    """Whether the operator's terminal asked for the display (``$DPDIST_PROGRESS`` set)."""
    return bool(os.environ.get(ENV))


def console() -> Any | None:
    """The live display's rich console (None when no display is live)."""
    return _live.get("console")


@contextmanager
def showing(stages: Sequence[str]) -> Iterator[None]:
    """Show the run's ``stages`` (their names, in order) while the block runs; a no-op unless
    :func:`enabled`."""
    if not enabled() or _live:
        yield
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

    width = os.environ.get(ENV, "")
    term = Console(stderr=True, force_terminal=True, width=int(width) if width.isdigit() else None)
    columns = [TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn()]
    if os.environ.get(operator_log.ON_ENV):  # a clock when the operator asked for timings (dpdist -v)
        columns.append(_elapsed_column())
    with Progress(*columns, console=term, transient=True, redirect_stdout=False) as bar:
        stages_task = bar.add_task(f"dpdist run: {stages[0]}", total=len(stages))
        _live.update(console=term, bar=bar, stages=list(stages), stages_task=stages_task, work=None)
        try:
            yield
        finally:
            _live.clear()


def stage(name: str) -> None:
    """The run enters stage ``name``: the stages before it are done; the work line is cleared."""
    if not _live:
        return
    bar, stages = _live["bar"], _live["stages"]
    done = stages.index(name) if name in stages else 0
    bar.update(_live["stages_task"], completed=done, description=f"dpdist run: {name}")
    _drop_work()
    bar.refresh()  # drawn now, not at the next tick: a short stage is seen too


def work(what: str, done: int | None = None, total: int | None = None, timed: bool = True) -> None:
    """The release being computed (``what``), with ``done`` of its ``total`` iterations when known; its
    time elapsed unless not ``timed`` (a release whose duration is secret: the private search's)."""
    if not _live:
        return
    bar, current = _live["bar"], _live["work"]
    if current is None or current[0] != what:  # a new line: its own total (rich keeps a task's old one)
        _drop_work()
        _live["work"] = (what, bar.add_task(f"  {what}", total=total, completed=done or 0, untimed=not timed))
    else:
        bar.update(current[1], completed=done or 0, **({"total": total} if total else {}))
    bar.refresh()


def _elapsed_column() -> Any:
    """rich's time-elapsed column, blank for a line whose duration is secret (its task's ``untimed``)."""
    from rich.progress import TimeElapsedColumn
    from rich.text import Text

    class Elapsed(TimeElapsedColumn):
        def render(self, task: Any) -> Text:
            return Text("") if task.fields.get("untimed") else super().render(task)

    return Elapsed()


def _drop_work() -> None:
    if _live.get("work") is not None:
        _live["bar"].remove_task(_live["work"][1])
        _live["work"] = None
