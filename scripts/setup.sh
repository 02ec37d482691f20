#!/usr/bin/env bash
# Creates a virtual environment (./.venv, or $VENV) if missing and installs dpdist (editable)
# with its test extras into it, at the exact versions of constraints.txt.
# Python: $PYTHON if set, else python3; dpdist supports 3.11, 3.12 and 3.13.
# Idempotent: re-running only installs what changed.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
VENV=${VENV:-.venv}
supported='import sys; sys.exit(0 if (3, 11) <= sys.version_info[:2] <= (3, 13) else 1)'
if [ ! -x "$VENV/bin/python" ]; then
    if ! "$PY" -c "$supported"; then
        echo "dpdist needs Python 3.11, 3.12 or 3.13; $PY is $("$PY" -V 2>&1) (set PYTHON=/path/to/python3.x)" >&2
        exit 2
    fi
    "$PY" -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "$supported"; then
    echo "$VENV is $("$VENV/bin/python" -V 2>&1); dpdist needs 3.11-3.13: remove $VENV, re-run with PYTHON=/path/to/python3.x" >&2
    exit 2
fi
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet -c constraints.txt -e '.[test]'
echo "dpdist installed in $(pwd)/$VENV ($("$VENV/bin/python" -V 2>&1))" >&2
