"""The code's size limits: no module over 600 lines and no function over 80 lines in the shipped
packages (``dpdist``, ``flows``, ``pipelines``; benchmarks, scripts and tests aside).

A function's length runs from its ``def`` line to its last line (decorators aside, nested
functions counted in their parent too); numba kernels are functions like any other.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("dpdist", "flows", "pipelines")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if "__pycache__" not in p.parts)


def oversized(paths: list[Path]) -> list[str]:
    """Every module over ``MAX_MODULE_LINES`` lines and function over ``MAX_FUNCTION_LINES``, one line each."""
    found = []
    for path in paths:
        source = path.read_text(encoding="utf-8")
        name = path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else str(path)
        n_lines = len(source.splitlines())
        if n_lines > MAX_MODULE_LINES:
            found.append(f"{name}: module of {n_lines} lines (at most {MAX_MODULE_LINES})")
        for node in ast.walk(ast.parse(source, filename=name)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    found.append(
                        f"{name}:{node.lineno}: function {node.name} of {length} lines (at most {MAX_FUNCTION_LINES})"
                    )
    return found


def test_the_scan_finds_long_modules_and_functions(tmp_path: Path) -> None:
    body = "\n".join(f"    x = {i}" for i in range(MAX_FUNCTION_LINES))  # with its def: one line too many
    long_function = tmp_path / "long_function.py"
    long_function.write_text(f"def f():\n{body}\n", encoding="utf-8")
    fits = tmp_path / "fits.py"
    fits.write_text("def f():\n" + "\n".join(body.splitlines()[1:]) + "\n", encoding="utf-8")
    long_module = tmp_path / "long_module.py"
    long_module.write_text("x = 0\n" * (MAX_MODULE_LINES + 1), encoding="utf-8")
    found = oversized([long_function, fits, long_module])
    assert len(found) == 2
    assert "function f of 81 lines" in found[0] and "module of 601 lines" in found[1]


def test_no_module_or_function_is_over_the_limits() -> None:
    paths = _modules()
    assert len(paths) > 50  # the packages were found
    found = oversized(paths)
    assert not found, "over the size limits:\n" + "\n".join(found)
