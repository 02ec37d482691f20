"""The console handler of a ``dpdist run``: Prefect's, with a full disk said in one line.

``dpdist run`` names :class:`RunConsoleHandler` as Prefect's console handler
(``PREFECT_LOGGING_HANDLERS_CONSOLE_CLASS``, inherited by the flow's process and its local Dask
workers). When a task or the flow fails on the machine's files -- a full disk or quota, a read-only
file system, a path without permission, a ledger that cannot be written
(:func:`dpdist.exceptions.file_failure`) -- Prefect logs the failure with its traceback on every
level it passes (task, flow, the flow's caller): hundreds of lines of zarr and asyncio frames
around one fact. This handler prints those records without the traceback (the message already
names the error); every other record, a bug's traceback included, is printed as Prefect prints
it. The Prefect server's copy of the logs (the API handler) keeps the traceback. While the run's
progress display is live (:mod:`dpdist.utils.run_display`), records print through its console,
above the bar.
"""

from __future__ import annotations

import logging

from prefect.logging.handlers import PrefectConsoleHandler

from dpdist.exceptions import file_failure
from dpdist.utils import run_display


class RunConsoleHandler(PrefectConsoleHandler):
    def format(self, record: logging.LogRecord) -> str:
        exc = record.exc_info[1] if record.exc_info else None
        line = file_failure(exc) if exc is not None else None
        if line is not None:
            # Prefect's message holds repr(exc), with the file that ran out of space (a store's chunk
            # or bucket, named after the data): the class and file_failure's line instead
            message = record.getMessage().replace(repr(exc), f"{type(exc).__name__}({line!r})")
            record = logging.makeLogRecord(
                {**record.__dict__, "msg": message, "args": None, "exc_info": None, "exc_text": None}
            )
        return super().format(record)

    def emit(self, record: logging.LogRecord) -> None:
        live = run_display.console()
        if live is None:
            super().emit(record)
            return
        try:  # through the live progress display's console: the line prints above the bar
            live.print(self.format(record), soft_wrap=True, markup=False, highlight=False)
        except Exception:
            self.handleError(record)
