#!/bin/bash
# A real job's checkpoint save and restore against the disk, in the same
# round: a save job (`paramserv local --ps=1 --workers=1 --model=sparse_lr
# --optimizer=ftrl`, one epoch, a checkpoint every SAVE_STEPS steps), `dd
# conv=fsync` of its final shard file (the disk's fsync'd write of the same
# bytes), a restore job (the same command on the same directory: the ps
# restores the final checkpoint and trains on), and `dd iflag=direct` of the
# same file (the disk's read of it, past the page cache). Each binary given
# runs one round in turn, alternating, ROUNDS times, so that two builds
# compare under the same load.
#
# Each line: binary, round, load average, the shard's bytes, the ps's "wrote
# shard" time (the write after the cut) and its time with the cut, dd's
# fsync'd write, save ratio (dd / write, and dd / write with the cut), the
# ps's "restored checkpoint" time and CPU, dd's direct read, restore ratio
# (dd / restore), and the longest push stall the save logs reported with
# the part of it that waited for the lock (the rest held it). A ratio
# of 1 is the disk's speed; the goal is >= 0.5.
#
#   go build -o /tmp/paramserv ./cmd/paramserv
#   /tmp/paramserv data synth-ctr --rows=2000000 --fields=26 --out=/tmp/ctr2m
#   scripts/bench/ckpt_vs_dd.sh /tmp/ctr2m 3 /tmp/ckpt-bench /tmp/paramserv [/tmp/paramserv.old ...]
#
# SAVE_STEPS (default 1000) and WORKERS (default 1) change the save job;
# with WORKERS=2 a second worker pushes during each save, for the stalls.
set -eu
DATA=${1:?usage: ckpt_vs_dd.sh DATA_DIR ROUNDS OUT_DIR BINARY [BINARY...]}
ROUNDS=${2:?rounds}
OUT=${3:?out dir}
shift 3
[ $# -ge 1 ] || { echo "ckpt_vs_dd.sh: name at least one paramserv binary" >&2; exit 2; }
SAVE_STEPS=${SAVE_STEPS:-1000}
WORKERS=${WORKERS:-1}
mkdir -p "$OUT"
ms() { # a Go duration (1.2s, 143ms, 850µs) in milliseconds
  /usr/bin/python3 -c '
import re, sys
v = sys.argv[1]
m = re.fullmatch(r"([0-9.]+)(ms|s|µs|us)", v)
if not m: print("nan"); sys.exit()
x = float(m.group(1)); u = m.group(2)
print(round(x * {"s": 1000, "ms": 1, "µs": 1e-3, "us": 1e-3}[u], 2))' "$1"
}
ratio() { /usr/bin/python3 -c 'import sys; a, b = map(float, sys.argv[1:]); print(round(a / b, 2) if b > 0 else "nan")' "$1" "$2"; }
dd_ms() { # dd's own time of its last line, in ms
  awk -F', ' '/copied/ {split($3, a, " "); print a[1] * 1000}'
}
for r in $(seq 1 "$ROUNDS"); do
  b=0
  for BIN in "$@"; do
    b=$((b + 1))
    CK=$OUT/ck-$b
    rm -rf "$CK"
    flags=(--ps=1 --workers="$WORKERS" --model=sparse_lr --optimizer=ftrl --input_format=criteo --fields=0,26
      --batch_size=1000 --save_steps="$SAVE_STEPS" --epochs=1 --seed=1 --train_data="$DATA"
      --test_data="$DATA/test.tsv" --checkpoint_dir="$CK")
    load=$(cut -d' ' -f1 /proc/loadavg)
    "$BIN" local "${flags[@]}" >"$OUT/save-$b-$r.log" 2>&1
    last=$(ls -d "$CK"/ckpt-* | awk -F"ckpt-" '{print $NF, $0}' | sort -n | tail -1 | cut -d" " -f2)
    F=$last/shard-0-of-1.safetensors
    line=$(grep "wrote shard" "$OUT/save-$b-$r.log" | tail -1)
    w=$(ms "$(sed -E 's/.* bytes[^)]*\) in ([^;]+);.*/\1/' <<<"$line")")
    wc=$(ms "$(sed -E 's/.*; with the cut ([^ ]+) .*/\1/' <<<"$line")")
    # The longest push during a save, and how much of it waited for the lock.
    stall=$(grep "wrote shard" "$OUT/save-$b-$r.log" | sed -nE 's/.*meanwhile, the longest ([0-9.]+[µum]?s)( \(([0-9.]+[µum]?s) of it waiting)?.*/\1 \3/p' |
      while read -r s w; do echo "$(ms "$s") $(ms "${w:-none}")"; done | sort -g | tail -1)
    stall_wait=${stall#* }
    stall=${stall%% *}
    sync
    # dd's input from the page cache, whichever way the save wrote it (a
    # save past the page cache leaves it there only after this read), so
    # that dd times its write alone.
    cat "$F" >/dev/null
    ddw=$(dd if="$F" of="$OUT/dd.out" bs=4M conv=fsync 2>&1 | dd_ms)
    rm -f "$OUT/dd.out"
    "$BIN" local "${flags[@]}" >"$OUT/restore-$b-$r.log" 2>&1
    rl=$(grep "restored checkpoint" "$OUT/restore-$b-$r.log" | head -1)
    rt=$(ms "$(sed -E 's/.* in ([^ ]+) \(the process.s CPU.*/\1/' <<<"$rl")")
    rc=$(ms "$(sed -E 's/.*the process.s CPU ([^)]+)\).*/\1/' <<<"$rl")")
    ddr=$(dd if="$F" of=/dev/null bs=4M iflag=direct 2>&1 | dd_ms)
    echo "bin$b round $r load $load bytes $(stat -c %s "$F") write_ms $w with_cut_ms $wc dd_fsync_ms $ddw" \
      "save_ratio $(ratio "$ddw" "$w") with_cut_ratio $(ratio "$ddw" "$wc")" \
      "restore_ms $rt restore_cpu_ms $rc dd_direct_ms $ddr restore_ratio $(ratio "$ddr" "$rt") stall_ms ${stall:-none} stall_wait_ms ${stall_wait:-none}"
  done
done | tee "$OUT/rounds.txt"
