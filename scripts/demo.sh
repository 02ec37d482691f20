#!/usr/bin/env bash
# The end-to-end job of the day on embedded defaults: everything under ./results/.
# Generates the seed-003 synthetic set and a KDDA-shaped sparse set, ingests a real
# svmlight file when ../shared/data is beside the checkout, sets a privacy budget per
# dataset id in a fresh SQLite ledger, releases a DP-SIS selection and DP Frank-Wolfe
# models (each charged before it is printed), and shows the ledger.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p results
rm -f results/ledger.sqlite results/ledger.sqlite-wal results/ledger.sqlite-shm  # a fresh demo ledger
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
$DPDIST select results/fan-lv --method dp-sis --k 8 --epsilon 0.5 --clip --out results/fan-lv-features.json
$DPDIST train results/kdda-small --method fast-dp-fw --loss logistic --lam 50 --iters 2000 \
    --epsilon 0.5 --delta 1e-7 --clip
if [ -n "${RCV1:-}" ]; then
    $DPDIST train results/rcv1 --method fast-dp-fw --loss logistic --lam 50 --iters 4000 --epsilon 0.5 --delta 1e-7
fi
$DPDIST budget show
echo "stores and ledger: $PWD/results"
