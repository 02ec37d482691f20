"""The operator's log: how long private computations took, for the operator's terminal only.

A private fit's or release's duration is a function of the data (one added record can make a
best-subset certificate take many times longer: tests/privacy/test_bss_no_abort.py), and it is not
noised. So it never enters the ledger, a release, models.json, the report, an artifact or
Prefect's run logger -- whose lines Prefect stores in its server's database and shows in its UI
to everyone who can reach it. It goes here instead:

* to the standard error of the process that measured it (the terminal of ``dpdist``; a local
  Dask worker's is the run's terminal too, a SLURM worker's is its job's output file), when
  ``$DPDIST_TIMINGS`` is set -- ``dpdist -v`` sets it for itself and its children (timings are
  the operator's to ask for); a library user's fits stay silent, as scikit-learn's do;
* and, when ``$DPDIST_OPERATOR_LOG`` names a file, appended to it (created owner-only).

The logger does not propagate: no handler attached to the root logger (Prefect's included)
sees its records.

A release whose duration reveals a secret of its own guarantee (a method the registry flags
``secret_duration``: the private search, whose duration tells how many runs it made,
``dpdist.tuning``) is never timed, not even here: nor is a sum of durations that holds it (a run's
step, its running total: ``dpdist.flows.release.SECRET_DURATION``).
"""

from __future__ import annotations

import logging
import os
import sys

from dpdist.utils.files import open_private

__all__ = ["FILE_ENV", "ON_ENV", "timing"]

FILE_ENV = "DPDIST_OPERATOR_LOG"
ON_ENV = "DPDIST_TIMINGS"
_LOGGER = logging.getLogger("dpdist.operator")
_LOGGER.propagate = False
_LOGGER.setLevel(logging.INFO)
_FORMAT = logging.Formatter("%(asctime)s dpdist (operator only): %(message)s")


class _Stderr(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (pytest and the CLI swap it),
    when ``$DPDIST_TIMINGS`` is set."""

    def emit(self, record: logging.LogRecord) -> None:
        if os.environ.get(ON_ENV):
            super().emit(record)

    @property  # type: ignore[override]
    def stream(self):  # noqa: ANN201
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:  # noqa: ANN001
        pass


class _PrivateFile(logging.Handler):
    """Appends each record to ``$DPDIST_OPERATOR_LOG`` as read when it is emitted (owner-only)."""

    def emit(self, record: logging.LogRecord) -> None:
        path = os.environ.get(FILE_ENV)
        if not path:
            return
        try:
            with open_private(path, "ab") as f:
                f.write((self.format(record) + "\n").encode())
        except OSError:
            self.handleError(record)


for _handler in (_Stderr(), _PrivateFile()):
    _handler.setFormatter(_FORMAT)
    _LOGGER.addHandler(_handler)


def timing(message: str, *args: object) -> None:
    """Log how long something private took (``message % args``) for the operator only."""
    _LOGGER.info(message, *args)
