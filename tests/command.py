"""The ``dpdist`` command run in this process, as a test sees it: its exit code, stdout and stderr."""

from __future__ import annotations

from dpdist.cli import main


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
