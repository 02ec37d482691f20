"""Atomic writes: the old file or the whole new one, and no temporary left behind."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dpdist.utils.io import write_json_atomic, write_text_atomic


def test_json_written_whole_and_replaced(tmp_path: Path) -> None:
    p = tmp_path / "sub" / "r.json"
    write_json_atomic(p, {"b": 1, "a": [1, 2]})
    write_json_atomic(p, {"c": 3})
    assert json.loads(p.read_text()) == {"c": 3}
    assert [f.name for f in p.parent.iterdir()] == ["r.json"]


def test_failed_write_keeps_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    p = tmp_path / "r.md"
    write_text_atomic(p, "old")
    with pytest.raises(TypeError):
        write_text_atomic(p, 123)  # type: ignore[arg-type]
    assert p.read_text() == "old" and [f.name for f in tmp_path.iterdir()] == ["r.md"]


def test_a_write_failing_half_way_keeps_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch) -> None:
    import os

    from dpdist.utils.io import write_bytes_atomic

    p = tmp_path / "plot.png"
    write_bytes_atomic(p, b"old")

    def broken(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken)  # after the temporary holds the new bytes
    with pytest.raises(OSError, match="disk full"):
        write_bytes_atomic(p, b"new" * 1000)
    assert p.read_bytes() == b"old" and [f.name for f in tmp_path.iterdir()] == ["plot.png"]


def test_report_plots_are_written_atomically(tmp_path: Path, monkeypatch) -> None:
    import dpdist.flows.report as report

    written = []
    monkeypatch.setattr(report, "write_bytes_atomic", lambda path, data: written.append((path, data[:8])))
    assert report._plot_features({"dp-sis": {"features": [1, 5]}}, [1, 2], tmp_path / "f.png")
    assert written == [(tmp_path / "f.png", b"\x89PNG\r\n\x1a\n")] and not (tmp_path / "f.png").exists()
