"""Released models' weights as binary artefacts beside the ledger, each named by its bytes' SHA-256.

A released model (a result with ``indices``, ``values`` and ``n_features``, or such a model as a value of
a result's, e.g. a private search's ``model``) is stored in two parts:

* its weights, in an ``.npz`` file of the ledger's artefact directory (:func:`artefact_root`), named by
  the SHA-256 of its bytes: float64 values, with int64 indices for a sparse model, or the whole float64
  weight vector when every column has a weight (a dense DP-GD model: the file is its raw bytes plus a
  few hundred bytes of headers). The file's bytes are a function of the weights alone (no time is
  written in it), so the digest is a function of the mechanism's output, never of the data beyond it.
  Its modification and access times are set to the epoch, but its inode change and birth times, which
  the system sets, record when the release finished: a timing channel to whoever can list the directory
  (docs/privacy.md, "File times of the model artefacts");
* the rest of the result (intercept, width, method, schema...) in the release's row, with a reference
  ``{"__dpdist_artefact__": {"sha256", "file", "dir", "bytes", "layout", "n_features", "nnz"}}``
  in place of the weights: a row of a few hundred bytes, whatever the model's width.

The file is written atomically (a temporary file in the same directory, fsync, link, fsync of the
directory) *before* the row that refers to it commits, so a process killed at any point leaves either
no row or a row whose artefact is whole. Every read checks the digest: a file changed, truncated or
missing is refused in one line naming it (``ParameterError``: exit 2), never read as a model.

An attempt at a release holds its :class:`Attempt` (a lock and a list of the files it creates, named by the
ledger, the budget's public name and the key) from before its computation until its outcome is recorded.
The next attempt under the key takes the lock, reads the row again (recorded: it replays), and only then
removes the files a killed attempt wrote but never recorded, before it draws: no unrecorded draw of a
release stays on disk beside the one recorded.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import io
import json
import os
import secrets
import stat
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from dpdist.exceptions import ParameterError

__all__ = [
    "MARK",
    "Artefact",
    "Attempt",
    "artefact_root",
    "attempt_path",
    "check_writable",
    "copy_artefacts",
    "expand",
    "is_model",
    "reference",
    "refused_by_size",
    "split",
    "split_models",
    "write",
]

MARK = "__dpdist_artefact__"
_ENV = "DPDIST_ARTEFACTS"
_EPOCH_ZIP = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: no time of writing in the file's bytes


def artefact_root(location: str, dialect: str) -> Path:
    """The directory a ledger's artefacts live in: ``$DPDIST_ARTEFACTS`` if set; else, for an SQLite
    ledger, ``<ledger file>.artefacts`` beside it; for a PostgreSQL ledger ``~/.dpdist/artefacts``. Each
    user's own (owner-only: :func:`check_writable`); a team shares models by ``dpdist models export``."""
    env = os.environ.get(_ENV)
    if env:
        return Path(env)
    if dialect == "sqlite":
        path = Path(location)
        return path.with_name(path.name + ".artefacts")
    return Path.home() / ".dpdist" / "artefacts"


def is_model(result: Any) -> bool:
    """Whether ``result`` is a released model whose weights go to an artefact."""
    return isinstance(result, dict) and {"indices", "values", "n_features"} <= set(result) and MARK not in result


class Artefact:
    """A model's weights as the bytes of its file, and the reference its row holds."""

    def __init__(self, payload: bytes, ref: dict[str, Any]) -> None:
        self.payload = payload
        self.ref = ref

    @property
    def digest(self) -> str:
        return str(self.ref["sha256"])


