#!/bin/sh
# Alternates examples/torch/ctr.py without prefetch, with --prefetch (the
# next batch's embedding rows pulled in the step's push+pull) and with
# --prefetch=background (pulled while this batch computes), 1 ps and $WORKERS
# workers, $PAIRS times, and prints the chief's examples/s, its seconds in
# step() (push+pull) and in forward passes (with the rows' pulls unless
# prefetched), its CPU seconds (all its threads) and the test AUC. EXTRA
# adds flags to every run (e.g. EXTRA=--overlap, or --sync_replicas).
#
#   paramserv data synth-ctr --rows=200000 --fields=8 --out=/tmp/ctr
#   PARAMSERV=/tmp/paramserv PYTHON=/usr/bin/python3 DATA=/tmp/ctr examples/torch/bench_ctr.sh
#
# PARAMSERV is the binary (go build -o /tmp/paramserv ./cmd/paramserv);
# PYTHON must import paramserv (installed, or PYTHONPATH=python with
# PARAMSERV_LIB set to a libparamserv.so).
set -e
B=${PARAMSERV:-paramserv}; PY=${PYTHON:-python3}; D=${DATA:?DATA: a synth-ctr output directory}
S=${STEPS:-3000}; W=${WORKERS:-1}; N=${PAIRS:-3}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
show() { "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], 'workers', r['workers'], r['mode'], 'steps', r['global_step'], 'examples/s', round(r['examples_per_s']), 'push_pull_s', round(r['push_pull_s'], 2), 'forward_s', round(r['forward_s'], 2), 'cpu_s', round(r['cpu_s'], 2), 'test_auc', round(r['test_auc'], 4))" "$1" "$2"; }
i=0
while [ "$i" -lt "$N" ]; do
  for flag in "" --prefetch --prefetch=background; do
    "$B" local --ps=1 --workers="$W" -- "$PY" "$(dirname "$0")/ctr.py" --data_dir="$D" --train_steps="$S" \
      $EXTRA $flag --result_file="$OUT/r.json" >"$OUT/log" 2>&1 || { cat "$OUT/log"; exit 1; }
    show "$OUT/r.json" "${flag:-plain     } $EXTRA"
  done
  i=$((i + 1))
done
