#!/bin/bash
# A tiered table's checkpoint save on a real job (issue 29): `paramserv
# local` with 1 ps and 2 workers, sparse_lr and Adagrad on synth-ctr data,
# the table's memory budget TABLE_MEMORY, saving every SAVE_STEPS. It
# polls the ps's VmHWM and VmRSS every 0.2 s (NAME.rss: seconds, VmRSS
# KiB), then prints the ps's save lines ("wrote ... in", and the longest
# push stall they report), its peak RSS, the load average, and `dd
# conv=fsync` of the last shard file's bytes (the disk's own write speed).
#
#   go build -o /tmp/paramserv ./cmd/paramserv
#   /tmp/paramserv data synth-ctr --rows=1000000 --shards=2 --zipf_s=0.5 --test_rows=2000 --out=/tmp/ctr1m
#   PS=/tmp/paramserv scripts/bench/tier_save.sh /tmp/ctr1m /tmp/tier_save after
#
# Env: STEPS (default 1000), SAVE_STEPS (default 500), TABLE_MEMORY
# (default 12MB, about a tenth of 3.7M keys' rows), BATCH (default 1000),
# NICE (default 10).
set -eu
DATA=${1:?usage: tier_save.sh DATA_DIR OUT_DIR NAME}
OUT=${2:?usage: tier_save.sh DATA_DIR OUT_DIR NAME}
NAME=${3:?usage: tier_save.sh DATA_DIR OUT_DIR NAME}
PS=${PS:?set PS to a paramserv binary}
STEPS=${STEPS:-1000}
SAVE_STEPS=${SAVE_STEPS:-500}
TABLE_MEMORY=${TABLE_MEMORY:-12MB}
BATCH=${BATCH:-1000}
NICE=${NICE:-10}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
ck=$OUT/$NAME.ck log=$OUT/$NAME.log
rm -rf "$ck" "$OUT/$NAME.tables" "$OUT/$NAME.rss"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
nice -n "$NICE" "$PS" local --ps=1 --workers=2 --model=sparse_lr --optimizer=adagrad --input_format=criteo \
  --fields=0,26 --train_data="$DATA" --test_data="$DATA/test.tsv" --batch_size="$BATCH" --train_steps="$STEPS" --save_steps="$SAVE_STEPS" \
  --checkpoint_dir="$ck" --table_memory="$TABLE_MEMORY" --table_dir="$OUT/$NAME.tables" \
  --result_file="$OUT/$NAME.json" >"$log" 2>&1 &
job=$! pid="" hwm=0
while kill -0 "$job" 2>/dev/null; do
  [ -n "$pid" ] || pid=$(pgrep -P "$job" -f 'job_name=ps' | head -1 || true)
  if [ -n "$pid" ]; then
    read -r h r < <(awk '/^VmHWM/ {h = $2} /^VmRSS/ {r = $2} END {print h + 0, r + 0}' "/proc/$pid/status" 2>/dev/null || echo 0 0)
    [ "$r" -gt 0 ] && echo "$(date +%s.%N) $r" >>"$OUT/$NAME.rss"
    [ "$h" -gt "$hwm" ] && hwm=$h
  fi
  sleep 0.2
done
wait "$job" || { echo "$NAME: the job failed; see $log" >&2; tail -5 "$log" >&2; exit 1; }
echo "$NAME: $PS, load before $load0, after $(cut -d' ' -f1-3 /proc/loadavg)"
echo "$NAME: ps peak RSS (VmHWM) $((hwm / 1024)) MiB; $(grep -o 'all .* exited .*' "$log" | tail -1)"
grep -o 'checkpoint: wrote .*' "$log" | sed "s/^/$NAME: /"
shard=$(ls "$ck"/ckpt-*/shard-*.safetensors | sort -t- -k2 -n | tail -1)
echo "$NAME: dd conv=fsync of $(basename "$(dirname "$shard")")'s $(stat -c %s "$shard") bytes: $(dd if="$shard" of="$OUT/dd.bin" bs=4M conv=fsync 2>&1 | tail -1)"
rm -f "$OUT/dd.bin"
