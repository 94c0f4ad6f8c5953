#!/bin/bash
# A whole `paramserv local --ps=1 --workers=2 --model=mnist` job against
# PyTorch DDP (scripts/ddp_mnist.py: gloo, 2 processes of one thread) on the
# same MLP, batch and optimizer, 10,000 batches in all each (STEPS), in
# turns: pure-Go paramserv, paramserv built with -tags openblas, DDP, ROUNDS
# times. Each run's result JSON and wall seconds (the whole job, start-up
# included) go to OUT_DIR; the last lines print, per system, the median and
# range of examples/s (the training loop's, from the result files) and of
# wall seconds, and the ratios to DDP round by round.
#
#   go build -o /tmp/paramserv ./cmd/paramserv
#   go build -tags openblas -o /tmp/paramserv-openblas ./cmd/paramserv
#   PARAMSERV_DATA=../shared/data PS=/tmp/paramserv PS_OPENBLAS=/tmp/paramserv-openblas \
#       [ROUNDS=5] [STEPS=10000] scripts/bench/ddp_vs_local.sh [OUT_DIR]
set -eu
: "${PARAMSERV_DATA:?set PARAMSERV_DATA to the folder holding mnist/}"
PS=${PS:?set PS to a paramserv binary}
PS_OPENBLAS=${PS_OPENBLAS:-}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-10000}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

run() { # name round command...
  local name=$1 round=$2
  shift 2
  local t0 t1 rc=0
  t0=$(date +%s.%N)
  "$@" >"$OUT/$name-$round.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  echo "{\"rc\": $rc, \"wall_s\": $(echo "$t1 - $t0" | bc), \"load\": \"$(cut -d' ' -f1 /proc/loadavg)\"}" >"$OUT/$name-$round.wall"
  [ "$rc" = 0 ] || echo "$name round $round exited $rc: $(tail -1 "$OUT/$name-$round.log")" >&2
}

local_job() { # binary result
  "$1" local --ps=1 --workers=2 --model=mnist --data_dir="$PARAMSERV_DATA" \
    --train_steps="$STEPS" --result_file="$2"
}

for round in $(seq 1 "$ROUNDS"); do
  echo "$(date -u +%T) round $round (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  run paramserv "$round" local_job "$PS" "$OUT/paramserv-$round.json"
  if [ -n "$PS_OPENBLAS" ]; then
    run paramserv-openblas "$round" local_job "$PS_OPENBLAS" "$OUT/paramserv-openblas-$round.json"
  fi
  run ddp "$round" /usr/bin/python3 "$HERE/../ddp_mnist.py" --steps=$((STEPS / 2)) \
    --result_file="$OUT/ddp-$round.json"
done

/usr/bin/python3 - "$OUT" "$ROUNDS" <<'EOF'
import json, os, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def get(name, r):
    try:
        res = json.load(open(f"{out}/{name}-{r}.json"))
        wall = json.load(open(f"{out}/{name}-{r}.wall"))
    except (OSError, ValueError):
        return None
    return res["examples_per_s"], wall["wall_s"], res.get("metrics", {}).get("test_accuracy", res.get("test_accuracy"))
def fmt(xs, f="{:.0f}"):
    return f"{f.format(statistics.median(xs))} ({f.format(min(xs))}-{f.format(max(xs))})" if xs else "-"
ddp = {r: get("ddp", r) for r in range(1, rounds + 1)}
for name in ("paramserv", "paramserv-openblas", "ddp"):
    runs = {r: get(name, r) for r in range(1, rounds + 1)}
    runs = {r: v for r, v in runs.items() if v}
    if not runs:
        continue
    eps = [v[0] for v in runs.values()]
    wall = [v[1] for v in runs.values()]
    acc = [v[2] for v in runs.values() if v[2] is not None]
    ratio = [v[0] / ddp[r][0] for r, v in runs.items() if ddp.get(r)]
    wratio = [ddp[r][1] / v[1] for r, v in runs.items() if ddp.get(r)]
    print(f"{name:20s} examples/s {fmt(eps)}  /ddp {fmt(ratio, '{:.2f}')}  wall s {fmt(wall, '{:.1f}')}"
          f"  ddp wall/this {fmt(wratio, '{:.2f}')}  test acc {fmt(acc, '{:.4f}')}")
EOF
