#!/bin/bash
# sparse_lr on a9a: `paramserv local --ps=1 --workers=1` (a ps and a worker,
# separate processes on loopback) against `paramserv train --standalone`
# (the same loop in one process, no ps), in alternating pairs, PAIRS times.
# Each line: pair, load average, standalone and local examples/s (the result
# files'), their ratio; the last line the median and range of the ratios.
#
#   go build -o /tmp/paramserv ./cmd/paramserv
#   PARAMSERV_DATA=../shared/data PS=/tmp/paramserv scripts/bench/sparse_vs_standalone.sh [PAIRS] [OUT_DIR]
set -eu
: "${PARAMSERV_DATA:?set PARAMSERV_DATA to the folder holding a9a/}"
PS=${PS:?set PS to a paramserv binary}
PAIRS=${1:-10}
OUT=${2:-$(mktemp -d)}
mkdir -p "$OUT"
args=(--model=sparse_lr --train_data=a9a/a9a --num_features=123 --train_steps=10000 --seed=1
      --data_dir="$PARAMSERV_DATA")
rate() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["examples_per_s"])' "$1"; }
for i in $(seq 1 "$PAIRS"); do
  "$PS" train --standalone "${args[@]}" --result_file="$OUT/standalone$i.json" >"$OUT/standalone$i.log" 2>&1
  "$PS" local --ps=1 --workers=1 "${args[@]}" --result_file="$OUT/local$i.json" >"$OUT/local$i.log" 2>&1
  s=$(rate "$OUT/standalone$i.json")
  l=$(rate "$OUT/local$i.json")
  echo "$i $(cut -d' ' -f1 /proc/loadavg) $s $l $(/usr/bin/python3 -c "print(round($l/$s, 3))")"
done | tee "$OUT/pairs.txt"
/usr/bin/python3 - "$OUT/pairs.txt" <<'PY'
import statistics, sys
r = sorted(float(l.split()[4]) for l in open(sys.argv[1]))
print(f"local/standalone examples/s: median {statistics.median(r):.2f}x ({r[0]:.2f}-{r[-1]:.2f}), {len(r)} pairs")
PY
