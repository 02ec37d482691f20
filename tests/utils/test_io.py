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
