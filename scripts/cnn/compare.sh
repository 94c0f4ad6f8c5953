#!/bin/bash
# One epoch of PyTorch's upstream MNIST CNN (Adadelta 1.0, StepLR 0.7, batch 64) three ways, alternating
# within each round: one process (single.py), paramserv (examples/torch/mnist_cnn.py: 1 ps + 2 workers),
# and DistributedDataParallel (ddp.py: 2 processes, gloo). The two-process runs get one thread each
# (OMP_NUM_THREADS=1). Prints each run's wall seconds and test accuracy.
# usage: PARAMSERV=path/to/paramserv PARAMSERV_LIB=path/to/libparamserv.so [ROUNDS="1 2"] scripts/cnn/compare.sh DATA_DIR
set -u
HERE=$(cd "$(dirname "$0")" && pwd); REPO=$(cd "$HERE/../.." && pwd)
D=${1:?give the directory of the MNIST IDX files}
PS=${PARAMSERV:?set PARAMSERV to a paramserv binary}
OUT=$(mktemp -d)
for r in ${ROUNDS:-1}; do
  for sys in single paramserv ddp; do
    t0=$(date +%s.%N)
    case $sys in
      single) /usr/bin/python3 "$HERE/single.py" --data_dir="$D" ;;
      paramserv) PYTHONPATH="$REPO/python" OMP_NUM_THREADS=1 "$PS" local --ps=1 --workers=2 -- \
                   /usr/bin/python3 "$REPO/examples/torch/mnist_cnn.py" --data_dir="$D" ;;
      ddp) OMP_NUM_THREADS=1 /usr/bin/python3 "$HERE/ddp.py" --data_dir="$D" ;;
    esac > "$OUT/$sys-$r.txt" 2>&1
    rc=$?; t1=$(date +%s.%N)
    echo "round $r $sys: exit $rc, $(echo "$t1 - $t0" | bc) s, load $(cut -d' ' -f1 /proc/loadavg), $(grep -o 'Accuracy: [0-9/]* ([0-9.]*%)' "$OUT/$sys-$r.txt" | tail -1)"
  done
done
echo "outputs in $OUT"
