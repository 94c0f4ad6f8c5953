#!/bin/bash
# The disk tier at scale (issue 29's measurements, docs/TIERS.md "At
# scale"): one model on synth-ctr data, 1 ps and 2 workers, Adagrad.
#
#  1. build: the job all in memory to BUILD_STEPS, which grows the table
#     to its full size and saves it (the checkpoint save of the big table);
#     the shard file is then written with `dd conv=fsync` and read with
#     `dd iflag=direct` (the disk's own speed for the same bytes).
#  2. for each budget in BUDGETS (mem: no --table_memory; 10: a tenth of
#     the table's bytes as the tier counts them; 100: a hundredth): the
#     same job restored from that checkpoint (a hard-linked copy, the
#     shard's pages dropped from the page cache first), trained STEPS
#     more steps and saved again. Each run's line: load average before,
#     examples/s (the result file's), the ratio to the run all in memory,
#     the ps's peak RSS (VmHWM, polled) against budget + 25%, the tier's
#     hit rate, rows and bytes on disk a row, against the raw row (key,
#     values, Adagrad state), and the restore's and the final save's times
#     from the ps's log.
#
#   go build -o /tmp/paramserv ./cmd/paramserv
#   /tmp/paramserv data synth-ctr --rows=6000000 --shards=2 --zipf_s=0.5 --out=/tmp/ctr6m
#   PS=/tmp/paramserv MODEL=sparse_lr scripts/bench/tier_scale.sh /tmp/ctr6m /tmp/tier_sparse
#
# Env: MODEL (sparse_lr | deep_ctr), BUILD_STEPS (default 6000), STEPS
# (default 300), BATCH (default 1000), BUDGETS (default "mem 10 100"),
# NICE (default 10), KEEP=1 keeps the checkpoints and stores.
set -eu
DATA=${1:?usage: tier_scale.sh DATA_DIR OUT_DIR}
OUT=${2:?usage: tier_scale.sh DATA_DIR OUT_DIR}
PS=${PS:?set PS to a paramserv binary}
MODEL=${MODEL:-sparse_lr}
BUILD_STEPS=${BUILD_STEPS:-6000}
STEPS=${STEPS:-300}
BATCH=${BATCH:-1000}
BUDGETS=${BUDGETS:-mem 10 100}
NICE=${NICE:-10}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

case $MODEL in
sparse_lr)
  args=(--model=sparse_lr --input_format=criteo --fields=0,26 --shuffle_buffer=100000)
  dim=1 ;;                                   # one weight a key
deep_ctr)
  args=(--model=deep_ctr --dim=8 --min_count=0 --evict_after_steps=0)
  dim=9 ;;                                   # the wide weight and 8 embedding floats
*) echo "MODEL=$MODEL: want sparse_lr or deep_ctr" >&2; exit 2 ;;
esac
args+=(--optimizer=adagrad --train_data="$DATA" --test_data="$DATA/test.tsv" --batch_size="$BATCH")
raw=$((8 + 4 * dim * 2))                     # key, values, Adagrad's accumulators
tierrow=$((8 + 4 * dim * 2 + 14))            # tier.Table.RowBytes: the row as the budget counts it

# run NAME STEPS CKPT_DIR [FLAGS...]: the job, polling the ps's VmHWM and
# its largest anonymous RSS (RssAnon: VmHWM also counts the pages of the
# checkpoint file a restore maps) and (with a tier) its /metrics every
# 0.5 s into NAME.hwm, NAME.anon and NAME.metrics.
run() {
  local name=$1 steps=$2 ck=$3; shift 3
  local log=$OUT/$name.log
  nice -n "$NICE" "$PS" local --ps=1 --workers=2 "${args[@]}" --train_steps="$steps" \
    --checkpoint_dir="$ck" --save_steps=1000000 --result_file="$OUT/$name.json" "$@" >"$log" 2>&1 &
  local job=$! pid="" port="" hwm=0 anon=0 h a
  while kill -0 "$job" 2>/dev/null; do
    [ -n "$pid" ] || pid=$(pgrep -P "$job" -f 'job_name=ps' | head -1 || true)
    [ -n "$port" ] || port=$(sed -n 's/^\[ps0\].*metrics: http:\/\/127.0.0.1:\([0-9]*\)\/metrics.*/\1/p' "$log" | head -1)
    if [ -n "$pid" ]; then
      read -r h a < <(awk '/^VmHWM/ {h = $2} /^RssAnon/ {a = $2} END {print h + 0, a + 0}' "/proc/$pid/status" 2>/dev/null || echo 0 0)
      [ "$h" -gt "$hwm" ] && hwm=$h && echo "$hwm" >"$OUT/$name.hwm"
      [ "$a" -gt "$anon" ] && anon=$a && echo "$anon" >"$OUT/$name.anon"
    fi
    if [ -n "$port" ] && [ "$name" != build ] && [ "$name" != mem ]; then
      curl -s -m 2 "http://127.0.0.1:$port/metrics" 2>/dev/null | grep '^paramserv_table_tier_' >"$OUT/$name.m.tmp" &&
        [ -s "$OUT/$name.m.tmp" ] && mv "$OUT/$name.m.tmp" "$OUT/$name.metrics"
    fi
    sleep 0.5
  done
  wait "$job" || { echo "$name: the job failed; see $log" >&2; tail -5 "$log" >&2; exit 1; }
}
get() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
metric() { awk -v m="paramserv_table_tier_$2" '$1 == m {printf "%d", $2}' "$1"; }

