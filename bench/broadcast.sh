#!/usr/bin/env bash
# bench/broadcast.sh - one stream to 3 receivers, `make bench-broadcast`: rdmasend --to (a
# pipelined chain) against one receiver alone and against 3 rdmasend in parallel, one
# receiver each, in the same run on the same machine. Prints a markdown table: MB/s per
# receiver (stream bytes over the wall time until every process exited), median of RUNS.
#
# env: BENCH_BIN (dir with rdmasend/rdmarecv, default bin), TRANSPORT (tcp; rdma in the VM),
#      ADDR (127.0.0.1; the VM's $RXE_IP), SIZE (bytes, default 256M), RUNS (default 3),
#      PORT (first of 3 ports, default 28900), SCRATCH (tmpfs dir for the input, /dev/shm)
# Every receiver of a machine shares its CPUs: see bench/README.md for what that means.
set -euo pipefail
BIN=${BENCH_BIN:-bin} TRANSPORT=${TRANSPORT:-tcp} ADDR=${ADDR:-127.0.0.1}
SIZE=${SIZE:-256M} RUNS=${RUNS:-3} PORT=${PORT:-28900}
DIR=$(mktemp -d "${SCRATCH:-/dev/shm}/rdmapipe-broadcast.XXXXXX")
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
head -c "$SIZE" /dev/zero > "$DIR/src"
BYTES=$(stat -c %s "$DIR/src")

# receivers N: starts N rdmarecv on PORT.. and waits until each listens
receivers() {
  local i
  for ((i = 0; i < $1; i++)); do
    : > "$DIR/r$i.err"
    "$BIN/rdmarecv" -v --transport "$TRANSPORT" --bind "$ADDR" --port $((PORT + i)) \
      --stats-json "$DIR/r$i.json" > /dev/null 2> "$DIR/r$i.err" &
  done
  for ((i = 0; i < $1; i++)); do
    until grep -q "listening on" "$DIR/r$i.err"; do
      kill -0 %$((i + 1)) 2>/dev/null || { cat "$DIR/r$i.err" >&2; return 1; }
      sleep 0.05
    done
  done
}

# one MODE: runs MODE once and prints its MB/s per receiver, or fails
one() {
  local mode=$1 t0 t1 i n=3 status=0
  [ "$mode" = single ] && n=1
  receivers "$n"
  t0=$(date +%s.%N)
  case $mode in
    single) "$BIN/rdmasend" --transport "$TRANSPORT" --port "$PORT" "$ADDR" < "$DIR/src" || status=$? ;;
    chain)  "$BIN/rdmasend" --transport "$TRANSPORT" \
              --to "$ADDR:$PORT,$ADDR:$((PORT + 1)),$ADDR:$((PORT + 2))" < "$DIR/src" || status=$? ;;
    parallel)
      for ((i = 0; i < 3; i++)); do
        "$BIN/rdmasend" --transport "$TRANSPORT" --port $((PORT + i)) "$ADDR" < "$DIR/src" &
      done
      for ((i = 0; i < 3; i++)); do wait %$((n + 1 + i)) || status=$?; done ;;
  esac
  for ((i = 0; i < n; i++)); do wait %$((i + 1)) || status=$?; done
  t1=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do
    grep -q "\"bytes\": $BYTES," "$DIR/r$i.json" || { echo "receiver $i: not all bytes" >&2; status=1; }
  done
  [ "$status" = 0 ] || { echo "$mode failed ($status)" >&2; return 1; }
  awk -v b="$BYTES" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f\n", b / 1e6 / (z - a) }'
}

median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

declare -A rate
for mode in single chain parallel; do
  for ((r = 0; r < RUNS; r++)); do one "$mode"; done > "$DIR/$mode.rates"
  rate[$mode]=$(median < "$DIR/$mode.rates")
  echo "broadcast: $mode: $(tr '\n' ' ' < "$DIR/$mode.rates")MB/s" >&2
done
echo "| $TRANSPORT on $ADDR, $BYTES bytes, median of $RUNS | MB/s per receiver | chain / this |"
echo "| --- | ---: | ---: |"
echo "| one rdmasend -> one rdmarecv | ${rate[single]} | $(awk -v a="${rate[chain]}" -v b="${rate[single]}" 'BEGIN { printf "%.2f", a / b }') |"
echo "| **rdmasend --to** 3 rdmarecv (chain) | ${rate[chain]} | 1.00 |"
echo "| 3 rdmasend in parallel, 1 rdmarecv each | ${rate[parallel]} | $(awk -v a="${rate[chain]}" -v b="${rate[parallel]}" 'BEGIN { printf "%.2f", a / b }') |"
