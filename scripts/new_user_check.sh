#!/usr/bin/env bash
# A newcomer's own-data path, as README.md gives it, on a generated table with a text column and gaps:
# ingest (declared categories, a constant fill) -> budget -> select -> train on the selection -> export
# -> evaluate on a public test file. Each step is the command a user types; the script fails on the first
# that does not do what the README says. Runs in a fresh HOME and ledger (tests/test_new_user.py runs it).
#   bash scripts/new_user_check.sh            # DPDIST=path/to/dpdist to use another installation
set -euo pipefail
cd "$(dirname "$0")/.."
DPDIST=${DPDIST:-$(pwd)/.venv/bin/dpdist}
PYTHON=${PYTHON:-$(dirname "$DPDIST")/python}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
export HOME="$WORK/home" DPDIST_LEDGER="$WORK/ledger.sqlite"
mkdir -p "$HOME"

# a table of one's own: numbers with gaps, a region in words (one value the schema does not list), a 0/1 target
"$PYTHON" - "$WORK" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(3)
def table(path, n):
    a, b = rng.normal(size=n), rng.normal(size=n)
    region = rng.choice(["north", "south", "east", "west"], size=n, p=[0.4, 0.3, 0.25, 0.05])
    z = 2 * a - b + (region == "north") - (region == "east")
    y = (z + rng.logistic(size=n) * 0.5 > 0).astype(int)
    with open(path, "w") as f:
        f.write("income,age,region,bought\n")
        for i in range(n):
            ai = "" if rng.random() < 0.05 else f"{a[i] / 4:.4f}"   # gaps
            f.write(f"{ai},{b[i] / 4:.4f},{region[i]},{y[i]}\n")
table(f"{sys.argv[1]}/mine.csv", 20000)
table(f"{sys.argv[1]}/public-test.csv", 2000)
PY

step() { echo "+ dpdist $*" >&2; "$DPDIST" "$@"; }
step ingest "$WORK/mine.csv" --out "$WORK/mine" --task binary --labels 0,1 \
    --categories region=north,south,east --fill-value 0
step budget init "$WORK/mine" --epsilon 4 --delta 1e-6 --name mine
step budget show
step select "$WORK/mine" --method dp-sis --k 3 --epsilon 0.5 --clip --out "$WORK/selected.json"
again=$(step select "$WORK/mine" --method dp-sis --k 3 --epsilon 0.5 --clip --json)
echo "$again" | "$PYTHON" -c "import json,sys; assert json.load(sys.stdin)['replayed'], 'the same command did not replay'"
step train "$WORK/mine" --method dp-sgd --epsilon 1 --features "$WORK/selected.json" --key my-model \
    --out "$WORK/train.json"
step models export my-model --out "$WORK/model.json"
step evaluate "$WORK/model.json" --public-test "$WORK/public-test.csv" --json > "$WORK/eval.json"
"$PYTHON" - "$WORK" <<'PY'
import json, sys
work = sys.argv[1]
model = json.load(open(f"{work}/model.json"))["result"]
ev = json.load(open(f"{work}/eval.json"))
assert model["classes"] == [0.0, 1.0], model["classes"]  # the user's labels, not -1/+1
assert model["n_features"] == 6 and model["schema"]["categories"] == {"region": ["north", "south", "east"]}
assert ev["exact"] and ev["rows"] == 2000 and ev["accuracy"] > 0.6, ev
print(f"new-user check: ok (public test accuracy {ev['accuracy']:.3f})")
PY
step budget history --dataset mine
