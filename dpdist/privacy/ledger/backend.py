"""Where a ledger lives: a file's path or a URL, the scheme -> backend table, and what a backend does.

A ledger location is read once, here, before anything is opened or made:

* ``postgresql://...`` or ``postgres://...`` (the two prefixes libpq itself reads, in lower case):
  a PostgreSQL ledger (:mod:`.postgres`), the same URL ``psql`` takes;
* anything else that starts like a URL or a scheme (``word:``, two characters or more) is refused
  with ``ParameterError``, naming what is wrong and the spelling meant (``postgresql+psycopg://``,
  ``postgres:/``, ``PostgreSQL://``, ``postgresq://``, ``sqlite:``, ``http:``...): taken as a path,
  a mistyped URL would make a new, empty SQLite ledger -- a fresh budget for a dataset already spent;
* else a path: an SQLite file (:mod:`.sqlite`). A file whose name holds a colon is written ``./a:b``.

Each backend meets :class:`LedgerBackend`; a new one is a module with a class of that shape and a
line in :data:`SCHEMES`.
"""

from __future__ import annotations

import difflib
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from dpdist.exceptions import ParameterError
from dpdist.privacy.ledger.connection import LedgerConnection
from dpdist.privacy.ledger.postgres import PostgresLedger
from dpdist.privacy.ledger.schema import Versioned
from dpdist.privacy.ledger.sqlite import SQLiteLedger

__all__ = ["SCHEMES", "LedgerBackend", "Location", "open_backend", "parse_location"]

T = TypeVar("T")


class LedgerBackend(Versioned, Protocol):
    """What :class:`dpdist.privacy.accountant.Accountant` needs of a place that holds a ledger.

    Every statement runs inside :meth:`read` or :meth:`write` on a :class:`LedgerConnection` (the one
    SQL text of :mod:`.schema` and :mod:`.queries`, ``?`` markers).
    """

    dialect: str
    location: str

    def write(self, body: Callable[[LedgerConnection], T]) -> T:
        """``body`` in one transaction that may write, serialised with every other writer of a budget it
        locks (:meth:`lock_budget`); committed when ``body`` returns, rolled back when it raises."""
        ...

    def read(self, body: Callable[[LedgerConnection], T]) -> T:
        """``body`` on a consistent view of the ledger (it writes nothing)."""
        ...

    def lock_budget(self, con: LedgerConnection, dataset: str, *also: str) -> None:
        """Hold, until the transaction ends, the lock of ``dataset``'s budget (and of ``also``'s), of the
        budgets linked to them and of the budgets they are linked to: the charges of one budget run one
        after another."""
        ...

    def refuse_if_moved(self, con: LedgerConnection) -> None:
        """Raise ``ParameterError`` if the ledger was moved elsewhere (it takes no more writes)."""
        ...

    def refused_by_size(self, e: BaseException) -> bool:
        """Whether a write failed for its size (a full disk, a limit): a refusal that can depend on a
        release's output."""
        ...


@dataclass(frozen=True)
class Location:
    """A ledger location, read: its scheme (``None`` for an SQLite file's path) and its text."""

    scheme: str | None
    text: str

    @property
    def is_url(self) -> bool:
        return self.scheme is not None


# scheme -> the backend that holds a ledger at a URL of that scheme (a path is an SQLite file)
SCHEMES: dict[str, Callable[[str, float, bool], LedgerBackend]] = {
    "postgresql": PostgresLedger,
    "postgres": PostgresLedger,
}
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.\-]+):")
_POSTGRES_WORDS = ("postgresql", "postgres", "psql", "pgsql", "pg")
_FORM = "postgresql://user@host[:port]/database[?...]"


def _refusal(text: str, scheme: str) -> ParameterError:
    """Why ``text``, which starts with ``scheme:``, is no ledger location dpdist reads."""
    low = scheme.lower()
    base = low.split("+", 1)[0]
    shown = text if len(text) <= 80 else text[:77] + "..."
    if base in ("postgresql", "postgres") and "+" in low:
        why = f"'{scheme}://' is SQLAlchemy's dialect+driver form; libpq and dpdist read plain {base}://"
    elif base in ("postgresql", "postgres") and low != scheme:
        why = f"the scheme is read in lower case only (libpq reads {low}://, not {scheme}://)"
    elif base in ("postgresql", "postgres"):
        why = f"a PostgreSQL URL starts with {base}:// (two slashes)"
    elif difflib.get_close_matches(base, _POSTGRES_WORDS, n=1, cutoff=0.6) or base.startswith(("postg", "pg")):
        why = f"'{scheme}:' is no scheme dpdist reads; a PostgreSQL ledger is {_FORM}"
    elif base in ("sqlite", "sqlite3", "file"):
        why = "an SQLite ledger is named by its file's path, with no scheme"
    else:
        why = f"'{scheme}:' is no scheme dpdist reads"
    return ParameterError(
        f"ledger {shown!r} looks like a URL but is not one dpdist reads: {why}. A ledger is an SQLite file's "
        f"path or a PostgreSQL URL ({_FORM}); a file whose name holds a colon is written ./NAME. Nothing was "
        "opened or made"
    )


def parse_location(location: str | os.PathLike[str]) -> Location:
    """The ledger ``location`` read (module doc); ``ParameterError`` for a URL or scheme dpdist does not read."""
    text = os.fspath(location)
    if not isinstance(text, str) or not text:
        raise ParameterError(f"a ledger location must be a non-empty path or URL, got {location!r}")
    match = _SCHEME.match(text)
    if match is None:
        return Location(None, text)
    scheme = match.group(1)
    if scheme in SCHEMES and text.startswith(f"{scheme}://"):
        return Location(scheme, text)
    raise _refusal(text, scheme)


def open_backend(location: Location, timeout: float, create: bool) -> LedgerBackend:
    """The backend holding the ledger at ``location`` (``create=False``: an existing ledger only, opened
    to read: :class:`.sqlite.SQLiteLedger`)."""
    if location.scheme is not None:
        return SCHEMES[location.scheme](location.text, timeout, create)
    return SQLiteLedger(Path(location.text), timeout, create)