def _npz(arrays: dict[str, np.ndarray]) -> bytes:
    """An uncompressed ``.npz`` of ``arrays`` whose bytes depend on the arrays only (fixed entry dates)."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression=zipfile.ZIP_STORED, allowZip64=True) as zf:
        for name, arr in arrays.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_EPOCH_ZIP)
            with zf.open(info, "w", force_zip64=True) as f:
                np.lib.format.write_array(f, np.ascontiguousarray(arr), allow_pickle=False)
    return buf.getvalue()


def split(result: dict[str, Any], root: Path) -> tuple[dict[str, Any], Artefact]:
    """(the row's part of a released model, its weights' artefact) -- the weights stated exactly once."""
    n = int(result["n_features"])
    indices = np.asarray(result["indices"], dtype=np.int64)
    values = np.asarray(result["values"], dtype=np.float64)
    if indices.shape != values.shape or indices.ndim != 1 or not np.isfinite(values).all():
        raise ValueError("a released model's indices and values must be two lists of one length, finite")
    dense = indices.size == n and bool(np.array_equal(indices, np.arange(n, dtype=np.int64)))
    arrays = {"weights": values} if dense else {"indices": indices, "values": values}
    payload = _npz(arrays)
    digest = hashlib.sha256(payload).hexdigest()
    ref = {
        "sha256": digest,
        "file": f"{digest}.npz",
        "dir": str(root.resolve()),
        "bytes": len(payload),
        "layout": "dense" if dense else "sparse",
        "n_features": n,
        "nnz": int(indices.size),
    }
    meta = {k: v for k, v in result.items() if k not in ("indices", "values")}
    return {**meta, MARK: ref}, Artefact(payload, ref)


def split_models(result: Any, root: Path) -> tuple[Any, list[Artefact]]:
    """(the row's part of ``result``, the artefacts of the models in it): a model, or the models that
    are values of a dict result (a search's ``model``), each replaced by its reference."""
    if is_model(result):
        row, artefact = split(result, root)
        return row, [artefact]
    if not isinstance(result, dict) or not any(is_model(v) for v in result.values()):
        return result, []
    out, found = dict(result), []
    for k, v in result.items():
        if is_model(v):
            out[k], artefact = split(v, root)
            found.append(artefact)
    return out, found


def references(result: Any) -> list[dict[str, Any]]:
    """The artefact references of a row's result (:func:`split_models`' places)."""
    ref = reference(result)
    if ref is not None:
        return [ref]
    return [r for v in result.values() if (r := reference(v)) is not None] if isinstance(result, dict) else []


def reference(result: Any) -> dict[str, Any] | None:
    """The artefact reference of a row's result (``None``: the result is whole in the row)."""
    if isinstance(result, dict) and isinstance(result.get(MARK), dict):
        return dict(result[MARK])
    return None


def check_writable(root: Path, attempt: Path | None = None) -> None:
    """Refuse (``ParameterError``) before anything is charged when ``root`` cannot take an artefact: it,
    or the nearest directory it would be made in, is not writable; its ``.pending`` directory cannot be
    made, or a file in it cannot be made and locked (``flock`` unsupported); it is open to other users
    (its files' inode times date each release's end: owner-only, 0700); or the list of this release's
    attempt (``attempt``, :func:`attempt_path`), left by an earlier one, cannot be opened (another user's)."""
    probe = root
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise ParameterError(
            f"the model artefact directory {root} cannot be written ({probe} is not a writable directory): "
            f"set {_ENV} to a writable directory, or make it writable; nothing was charged"
        )
    pending = root / ".pending"
    try:
        # the root first: mkdir's mode is the last component's, parents made on the way take the umask's
        root.mkdir(parents=True, exist_ok=True, mode=0o700)
        mode = stat.S_IMODE(root.stat().st_mode)
        if mode & 0o077:  # others could list it: each file's change and birth times date its release's end
            raise ParameterError(
                f"the model artefact directory {root} is open to other users (mode {mode:04o}): a model file's "
                "change and birth times tell when its release finished (a private search's duration is secret); "
                f"make it owner-only (chmod 700 {root}) or set {_ENV} to a directory of your own; nothing was charged"
            )
        pending.mkdir(exist_ok=True, mode=0o700)
        lock = pending / f".probe.{secrets.token_hex(6)}"
        fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
            lock.unlink(missing_ok=True)
        if attempt is not None and attempt.exists():
            os.close(os.open(attempt, os.O_RDWR))
    except OSError as e:
        raise ParameterError(
            f"the model artefact directory {root} cannot hold a release's attempt ({e.filename}: {e.strerror}): "
            f"set {_ENV} to a directory you own, or make it writable; nothing was charged"
        ) from None


def refused_by_size(e: OSError) -> bool:
    """Whether writing an artefact failed for its size (a full disk or quota, a file too large)."""
    return e.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def attempt_path(root: Path, ledger: str, name: str, key: str) -> Path:
    """The list (and lock) of the attempts at the release ``key`` of budget ``name`` in ``ledger``."""
    tag = hashlib.sha256("\0".join((ledger, name, key)).encode()).hexdigest()[:32]
    return root / ".pending" / tag


class Attempt:
    """One attempt at a release (module doc): its lock, held while it computes, writes and records; the
    names of the artefact files it creates, each listed (durably) before the file is made.

    Files are named by their bytes, so one file can serve releases under several keys (every empty model
    of a layout has the same bytes). An attempt lists only the files it creates (its temporary file before
    it is made, the artefact once its link is made: a link never replaces a file); a file it finds already
    there it holds under a shared ``flock`` until its outcome is recorded. Removing a listed file takes an
    exclusive ``flock`` on it first and reads the rows again, so no attempt removes a file another attempt
    is about to record a row for."""

    def __init__(self, root: Path, ledger: str, name: str, key: str) -> None:
        self.root, self.path = root, attempt_path(root, ledger, name, key)
        self.created: list[str] = []  # the digests of the artefacts this attempt made
        self._fd = -1
        self._held: list[int] = []  # the files it found already there, held shared

    def __enter__(self) -> Attempt:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o700)  # owner-only, whatever the umask (as below)
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)  # a live attempt under the key finishes first
        return self

    def __exit__(self, *exc: object) -> None:
        self._let_go()
        os.close(self._fd)  # the lock goes with it

    def _let_go(self) -> None:
        while self._held:
            os.close(self._held.pop())

    def done(self) -> None:
        """The outcome is recorded: the list is no longer needed (a later attempt replays)."""
        self.path.unlink(missing_ok=True)

    def settle(self, stored: str, referenced: Callable[[str], bool]) -> int:
        """The outcome recorded is ``stored``: if it does not refer to every artefact this attempt created
        (a concurrent attempt's outcome was recorded first, or a failure), remove those no row refers to
        (:meth:`clear_left`). The number removed."""
        try:
            kept = {str(r.get("sha256")) for r in references(json.loads(stored))}
        except ValueError:
            kept = set()
        return 0 if set(self.created) <= kept else self.clear_left(referenced)

    def clear_left(self, referenced: Callable[[str], bool]) -> int:
        """Remove the files listed (an artefact an attempt under the key created, a temporary file it was
        writing), unless a row refers to the artefact (``referenced(digest)``); call with the release's
        outcome read as not recorded, or recorded without them. The number of artefacts removed."""
        self._let_go()
        listed = os.pread(self._fd, 1 << 20, 0).decode(errors="replace").split()
        removed = 0
        for name in dict.fromkeys(listed):
            if Path(name).name != name:
                continue
            if name.startswith(".") and name.endswith(".tmp"):  # killed while writing it, or before listing its link
                tmp, digest = self.root / name, name[1:].split(".")[0]
                final = self.root / f"{digest}.npz"
                try:
                    linked = os.path.samefile(tmp, final)
                except OSError:
                    linked = False
                if linked:
                    removed += _remove(final, digest, referenced)
                tmp.unlink(missing_ok=True)
            elif name.endswith(".npz"):
                removed += _remove(self.root / name, name.removesuffix(".npz"), referenced)
        os.ftruncate(self._fd, 0)
        os.fsync(self._fd)
        self.created.clear()
        return removed

    def _list(self, name: str) -> None:
        os.lseek(self._fd, 0, os.SEEK_END)
        os.write(self._fd, (name + "\n").encode())
        os.fsync(self._fd)

    def write(self, artefact: Artefact) -> Path:
        """Hold ``artefact``'s file if one is there already; else list a temporary file (durably), write
        the artefact through it (:func:`write`), and list the artefact before the temporary file goes."""
        final = self.root / str(artefact.ref["file"])
        while True:
            if self._hold(final, artefact.digest):
                return final
            tmp = self.root / f".{artefact.digest}.{secrets.token_hex(6)}.tmp"
            self._list(tmp.name)
            try:
                if _create(self.root, artefact, tmp):
                    self._list(final.name)
                    self.created.append(artefact.digest)
                    return final
            finally:
                tmp.unlink(missing_ok=True)

    def _hold(self, final: Path, digest: str) -> bool:
        """Whether ``final`` is there with the bytes of ``digest``, then held (shared) until the attempt ends."""
        try:
            fd = os.open(final, os.O_RDONLY)
        except FileNotFoundError:
            return False
        fcntl.flock(fd, fcntl.LOCK_SH)  # a removal under way finishes first
        try:
            same = os.fstat(fd).st_ino == os.stat(final).st_ino and _digest_of(fd) == digest
        except FileNotFoundError:
            same = False
        if not same:
            os.close(fd)
            return False
        self._held.append(fd)
        _fsync_dir(self.root)  # its link durable, whoever made it
        return True


