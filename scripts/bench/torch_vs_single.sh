#!/bin/sh
# The PyTorch examples as paramserv jobs against the same model in one
# PyTorch process, alternating within each of $ROUNDS rounds:
#   mnist_single  scripts/bench/torch_mnist_step.py (the MLP with Adam, one thread)
#   mnist_job     paramserv local --ps=1 --workers=2 -- examples/torch/mnist.py (Adam on the ps)
#   ctr_single    scripts/torch_ctr_single.py (nn.EmbeddingBag, sparse Adagrad, one thread)
#   ctr_job       paramserv local --ps=2 --workers=2 -- examples/torch/ctr.py --optimizer=adagrad --prefetch
#   ctr_job_plain the same without --prefetch (rows pulled by the forward pass: three calls a step)
#   ctr_job_overlap the same with --prefetch --overlap (the step's call in flight while the
#                 next batch computes, carrying the rows of the batch after next)
# Each line gives the load average before the run and the whole job's
# examples/s (the result file's examples_per_s: every worker's examples over
# the chief's training time, counted from the global steps as the Go models
# count them); one process's is its training loop's. $STEPS batches each
# (a job's --train_steps, async). cpu_s is the whole command's CPU seconds
# (all its processes, start-up and data loading included), but for
# mnist_single its training steps' alone (it also makes its data and times
# a compute-only pass). On a machine busy with other work the job's three
# or four processes get a larger share of the CPU than one process does:
# the end gives the medians and job/single ratios of both examples/s and
# examples per CPU second ($STEPS x 100 / cpu_s; start-up counts against
# the jobs and ctr_single).
#
#   paramserv data synth-ctr --rows=200000 --fields=8 --out=/tmp/ctr
#   PARAMSERV=/tmp/paramserv PARAMSERV_LIB=/tmp/libparamserv.so PARAMSERV_DATA=../shared/data \
#     CTR_DATA=/tmp/ctr scripts/bench/torch_vs_single.sh
set -eu
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
B=${PARAMSERV:?set PARAMSERV to a paramserv binary}; PY=${PYTHON:-/usr/bin/python3}
D=${PARAMSERV_DATA:-$ROOT/../shared/data}; C=${CTR_DATA:?set CTR_DATA to a synth-ctr output directory}
S=${STEPS:-3000}; N=${ROUNDS:-2}; ONLY=${ONLY:-mnist_single mnist_job ctr_single ctr_job ctr_job_plain ctr_job_overlap}
export PYTHONPATH="$ROOT/python${PYTHONPATH:+:$PYTHONPATH}" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1
OUT=${BENCH_OUT:-}
rate() { "$PY" -c "import json,sys; print(round(json.load(open(sys.argv[1]))['examples_per_s']))" "$1"; }
run() {
  case $1 in
  mnist_single)
    # The training steps' own CPU seconds (it also times a compute-only pass and makes its data first).
    "$PY" "$ROOT/scripts/bench/torch_mnist_step.py" --steps="$S" >"$OUT/single"
    sed -n "s/.*train step.* \([0-9.]*\) cpu-ms\/step.*/\1/p" "$OUT/single" | awk -v s="$S" '{printf "%.1f", $1 * s / 1000}' >"$OUT/cpu_train"
    sed -n 's/.*train step.* \([0-9]*\) examples\/s/\1/p' "$OUT/single" ;;
  mnist_job) "$B" local --ps=1 --workers=2 -- "$PY" "$ROOT/examples/torch/mnist.py" --data_dir="$D" --train_steps="$S" \
      --steps_to_validate=100000 --result_file="$OUT/r.json" >"$OUT/log" 2>&1 || { tail -5 "$OUT/log" >&2; exit 1; }
    rate "$OUT/r.json" ;;
  ctr_single) "$PY" "$ROOT/scripts/torch_ctr_single.py" --data_dir="$C" --steps="$S" >"$OUT/r.json"; rate "$OUT/r.json" ;;
  ctr_job|ctr_job_plain|ctr_job_overlap)
    case $1 in ctr_job) flag=--prefetch ;; ctr_job_plain) flag= ;; *) flag="--prefetch --overlap" ;; esac
    "$B" local --ps=2 --workers=2 -- "$PY" "$ROOT/examples/torch/ctr.py" --data_dir="$C" --train_steps="$S" \
      --optimizer=adagrad $flag --result_file="$OUT/r.json" >"$OUT/log" 2>&1 || { tail -5 "$OUT/log" >&2; exit 1; }
    rate "$OUT/r.json" ;;
  esac
}
if [ "${1:-}" = __run ]; then run "$2"; exit; fi  # one run, timed by the loop below
OUT=$(mktemp -d); export BENCH_OUT="$OUT"
trap 'rm -rf "$OUT"' EXIT
i=1
while [ "$i" -le "$N" ]; do
  for name in $ONLY; do
    load=$(cut -d' ' -f1 /proc/loadavg)
    r=$(/usr/bin/time -f '%U %S' -o "$OUT/cpu" sh -c "$(command -v "$0") __run $name")
    cpu=$(awk '{printf "%.1f", $1 + $2}' "$OUT/cpu")
    if [ -s "$OUT/cpu_train" ]; then cpu=$(cat "$OUT/cpu_train"); rm "$OUT/cpu_train"; fi
    echo "round $i $name load $load cpu_s $cpu examples/s $r" | tee -a "$OUT/all"
  done
  i=$((i + 1))
done
"$PY" - "$OUT/all" "$S" <<'EOF'
import statistics, sys
rates, cpus = {}, {}
for line in open(sys.argv[1]):
    w = line.split()
    rates.setdefault(w[2], []).append(float(w[-1]))
    cpus.setdefault(w[2], []).append(float(w[6]))
med = {k: statistics.median(v) for k, v in rates.items()}
for k, v in rates.items():
    print(f"{k}: median {med[k]:.0f} examples/s ({min(v):.0f}-{max(v):.0f}), cpu_s median {statistics.median(cpus[k]):.1f}")
steps = float(sys.argv[2])
per_cpu = {k: statistics.median(steps * 100 / c for c in v) for k, v in cpus.items()}
for k in per_cpu:
    print(f"{k}: median {per_cpu[k]:.0f} examples per CPU second")
for job, single in (("mnist_job", "mnist_single"), ("ctr_job", "ctr_single"), ("ctr_job_plain", "ctr_single"),
                    ("ctr_job_overlap", "ctr_single")):
    if job in med and single in med:
        print(f"{job} / {single}: {med[job] / med[single]:.2f}x examples/s, {per_cpu[job] / per_cpu[single]:.2f}x examples per CPU second")
EOF
