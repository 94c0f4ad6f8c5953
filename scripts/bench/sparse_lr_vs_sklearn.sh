#!/bin/bash
# sparse_lr, one epoch of synth-ctr data in batches of 1000 (FTRL, the
# model's default), against scikit-learn's SGDClassifier fit on the same
# rows hashed (scripts/bench/sklearn_ctr.py; reading and hashing not timed),
# in alternating rounds: `paramserv train --standalone` (one process, no
# ps), `paramserv local --ps=1 --workers=1` (a ps and a worker process on
# loopback), then SGDClassifier. Each line: round, load average,
# examples/s and test AUC of each, and the two ratios to scikit-learn's
# examples/s; the last lines the medians and ranges of the ratios. The
# CPU seconds of each (standalone: its training_cpu_s; 1 ps + 1 worker:
# the worker's training_cpu_s, and the whole job's CPU, loading included;
# scikit-learn: its fit's) go to OUT_DIR/cpu.txt.
#
#   go build -o /tmp/paramserv ./cmd/paramserv
#   /tmp/paramserv data synth-ctr --rows=2000000 --fields=26 --out=/tmp/ctr2m
#   PS=/tmp/paramserv scripts/bench/sparse_lr_vs_sklearn.sh /tmp/ctr2m [ROUNDS] [OUT_DIR]
set -eu
DATA=${1:?usage: sparse_lr_vs_sklearn.sh DATA_DIR [ROUNDS] [OUT_DIR]}
PS=${PS:?set PS to a paramserv binary}
ROUNDS=${2:-3}
OUT=${3:-$(mktemp -d)}
HERE=$(dirname "$0")
mkdir -p "$OUT"
args=(--model=sparse_lr --train_data="$DATA" --test_data="$DATA/test.tsv" --input_format=criteo --fields=0,26
      --batch_size=1000 --epochs=1 --seed=1)
get() { /usr/bin/python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print(d[sys.argv[2]])' "$1" "$2"; }
for i in $(seq 1 "$ROUNDS"); do
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$PS" train --standalone "${args[@]}" --result_file="$OUT/standalone$i.json" >"$OUT/standalone$i.log" 2>&1
  /usr/bin/time -f "%U %S" -o "$OUT/local$i.time" "$PS" local --ps=1 --workers=1 "${args[@]}" --result_file="$OUT/local$i.json" >"$OUT/local$i.log" 2>&1
  /usr/bin/python3 "$HERE/sklearn_ctr.py" --data="$DATA" >"$OUT/sklearn$i.json"
  s=$(get "$OUT/standalone$i.json" examples_per_s); sa=$(get "$OUT/standalone$i.json" test_auc)
  l=$(get "$OUT/local$i.json" examples_per_s); la=$(get "$OUT/local$i.json" test_auc)
  k=$(get "$OUT/sklearn$i.json" examples_per_s); ka=$(get "$OUT/sklearn$i.json" test_auc)
  echo "$i $load standalone $s $sa local $l $la sklearn $k $ka $(/usr/bin/python3 -c "print(round($s/$k, 3), round($l/$k, 3))")"
  echo "$i $load standalone_training_cpu_s $(get "$OUT/standalone$i.json" training_cpu_s)" \
    "local_worker_training_cpu_s $(get "$OUT/local$i.json" training_cpu_s)" \
    "local_job_cpu_s $(awk '{print $1 + $2}' "$OUT/local$i.time")" \
    "sklearn_fit_cpu_s $(get "$OUT/sklearn$i.json" fit_cpu_s)" >>"$OUT/cpu.txt"
done | tee "$OUT/rounds.txt"
cat "$OUT/cpu.txt"
/usr/bin/python3 - "$OUT/rounds.txt" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
for name, col in (("standalone", 11), ("1 ps + 1 worker", 12)):
    r = sorted(float(x[col]) for x in rows)
    print(f"{name} / SGDClassifier examples/s: median {statistics.median(r):.2f}x ({r[0]:.2f}-{r[-1]:.2f}), {len(r)} rounds")
PY