def _remove(path: Path, digest: str, referenced: Callable[[str], bool]) -> int:
    """Remove the artefact ``path`` unless a row refers to it, once no attempt holds it (1: removed)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return 0
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # an attempt that found it there records its row first
        if referenced(digest) or os.fstat(fd).st_ino != os.stat(path).st_ino:
            return 0
        path.unlink()
        return 1
    except FileNotFoundError:
        return 0
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _create(root: Path, artefact: Artefact, tmp: Path) -> bool:
    """Write ``artefact`` to ``tmp`` (fsync) and link it to its name, durably; the caller removes ``tmp``.
    Whether this made the file (``False``: a whole file of the same bytes was there already)."""
    root.mkdir(parents=True, exist_ok=True, mode=0o700)
    final = root / str(artefact.ref["file"])
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(artefact.payload)
        f.flush()
        os.fsync(f.fileno())
    os.utime(tmp, (0, 0))  # mtime and atime at the epoch (its ctime, birth time remain: docs/privacy.md)
    try:
        os.link(tmp, final)
    except FileExistsError:
        if _digest_of(final) == artefact.digest:
            _fsync_dir(root)
            return False
        final.unlink(missing_ok=True)  # a damaged file of its name: replaced
        os.link(tmp, final)
    _fsync_dir(root)
    return True


def write(root: Path, artefact: Artefact) -> Path:
    """Write ``artefact`` into ``root`` atomically and durably (a temporary file, fsync, link, fsync of
    the directory): after it returns, the file is whole on disk; killed before, no file has its name.
    A file already there with the same name holds the same bytes (checked) and is kept."""
    final = root / str(artefact.ref["file"])
    if final.is_file() and _digest_of(final) == artefact.digest:
        _fsync_dir(root)  # its link durable, whoever made it
        return final
    tmp = root / f".{artefact.digest}.{secrets.token_hex(6)}.tmp"
    try:
        _create(root, artefact, tmp)
    finally:
        tmp.unlink(missing_ok=True)
    return final


def _digest_of(path: Path | int) -> str:
    """The SHA-256 of the file ``path`` (a path, or an open descriptor, read from its start)."""
    h = hashlib.sha256()
    with open(path, "rb", closefd=not isinstance(path, int)) as f:
        f.seek(0)
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def locate(ref: dict[str, Any], root: Path | None) -> Path:
    """The artefact file of ``ref``: in ``root`` (the ledger's directory now), else where it was written."""
    name = str(ref.get("file", ""))
    if not name or Path(name).name != name:
        raise ParameterError(f"a model's artefact reference names no file in its directory: {name!r}")
    candidates = ([root / name] if root is not None else []) + (
        [Path(str(ref["dir"])) / name] if ref.get("dir") else []
    )
    for path in candidates:
        if path.is_file():
            return path
    raise ParameterError(
        f"the model's artefact {name} is missing: looked in {', '.join(str(p.parent) for p in candidates)} "
        f"(the ledger's artefact directory: {_ENV}, else beside an SQLite ledger); restore it from a backup"
    )


def _read(ref: dict[str, Any], root: Path | None) -> tuple[Path, bytes]:
    """(path, bytes) of the artefact of ``ref``, its digest checked."""
    path = locate(ref, root)
    payload = path.read_bytes()
    if hashlib.sha256(payload).hexdigest() != ref.get("sha256"):
        raise ParameterError(
            f"the model's artefact {path} does not match the SHA-256 its ledger row holds (changed or damaged "
            "since it was written): refused; restore it from a backup"
        )
    return path, payload


def expand(result: Any, root: Path | None) -> Any:
    """``result`` whole: each model in it (:func:`split_models`' places) with its weights read back from
    its artefact, the digest checked; any other result as it is. ``root``: the ledger's artefact
    directory (``None``: only where the artefact was written)."""
    if reference(result) is not None:
        return _expand_model(result, root)
    if isinstance(result, dict) and any(reference(v) is not None for v in result.values()):
        return {k: _expand_model(v, root) if reference(v) is not None else v for k, v in result.items()}
    return result


def _expand_model(result: dict[str, Any], root: Path | None) -> dict[str, Any]:
    ref = reference(result)
    assert ref is not None
    path, payload = _read(ref, root)
    try:
        with np.load(io.BytesIO(payload), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise ParameterError(f"the model's artefact {path} is not a model's weights ({e})") from None
    if ref.get("layout") == "dense":
        values = arrays["weights"]
        indices = np.arange(values.size, dtype=np.int64)
    else:
        indices, values = arrays["indices"], arrays["values"]
    meta = {k: v for k, v in result.items() if k != MARK}
    return {**meta, "indices": indices.tolist(), "values": values.tolist()}


def copy_artefacts(results: list[str | None], source: Path, target: Path) -> int:
    """Copy the artefacts the rows' ``results`` refer to from ``source`` into ``target`` (each read with
    its digest checked, written atomically; a ledger's copy is committed after them). The number copied."""
    if source.resolve() == target.resolve():
        return 0
    copied = 0
    for encoded in results:
        try:
            refs = references(json.loads(encoded)) if encoded is not None else []
        except ValueError:
            refs = []
        for ref in refs:
            _, payload = _read(ref, source)
            write(target, Artefact(payload, ref))
            copied += 1
    return copied
