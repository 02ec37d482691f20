"""The operator's log: timings reach stderr (when asked) and an owner-only file, never another handler."""

from __future__ import annotations

import logging
import stat

from dpdist.utils import operator_log


class Collect(logging.Handler):
    def __init__(self) -> None:
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def test_timings_go_to_stderr_and_the_file_only(tmp_path, monkeypatch, capsys):
    root = Collect()
    logging.getLogger().addHandler(root)  # where Prefect's API handler would sit
    try:
        path = tmp_path / "operator.log"
        monkeypatch.delenv(operator_log.ON_ENV, raising=False)
        monkeypatch.setenv(operator_log.FILE_ENV, str(path))
        operator_log.timing("fit: %.2f s", 1.25)
        assert capsys.readouterr().err == ""  # a library user's fit is silent on the terminal
        monkeypatch.setenv(operator_log.ON_ENV, "1")
        operator_log.timing("fit: %.2f s", 2.5)
        assert "fit: 2.50 s" in capsys.readouterr().err
        lines = path.read_text().splitlines()
        assert [ln.split("): ", 1)[1] for ln in lines] == ["fit: 1.25 s", "fit: 2.50 s"]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        assert root.messages == []  # never propagated
    finally:
        logging.getLogger().removeHandler(root)
