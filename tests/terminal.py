"""What a user's terminal shows of a command: its stdout and stderr on a pseudo-terminal."""

from __future__ import annotations

import os
import pty
import select
import subprocess


def on_a_terminal(argv: list[str], env: dict[str, str], cwd: str | os.PathLike[str] | None = None) -> str:
    """Run ``argv`` with stdout and stderr on a pseudo-terminal; return what it showed (it must exit 0)."""
    parent, child = pty.openpty()
    proc = subprocess.Popen(argv, stdout=child, stderr=child, stdin=subprocess.DEVNULL, env=env, cwd=cwd)
    os.close(child)
    chunks = []
    while select.select([parent], [], [], 300)[0]:
        try:
            data = os.read(parent, 65536)
        except OSError:  # the command closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    else:
        proc.kill()
    assert proc.wait(60) == 0
    os.close(parent)
    return b"".join(chunks).decode(errors="replace")
