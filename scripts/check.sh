#!/usr/bin/env bash
# The static checks of the README's test command (.ci/run runs it), before the tests: ruff's lint
# and format check over the repository, mypy over the packages (its files and the strict modules
# are in pyproject.toml), and the documentation site built in strict mode (any warning -- a broken
# link or anchor, a docstring griffe cannot read, a missing generated page -- fails it). Every
# check runs, so one run shows every failure; exits non-zero if any failed.
#   bash scripts/check.sh            # VENV=path/to/venv for another environment (default ./.venv)
set -uo pipefail
cd "$(dirname "$0")/.."
VENV=${VENV:-.venv}
SITE=$(mktemp -d)
trap 'rm -rf "$SITE"' EXIT

failed=()
check() {  # check NAME COMMAND...: run it, remember its name if it fails
    local name=$1
    shift
    echo "+ $*" >&2
    if ! "$@"; then
        failed+=("$name")
    fi
}

check "ruff check" "$VENV/bin/ruff" check .
check "ruff format" "$VENV/bin/ruff" format --check .
check "mypy" "$VENV/bin/mypy"
check "mkdocs" "$VENV/bin/mkdocs" build --strict --site-dir "$SITE"  # not --quiet: it hides the warnings strict counts

if [ ${#failed[@]} -gt 0 ]; then
    echo "check.sh: failed: ${failed[*]}" >&2
    exit 1
fi
echo "check.sh: ruff, mypy and the docs build are clean" >&2
