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
#     shard's pages dropped from the page cache first) and trained STEPS
#     more steps, with no checkpoint (the ps, with --checkpoint_dir, and
#     the workers, without, started as three `paramserv train`). Each
#     run's line: load average before, examples/s (the result file's;
#     deep_ctr: the ps's global steps while both workers train), the ratio
#     to the run all in memory, the ps's peak RSS (VmHWM, polled; all,
#     anonymous, and after the restore) against budget + 25%, the tier's
#     hit rate, rows moved from disk an example, bytes on disk a row
#     against the raw row (key, values, Adagrad state), and the restore's
#     time from the ps's log.
#
# A second run with the same OUT_DIR reuses the build (e.g. BUDGETS=mem
# with other STEPS).
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
# 0.5 s into NAME.hwm, NAME.anon and NAME.metrics, and its RSS over time
# into NAME.rss (seconds, VmRSS and RssAnon in KiB).
run() {
  local name=$1 steps=$2 ck=$3; shift 3
  local log=$OUT/$name.log job pid="" port="" hwm=0 anon=0 h a r w0 w1
  : >"$log"
  if [ "$name" = build ]; then
    nice -n "$NICE" "$PS" local --ps=1 --workers=2 "${args[@]}" --train_steps="$steps" \
      --checkpoint_dir="$ck" --save_steps=1000000 --result_file="$OUT/$name.json" "$@" >"$log" 2>&1 &
    job=$!
  else
    # The ps restores from CKPT_DIR; the workers have none, so the chief
    # saves no checkpoint (a resumed chief saves at its first step, and a
    # tiered table's cut takes minutes: see docs/TIERS.md).
    local ports cluster
    ports=($(/usr/bin/python3 -c 'import socket
ss = [socket.socket() for _ in range(3)]
for s in ss: s.bind(("127.0.0.1", 0))
print(" ".join(str(s.getsockname()[1]) for s in ss))'))
    cluster=(--ps_hosts=127.0.0.1:${ports[0]} --worker_hosts=127.0.0.1:${ports[1]},127.0.0.1:${ports[2]}
      "${args[@]}" --train_steps="$steps" --startup_timeout=30m --metrics_addr=127.0.0.1:0)
    nice -n "$NICE" "$PS" train --job_name=ps --task_index=0 "${cluster[@]}" --checkpoint_dir="$ck" "$@" \
      > >(sed -u 's/^/[ps0] /' >>"$log") 2>&1 &
    job=$!
    nice -n "$NICE" "$PS" train --job_name=worker --task_index=0 "${cluster[@]}" --result_file="$OUT/$name.json" \
      > >(sed -u 's/^/[worker0] /' >>"$log") 2>&1 &
    w0=$!
    nice -n "$NICE" "$PS" train --job_name=worker --task_index=1 "${cluster[@]}" \
      > >(sed -u 's/^/[worker1] /' >>"$log") 2>&1 &
    w1=$!
  fi
  while kill -0 "$job" 2>/dev/null; do
    if [ -z "$pid" ]; then
      if [ "$name" = build ]; then pid=$(pgrep -P "$job" -f 'job_name=ps' | head -1 || true); else pid=$job; fi
    fi
    [ -n "$port" ] || port=$(sed -n 's/^\[ps0\].*metrics: http:\/\/127.0.0.1:\([0-9]*\)\/metrics.*/\1/p' "$log" | head -1)
    if [ -n "$pid" ]; then
      read -r h a r < <(awk '/^VmHWM/ {h = $2} /^RssAnon/ {a = $2} /^VmRSS/ {r = $2} END {print h + 0, a + 0, r + 0}' "/proc/$pid/status" 2>/dev/null || echo 0 0 0)
      echo "$(date +%s.%N) $r $a" >>"$OUT/$name.rss"
      [ "$h" -gt "$hwm" ] && hwm=$h && echo "$hwm" >"$OUT/$name.hwm"
      [ "$a" -gt "$anon" ] && anon=$a && echo "$anon" >"$OUT/$name.anon"
    fi
    if [ -n "$port" ] && [ "$name" != build ]; then
      curl -s -m 2 "http://127.0.0.1:$port/metrics" 2>/dev/null | grep '^paramserv_table_tier_\|^paramserv_ps_global_step ' >"$OUT/$name.m.tmp" &&
        [ -s "$OUT/$name.m.tmp" ] && mv "$OUT/$name.m.tmp" "$OUT/$name.metrics" &&
        echo "$(date +%s.%N) $(awk '$1 == "paramserv_ps_global_step" {printf "%d", $2}' "$OUT/$name.metrics")" >>"$OUT/$name.steps"
    fi
    sleep 0.5
  done
  local ok=0
  wait "$job" || ok=1
  [ "$name" = build ] || { wait "$w0" || ok=1; wait "$w1" || ok=1; }
  [ "$ok" = 0 ] || { echo "$name: the job failed; see $log" >&2; tail -5 "$log" >&2; exit 1; }
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
  rm -rf "$OUT/$name.ck" "$OUT/$name.tables" "$OUT/$name.rss" "$OUT/$name.steps"
  mkdir -p "$OUT/$name.ck"
  cp -al "$ck" "$OUT/$name.ck/"
  dd if="$shard" of=/dev/null bs=4M iflag=nocache count=0 2>/dev/null || true
  load=$(cut -d' ' -f1-3 /proc/loadavg)
  run "$name" $((BUILD_STEPS + STEPS)) "$OUT/$name.ck" "${flags[@]}"
  rate=$(get "$OUT/$name.json" examples_per_s)
  if [ "$MODEL" = deep_ctr ]; then
    # deep_ctr's workers load their whole part first, one sooner than the
    # other: the rate is the ps's global steps while both train.
    rate=$(/usr/bin/python3 - "$OUT/$name.log" "$OUT/$name.steps" "$BATCH" <<'PY'
import datetime, sys
def when(l):
    return datetime.datetime.strptime(" ".join(l.split()[1:3]), "%Y/%m/%d %H:%M:%S.%f").timestamp()
t0 = 0
for l in open(sys.argv[1]):
    if "training rows of" in l or (l.startswith("[ps0]") and "serving on" in l):
        t0 = max(t0, when(l))
steps = [tuple(map(float, l.split())) for l in open(sys.argv[2]) if len(l.split()) == 2]
after = [(t, s) for t, s in steps if t >= t0]
last = max(s for t, s in after)
end = min(t for t, s in after if s == last)
# 0 where one worker ran every step before the other began: more STEPS.
print(round(int(sys.argv[3]) * (last - after[0][1]) / (end - after[0][0]), 1) if end > after[0][0] else 0)
PY
)
  fi
  [ "$b" = mem ] && memrate=$rate
  hwm=$(cat "$OUT/$name.hwm")
  line="$name: load $load; examples/s $rate"
  [ -n "$memrate" ] && [ "$memrate" != 0 ] && line+=" ($(/usr/bin/python3 -c "print(round($rate / $memrate, 3))")x in memory)"
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
  echo "$name: ps peak RSS until it served (the restore) $(/usr/bin/python3 - "$OUT/$name.log" "$OUT/$name.rss" <<'PY'
import datetime, sys
served = None
for l in open(sys.argv[1]):
    if l.startswith("[ps0]") and "serving on" in l:
        served = datetime.datetime.strptime(" ".join(l.split()[1:3]), "%Y/%m/%d %H:%M:%S.%f").timestamp()
        break
rss = [tuple(map(float, l.split())) for l in open(sys.argv[2]) if len(l.split()) == 3]
before = [r for t, r, a in rss if served is None or t <= served + 1]
after = [(r, a) for t, r, a in rss if served is not None and t > served + 1]
print(f"{max(before) / 1024:.0f} MiB" if before else "-", end="")
if after:
    print(f"; training: {max(r for r, a in after) / 1024:.0f} MiB (anonymous {max(a for r, a in after) / 1024:.0f} MiB)", end="")
print()
PY
)"
  [ "${KEEP:-0}" = 1 ] || rm -rf "$OUT/$name.ck" "$OUT/$name.tables"
done
echo "done; $(uptime)"
