#!/usr/bin/env bash
# The end-to-end job of the day on embedded defaults: everything under ./results/.
# Generates the seed-003 synthetic set and a KDDA-shaped sparse set, ingests a real
# svmlight file when ../shared/data is beside the checkout, sets a privacy budget per
# dataset id in the SQLite ledger, and shows the ledger.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
export DPDIST_LEDGER="$PWD/results/ledger.sqlite"
DPDIST=.venv/bin/dpdist

id_of() { .venv/bin/python -c "import json,sys; print(json.load(sys.stdin)['dataset_id'])"; }

FANLV=$($DPDIST synth fan-lv --out results/fan-lv --seed 1 --force --json | id_of)
KDDA=$($DPDIST synth kdda --scale 0.002 --out results/kdda-small --seed 1 --force --json | id_of)
IDS="$FANLV $KDDA"
if [ -f ../shared/data/libsvm/rcv1_small.train.svm.xz ]; then
    RCV1=$($DPDIST ingest ../shared/data/libsvm/rcv1_small.train.svm.xz --out results/rcv1 \
           --n-features 47236 --force --json | id_of)
    IDS="$IDS $RCV1"
fi
for id in $IDS; do
    $DPDIST budget init --dataset "$id" --epsilon 1.0 --delta 1e-6
done
$DPDIST budget show
echo "stores and ledger: $PWD/results"
