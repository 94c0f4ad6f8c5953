#!/bin/sh
# Alternates the built-in Go MNIST model and the PyTorch example on 1 ps and
# 2 workers, async then sync, twice each, and prints examples/s (the chief's,
# as both result files count them), test accuracy and push+pull seconds.
#
#   PARAMSERV=/tmp/paramserv PYTHON=/usr/bin/python3 STEPS=3000 examples/torch/bench_mnist.sh
#
# PARAMSERV is the binary (go build -o /tmp/paramserv ./cmd/paramserv);
# PYTHON must import paramserv (installed, or PYTHONPATH=python with
# PARAMSERV_LIB set to a libparamserv.so).
set -e
B=${PARAMSERV:-paramserv}; PY=${PYTHON:-python3}; D=${PARAMSERV_DATA:-../shared/data}; S=${STEPS:-3000}
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
show() { "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); print(sys.argv[2], r['mode'], r['global_step'], 'examples/s', round(r['examples_per_s']), 'test_accuracy', r['test_accuracy'], 'push_pull_s', round(r['push_pull_s'], 2))" "$1" "$2"; }
for sync in false true; do
  for i in 1 2; do
    "$B" local --ps=1 --workers=2 --model=mnist --data_dir="$D" --train_steps="$S" --learning_rate=0.01 \
      --sync_replicas="$sync" --result_file="$OUT/go.json" >"$OUT/go.log" 2>&1
    show "$OUT/go.json" "go   "
    flag=""; [ "$sync" = true ] && flag=--sync_replicas
    "$B" local --ps=1 --workers=2 -- "$PY" "$(dirname "$0")/mnist.py" --data_dir="$D" --train_steps="$S" \
      --learning_rate=0.01 $flag --result_file="$OUT/py.json" >"$OUT/py.log" 2>&1
    show "$OUT/py.json" "torch"
  done
done
