"""The ``dpdist`` command run in this process, as a test sees it: its exit code, stdout and stderr."""

from __future__ import annotations

from pathlib import Path

from dpdist.cli import main
from dpdist.data.store import open_store
from dpdist.privacy.accountant import Accountant


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """``dpdist *argv`` through :func:`dpdist.cli.main`; argparse's exits give their code too."""
    try:
        code = main(list(argv))
    except SystemExit as e:  # argparse
        code = int(e.code)
    out, err = capsys.readouterr()
    return code, out, err


def selecting(capsys, store, ledger: str):
    """``dpdist select`` of ``store`` charged to ``ledger``, as a function of the method and the other
    arguments (``ledger=`` for another ledger): its exit code, stdout and stderr."""

    def select(method: str, *args: str, ledger: str = ledger) -> tuple[int, str, str]:
        return run(capsys, "select", str(store), "--method", method, *args, "--ledger", ledger)

    return select


def synth_with_budget(capsys, tmp_path: Path, kind: str, n: int, d: int, epsilon: float) -> tuple[str, str, str]:
    """``dpdist synth KIND`` (seed 0, ``n`` x ``d``) into ``tmp_path / "r"``, with a budget of ``epsilon``
    (delta 1e-5) for it in ``tmp_path / "l.sqlite"``: (the store, the ledger, the ledger's key for it)."""
    store, ledger = tmp_path / "r", str(tmp_path / "l.sqlite")
    code, _, err = run(capsys, "synth", kind, "--out", str(store), "--seed", "0", "--n", str(n), "--d", str(d))
    assert code == 0, err
    dataset_id = open_store(store).dataset_id
    Accountant(ledger).init_budget(dataset_id, epsilon, 1e-5)
    return str(store), ledger, dataset_id
