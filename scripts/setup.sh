#!/usr/bin/env bash
# Creates ./.venv (if missing) and installs dpdist with its test extras into it.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[test]'
echo "dpdist installed in $(pwd)/.venv" >&2