echo "model $MODEL, build $BUILD_STEPS steps, then $STEPS steps a run, batches of $BATCH; $(uptime)"
if [ ! -d "$OUT/build" ]; then
  run build "$BUILD_STEPS" "$OUT/build"
fi
ck=$(ls -d "$OUT"/build/ckpt-* | sort -t- -k2 -n | tail -1)
shard=$(ls "$ck"/shard-*.safetensors)
bytes=$(stat -c %s "$shard")
rows=$("$PS" ckpt inspect "$ck" | awk '$2 ~ /\/keys$/ {sub("count=", "", $5); s += $5} END {print s}')
table=$((rows * tierrow))
echo "build: $(grep -o 'ps exited .*\|all .* exited .*' "$OUT/build.log" | tail -1)"
echo "build: $rows rows ($table bytes as the tier counts them, raw row $raw bytes, tier row $tierrow), checkpoint $bytes bytes; ps peak RSS $(cat "$OUT/build.hwm") KiB"
echo "build: $(grep -o 'checkpoint: wrote .*' "$OUT/build.log" | tail -1)"
echo "build: examples/s $(get "$OUT/build.json" examples_per_s)"

# The disk's own speed for the checkpoint's bytes: written and fsync'd, read
# past the page cache.
dd if="$shard" of=/dev/null bs=4M iflag=nocache count=0 2>/dev/null || true
echo "dd write (conv=fsync): $(dd if="$shard" of="$OUT/dd.bin" bs=4M conv=fsync 2>&1 | tail -1)"
echo "dd read (iflag=direct): $(dd if="$OUT/dd.bin" of=/dev/null bs=4M iflag=direct 2>&1 | tail -1)"
rm -f "$OUT/dd.bin"

memrate=""
for b in $BUDGETS; do
  name=$b flags=() budget=0
  if [ "$b" != mem ]; then
    name=b$b budget=$((table / b))
    flags=(--table_memory="$budget" --table_dir="$OUT/$name.tables")
  fi
  rm -rf "$OUT/$name.ck" "$OUT/$name.tables"
  mkdir -p "$OUT/$name.ck"
  cp -al "$ck" "$OUT/$name.ck/"
  dd if="$shard" of=/dev/null bs=4M iflag=nocache count=0 2>/dev/null || true
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  run "$name" $((BUILD_STEPS + STEPS)) "$OUT/$name.ck" "${flags[@]}"
  rate=$(get "$OUT/$name.json" examples_per_s)
  [ "$b" = mem ] && memrate=$rate
  hwm=$(cat "$OUT/$name.hwm")
  line="$name: load $load; examples/s $rate"
  [ -n "$memrate" ] && line+=" ($(/usr/bin/python3 -c "print(round($rate / $memrate, 3))")x in memory)"
  line+="; ps peak RSS $((hwm / 1024)) MiB (anonymous $(($(cat "$OUT/$name.anon") / 1024)) MiB)"
  if [ "$b" != mem ]; then
    m=$OUT/$name.metrics
    lookups=$(metric "$m" lookups_total) hits=$(metric "$m" hits_total)
    drows=$(metric "$m" disk_rows) dbytes=$(metric "$m" disk_bytes)
    line+=" against budget + 25% $((budget * 5 / 4 / 1048576)) MiB (budget $budget bytes)"
    line+="; hit rate $(/usr/bin/python3 -c "print(round($hits / max($lookups, 1), 3))") ($hits of $lookups)"
    line+="; $drows rows on disk in $dbytes bytes, $(/usr/bin/python3 -c "print(round($dbytes / max($drows, 1), 1))") a row (raw $raw)"
    prom=$(metric "$m" promotions_total)
    line+="; promotions $prom ($(/usr/bin/python3 -c "print(round($prom / ($STEPS * $BATCH), 2))") an example), demotions $(metric "$m" demotions_total)"
  fi
  echo "$line"
  echo "$name: $(grep -o 'restored checkpoint .*' "$OUT/$name.log" | head -1 | cut -c1-300)"
  echo "$name: $(grep -o 'checkpoint: wrote .*' "$OUT/$name.log" | tail -1)"
  [ "${KEEP:-0}" = 1 ] || rm -rf "$OUT/$name.ck" "$OUT/$name.tables"
done
echo "done; $(uptime)"
