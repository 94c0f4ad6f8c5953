#!/bin/bash
# The PyTorch MNIST example on paramserv beside what a PyTorch user runs instead (../shared/peers/torch:
# one process, DistributedDataParallel with gloo on 2 processes, a parameter server over
# torch.distributed.rpc with 1 server and 2 trainers): same MLP 784-100-10, Adam 0.01, batch 100 per
# worker, 10,000 batches in all; the systems alternate within each round; medians and ratios at the end
# (the peers' summarize.py). Needs Debian's python3-torch and libopenblas0-pthread, a paramserv binary
# and the client library (go build -buildmode=c-shared -o libparamserv.so ./python/native).
# usage: PARAMSERV=./paramserv PARAMSERV_LIB=./libparamserv.so [PEERS=../shared/peers/torch] [ROUNDS=2] \
#        examples/torch/compare_peers.sh OUT_DIR
set -u
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
PEERS=$(cd "${PEERS:-$ROOT/../shared/peers/torch}" && pwd)
PS=${PARAMSERV:?set PARAMSERV to a paramserv binary}
: "${PARAMSERV_LIB:?set PARAMSERV_LIB to the client library}"
DATA=${PARAMSERV_DATA:-$ROOT/../shared/data}
OUT=${1:?usage: compare_peers.sh OUT_DIR}; R=$OUT/results; mkdir -p "$R"
PY=/usr/bin/python3
export OPENBLAS_NUM_THREADS=1 MNIST_DIR="$DATA/mnist" PARAMSERV_LIB PYTHONPATH="$ROOT/python"
EX="$PS local --ps=1 --workers=2 -- $PY $ROOT/examples/torch/mnist.py --data_dir=$DATA --steps_to_validate=100000"
CONFIGS=(
"ps_async|$EX --train_steps=10000 --result_file=\$RES"
"ob_single_t1|$PY $PEERS/single.py --threads 1 --steps 10000 --result \$RES"
"ps_sync5k|$EX --train_steps=5000 --sync_replicas --result_file=\$RES"
"ob_ddp|$PY $PEERS/ddp.py --steps 5000 --result \$RES"
"ob_rpc_async|$PY $PEERS/rpc_ps.py --mode async --steps 5000 --result \$RES"
)
for round in $(seq 1 "${ROUNDS:-2}"); do
  for entry in "${CONFIGS[@]}"; do
    name=${entry%%|*}; cmd=${entry#*|}
    RES=$R/${name}_r${round}.json; export RES
    echo "$(date +%T) round $round $name" >&2
    t0=$(date +%s.%N); bash -c "$cmd" >"$R/${name}_r${round}.log" 2>&1; rc=$?; t1=$(date +%s.%N)
    echo "rc=$rc wall_s=$(echo "$t1 - $t0" | bc)" >"$R/${name}_r${round}.wall"
    [ $rc = 0 ] || echo "    $name exited $rc: $(tail -1 "$R/${name}_r${round}.log")" >&2
    # summarize.py counts paramserv's whole-job rate (every worker's batches over the chief's training
    # time, from the workers' "finished" lines) for results of model "mnist", from the chief's own rate.
    case $name in ps_*) [ -f "$RES" ] && $PY -c "import json,sys;p=sys.argv[1];d=json.load(open(p));d['model']='mnist';d['examples_per_s']=d.get('chief_examples_per_s',d['examples_per_s']);json.dump(d,open(p,'w'))" "$RES";; esac
  done
done
PEER_DIR=$OUT $PY "$PEERS/summarize.py"
