#!/usr/bin/env bash
# A new user's first commands, exactly as README.md writes them, in a fresh clone of this checkout:
# the set-up + main-job command, then the "Data" and "Selection and training" blocks (run in order,
# with the README's own `source .venv/bin/activate`). Each command must succeed.
#   bash scripts/new_user_check.sh [--tests]     # --tests: also the README's test command
# Needs ../shared/data beside the clone (the README's paths); the clone goes to a temporary directory.
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d "${TMPDIR:-/tmp}/dpdist-new-user.XXXXXX")"
trap 'echo "left in $work" >&2' EXIT
git clone -q "$here" "$work/main"
ln -s "$(cd "$here/../shared" && pwd)" "$work/shared"
cd "$work/main"
export DPDIST_LEDGER="$work/ledger.sqlite"   # a new user's own ledger, not this machine's
blocks() {  # the bash code blocks of README.md, numbered from 1, one file each
    awk -v dir="$work" '/^```bash/{n++; f=1; next} /^```/{f=0} f{print > (dir "/block" n ".sh")}' README.md
}
blocks
step() { echo "== README block $1" >&2; bash -euo pipefail -c "$(cat "$work/block$1.sh")"; }
step 1            # set up, and the main job on embedded defaults
test -s results/run/report.md && test -s results/run/report.html
( cat "$work/block3.sh" "$work/block4.sh" > "$work/data.sh"; echo "== README blocks 3-4" >&2
  bash -euo pipefail "$work/data.sh" )
if [ "${1:-}" = "--tests" ]; then step 2; fi
echo "new-user check passed in $work" >&2
trap - EXIT
