#!/usr/bin/env bash
# The second half of the README's test command (after the full suite on Python 3.11 in ./.venv):
# the fast part, `pytest -m "not slow"` (everything but the tests marked slow: the flow,
# deployment and SLURM tests of tests/flows/), on Python 3.12 (./.venv-3.12) and 3.13
# (./.venv-3.13). Each environment is made or updated by scripts/setup.sh at the versions of
# constraints.txt. A Python version that cannot be found here is skipped, saying so. Exits
# non-zero if any run failed.
set -uo pipefail
cd "$(dirname "$0")/.."

find_python() {  # the path of a python of version $1 (e.g. 3.12), or nothing
    local v=$1 c
    for c in "python$v" $(command -v pyenv >/dev/null && ls -d "$(pyenv root)"/versions/"$v".*/bin/python 2>/dev/null); do
        if command -v "$c" >/dev/null 2>&1 && "$c" -c "import sys; sys.exit(sys.version_info[:2] != tuple(map(int, '$v'.split('.'))))" 2>/dev/null; then
            command -v "$c"
            return
        fi
    done
}

failed=()
for v in 3.12 3.13; do
    py=$(find_python "$v")
    if [ -z "$py" ]; then
        echo "SKIPPED: Python $v: no python$v on PATH nor under pyenv; its fast part did not run" >&2
        continue
    fi
    echo "== Python $v ($py): fast part (pytest -m 'not slow')" >&2
    if PYTHON="$py" VENV=".venv-$v" bash scripts/setup.sh; then
        ".venv-$v/bin/python" -m pytest -q -n 2 --dist loadgroup -m "not slow" || failed+=("Python $v fast part")
    else
        failed+=("Python $v setup")
    fi
done

if [ ${#failed[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failed[@]}" >&2
    exit 1
fi
