"""Supervision of ``dpdist run``: the run in a child process of its own session, stopped in order on Ctrl-C.

A Ctrl-C at the terminal reaches every process of the terminal's process group; in its own
session the flow's Prefect server and Dask workers never see it, and the supervisor stops them
in order (the flow, the cluster, the server) instead of leaving them to die mid-task.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from typing import IO, Any

from dpdist.cli._common import EXIT_INTERRUPTED, EXIT_OK

# set in the supervised child's environment: the child runs the flow instead of supervising again
_RUN_CHILD = "DPDIST_RUN_SUPERVISED"


def _interrupt(signum: int, frame: Any) -> None:
    """SIGTERM as a KeyboardInterrupt, with logging silenced (the interrupted flow's crash reports)."""
    import logging

    logging.disable(logging.CRITICAL)  # the interrupted flow's crash reports are not for the terminal
    raise KeyboardInterrupt


class _StderrRelay(threading.Thread):
    """Copies the supervised run's stderr to this terminal as it comes (bytes, unchanged) until
    ``divert()``; from then on to an owner-only log file, so an interrupted run's teardown (the
    crash notes and connection errors of workers stopped mid-task) stays off the terminal."""

    def __init__(self, stream: IO[bytes], log: Path) -> None:
        super().__init__(daemon=True)
        self.stream, self.log, self.diverted_bytes = stream, log, 0
        self._diverted = threading.Event()
        self.start()

    def divert(self) -> None:
        """From now on, write what the run prints to the log file, not to the terminal."""
        self._diverted.set()

    def run(self) -> None:
        fd, out, logf = self.stream.fileno(), sys.stderr.buffer, None
        try:
            while chunk := os.read(fd, 65536):
                if not self._diverted.is_set():
                    out.write(chunk)
                    out.flush()
                    continue
                if logf is None:
                    from dpdist.utils.files import open_private

                    self.log.parent.mkdir(parents=True, exist_ok=True)  # the output dir keeps its mode
                    logf = open_private(self.log, "ab")
                logf.write(chunk)
                logf.flush()
                self.diverted_bytes += len(chunk)
        except OSError:
            pass
        finally:
            if logf is not None:
                logf.close()


def _redeliver_swallowed_interrupts() -> None:
    """Deliver again an interrupt whose exception Python swallowed.

    A signal handler raises in whatever Python code runs at that moment; when that is a callback
    Python cannot propagate from (a gc callback -- distributed installs one in the scheduler's
    process --, a ``__del__``, a weakref callback), the exception is printed as "Exception ignored"
    and dropped, and the run would go on to its end. This hook takes such a dropped
    ``KeyboardInterrupt`` or Prefect ``TerminationSignal`` and raises the signal in the main
    thread again, where it is handled at the next ordinary bytecode.
    """
    import _thread

    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt):
            _thread.interrupt_main(signal.SIGINT)
        elif type(exc).__name__ == "TerminationSignal":
            _thread.interrupt_main(signal.Signals(int(getattr(exc, "signal", signal.SIGTERM))))
        else:
            previous(unraisable)

    sys.unraisablehook = hook


def _supervise(argv: list[str], output: str) -> int:
    """Run this same command in a child process in its own session, and stop it in order on Ctrl-C.

    A Ctrl-C at the terminal reaches every process of the terminal's process group. In the
    child's own session, the temporary Prefect server and the Dask workers never see it: only
    this process does, and it asks the child (SIGTERM) to leave the flow, close the cluster and
    then stop the server, removes the temporaries of stores left half-written, and exits 130.
    A second Ctrl-C kills the child's whole session at once.
    """
    import subprocess

    env = {**os.environ, _RUN_CHILD: "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "dpdist.cli", *argv], env=env, start_new_session=True, stderr=subprocess.PIPE
    )
    assert proc.stderr is not None  # stderr=PIPE: always a stream
    relay = _StderrRelay(proc.stderr, Path(output) / "interrupted-run.log")
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        try:
            code = proc.wait()
            relay.join(timeout=10)
            if code == EXIT_OK:  # an earlier interrupted run's log is about a run that has now completed
                relay.log.unlink(missing_ok=True)
            return code
        except KeyboardInterrupt:
            return _stop(proc, relay, output)
    finally:
        signal.signal(signal.SIGTERM, previous)


def _stop(proc: Any, relay: _StderrRelay, output: str) -> int:
    """After a Ctrl-C: ask the child to stop (SIGTERM), kill its session after 60 s or a second Ctrl-C,
    remove the temporaries it left half-written; exit code 130."""
    import time

    relay.divert()  # the teardown's crash reports (workers losing their peers) go to the log file
    if os.environ.get("DPDIST_PROGRESS"):  # the child's progress display hid the cursor; its last frames are diverted
        sys.stderr.write("\x1b[?25h")
    print(
        "\ndpdist run: interrupted; stopping the flow, the cluster and the Prefect server (Ctrl-C again to kill them)",
        file=sys.stderr,
        flush=True,
    )
    proc.send_signal(signal.SIGTERM)
    try:
        deadline = time.monotonic() + 60
        while proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
    except KeyboardInterrupt:
        pass
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    relay.join(timeout=10)
    _remove_partial(output)
    if relay.diverted_bytes:
        print(f"dpdist run: what the stopping run printed is in {relay.log}", file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def _remove_partial(output: str) -> None:
    """Temporaries of stores and files an interrupted run left half-written (complete stores stay)."""
    import shutil

    root = Path(output)
    for pattern in ("stores/.*.tmp-*", "stores/.*.old-*", ".tmp-*"):
        for p in root.glob(pattern):
            shutil.rmtree(p, ignore_errors=True) if p.is_dir() else p.unlink(missing_ok=True)
