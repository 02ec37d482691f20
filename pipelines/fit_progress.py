"""A fit's progress, from the Dask worker that runs it to the run's terminal display.

On the worker, :func:`reporter` gives the fit a ``progress(done, total)`` callback that sends
(at most four times a second, and at the end) an event on the topic :data:`TOPIC` through the
scheduler (``Worker.log_event``). In the flow's process, :func:`relay` subscribes to the topic
while a stage runs and passes each event to :func:`dpdist.utils.run_display.work`.

An event holds the fit's name and its iterations done out of their public count (the schedule is
fixed before the data is read). When events arrive is timing: it stays on the operator's own
cluster and terminal (the scheduler's event log, the display), never in Prefect's logs, the
ledger or a file. Without a live display in the flow's process (passed to the worker as ``show``),
nothing is sent.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from dpdist.utils import run_display

__all__ = ["TOPIC", "relay", "reporter"]

TOPIC = "dpdist-fit-progress"
_EVERY = 0.25  # seconds between two events of one fit


def reporter(what: str, show: bool) -> Callable[[int, int], None] | None:
    """The progress callback of a fit named ``what`` on this worker (None unless ``show`` and on a worker)."""
    if not show:
        return None
    from distributed import get_worker

    try:
        worker = get_worker()
    except ValueError:  # not on a worker (a fit run in the flow's process)
        return None
    last = [0.0]

    def progress(done: int, total: int) -> None:
        now = time.monotonic()
        if done < total and now - last[0] < _EVERY:
            return
        last[0] = now
        worker.log_event(TOPIC, {"what": what, "done": int(done), "total": int(total)})

    return progress


@contextmanager
def relay(client: Any) -> Iterator[bool]:
    """While the block runs, show the fits' events on the display; yields whether anything is shown
    (pass it to the workers as ``show``)."""
    if run_display.console() is None:  # no live display in this process: nothing is sent
        yield False
        return

    def handler(event: tuple[float, dict[str, Any]]) -> None:
        msg = event[1]
        run_display.work(str(msg["what"]), int(msg["done"]), int(msg["total"]))

    client.subscribe_topic(TOPIC, handler)
    try:
        yield True
    finally:
        client.unsubscribe_topic(TOPIC)
