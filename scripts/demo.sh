#!/usr/bin/env bash
# The end-to-end job of the day, on embedded defaults (ledger in ./results/).
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
export DPDIST_LEDGER="$PWD/results/ledger.sqlite"
DPDIST=.venv/bin/dpdist
$DPDIST budget init --dataset demo --epsilon 1.0 --delta 1e-6
.venv/bin/python - <<'PY'
import numpy as np
from dpdist.privacy import Accountant, ExponentialMechanism
acc = Accountant()
scores = np.array([3.0, 1.0, 2.5, 0.2])
mech = ExponentialMechanism(epsilon=0.25, sensitivity=1.0)
win = acc.release("demo", mech.true_epsilon, 0.0, mech.name, "demo-select",
                  lambda: int(mech.select(scores)))
print(f"released winner index {win} (a rerun returns the recorded release)")
PY
$DPDIST budget show --dataset demo
$DPDIST budget history --dataset demo
echo "ledger: $DPDIST_LEDGER"
