#!/bin/bash
# paramserv's MNIST job (`local --ps=1 --workers=2 --model=mnist`, 10,000
# batches of 100: STEPS) against the same model trained by one PyTorch
# process of one thread (scripts/bench/torch_mnist_single.py), in turns:
# the default build (PS), optionally the -tags openblas build (PS_OPENBLAS)
# and an older binary (PS_BEFORE), then PyTorch, ROUNDS times. Each run's
# result JSON, log and /usr/bin/time line (wall, user and system seconds of
# the whole job, start-up included) go to OUT_DIR with the load average at
# its start; the last lines print per system the median and range of
# examples/s (the training loop's, from the result files), of its ratio to
# PyTorch's round by round, and of the job's CPU seconds.
#
#   go build -o /tmp/paramserv ./cmd/paramserv
#   go build -tags openblas -o /tmp/paramserv-openblas ./cmd/paramserv
#   PARAMSERV_DATA=../shared/data PS=/tmp/paramserv PS_OPENBLAS=/tmp/paramserv-openblas \
#       [ROUNDS=5] [STEPS=10000] scripts/bench/mlp_vs_torch.sh [OUT_DIR]
set -eu
: "${PARAMSERV_DATA:?set PARAMSERV_DATA to the folder holding mnist/}"
PS=${PS:?set PS to a paramserv binary}
ROUNDS=${ROUNDS:-5}
STEPS=${STEPS:-10000}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${1:-$(mktemp -d)}
mkdir -p "$OUT"
[ -x /usr/bin/time ] || { echo "mlp_vs_torch.sh: needs /usr/bin/time (Debian's time)" >&2; exit 2; }
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

run() { # name round command...
  local name=$1 round=$2
  shift 2
  echo "$(date -u +%T) round $round $name (load $(cut -d' ' -f1 /proc/loadavg))" >&2
  cut -d' ' -f1 /proc/loadavg >"$OUT/$name-$round.load"
  /usr/bin/time -f "%e %U %S" -o "$OUT/$name-$round.time" "$@" >"$OUT/$name-$round.log" 2>&1 ||
    echo "$name round $round failed: $(tail -1 "$OUT/$name-$round.log")" >&2
}

for round in $(seq 1 "$ROUNDS"); do
  for sys in paramserv paramserv-openblas paramserv-before; do
    case $sys in
    paramserv) bin=$PS ;;
    paramserv-openblas) bin=${PS_OPENBLAS:-} ;;
    paramserv-before) bin=${PS_BEFORE:-} ;;
    esac
    [ -n "$bin" ] || continue
    run "$sys" "$round" "$bin" local --ps=1 --workers=2 --model=mnist --data_dir="$PARAMSERV_DATA" \
      --train_steps="$STEPS" --result_file="$OUT/$sys-$round.json"
  done
  run torch "$round" /usr/bin/python3 "$HERE/torch_mnist_single.py" --steps="$STEPS" \
    --result_file="$OUT/torch-$round.json"
done

/usr/bin/python3 - "$OUT" "$ROUNDS" <<'PY'
import json, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
def get(name, r):
    try:
        eps = json.load(open(f"{out}/{name}-{r}.json"))["examples_per_s"]
        wall, user, sys_ = map(float, open(f"{out}/{name}-{r}.time").read().split()[-3:])
        load = float(open(f"{out}/{name}-{r}.load").read())
    except (OSError, ValueError, KeyError):
        return None
    return eps, user + sys_, wall, load
def fmt(xs, f="{:.0f}"):
    return f"{f.format(statistics.median(xs))} ({f.format(min(xs))}-{f.format(max(xs))})" if xs else "-"
torch = {r: get("torch", r) for r in range(1, rounds + 1)}
for name in ("paramserv", "paramserv-openblas", "paramserv-before", "torch"):
    runs = {r: v for r in range(1, rounds + 1) if (v := get(name, r))}
    if not runs:
        continue
    col = lambda i: [v[i] for v in runs.values()]
    ratio = [v[0] / torch[r][0] for r, v in runs.items() if torch.get(r)]
    print(f"{name:19s} examples/s {fmt(col(0))}  /torch {fmt(ratio, '{:.2f}')}  CPU s {fmt(col(1), '{:.1f}')}"
          f"  wall s {fmt(col(2), '{:.1f}')}  load {fmt(col(3), '{:.1f}')}")
PY
