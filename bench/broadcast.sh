#!/usr/bin/env bash
# bench/broadcast.sh - one stream to 3 receivers, `make bench-broadcast`: rdmasend --to (a
# pipelined chain) against one receiver alone and against 3 rdmasend in parallel, one
# receiver each, in the same run on the same machine. Prints a markdown table: MB/s per
# receiver (stream bytes over the wall time until every process exited), median of RUNS.
# Then a long chain (the figures test/e2e's TestChain16 used to log): HOSTS receivers
# with small windows (--chunk-size 256K --depth 4, so that many fit in memory), an empty
# stream, whose time is the chain's set-up and confirmation, and CHAIN_SIZE bytes, each
# through one host and through HOSTS; a second table: set-up per host after the first,
# and MB/s per host against one hop.
#
# env: BENCH_BIN (dir with rdmasend/rdmarecv, default bin), TRANSPORT (tcp; rdma in the VM),
#      ADDR (127.0.0.1; the VM's $RXE_IP), SIZE (bytes, default 256M), RUNS (default 3),
#      PORT (first of the ports, default 28900), SCRATCH (tmpfs dir for the input, /dev/shm),
#      HOSTS (the long chain's length, default 16), CHAIN_SIZE (its stream, default 64M,
#      8M over rdma: the VM's emulated devices are slow; 0 skips the long chain)
# Every receiver of a machine shares its CPUs: see bench/README.md for what that means.
set -euo pipefail
BIN=${BENCH_BIN:-bin} TRANSPORT=${TRANSPORT:-tcp} ADDR=${ADDR:-127.0.0.1}
SIZE=${SIZE:-256M} RUNS=${RUNS:-3} PORT=${PORT:-28900} HOSTS=${HOSTS:-16}
CHAIN_SIZE=${CHAIN_SIZE:-$([ "$TRANSPORT" = rdma ] && echo 8M || echo 64M)}
[[ $HOSTS =~ ^[0-9]+$ ]] && [ "$HOSTS" -ge 2 ] || { echo "broadcast: HOSTS must be 2 or more" >&2; exit 2; }
DIR=$(mktemp -d "${SCRATCH:-/dev/shm}/rdmapipe-broadcast.XXXXXX")
cleanup() { kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$DIR"; }
trap cleanup EXIT
head -c "$SIZE" /dev/zero > "$DIR/src"
BYTES=$(stat -c %s "$DIR/src")

# receivers N [FLAG...]: starts N rdmarecv on PORT.. and waits until each listens
receivers() {
  local i n=$1
  shift
  for ((i = 0; i < n; i++)); do
    : > "$DIR/r$i.err"
    "$BIN/rdmarecv" -v --transport "$TRANSPORT" --bind "$ADDR" --port $((PORT + i)) \
      --stats-json "$DIR/r$i.json" "$@" > /dev/null 2> "$DIR/r$i.err" &
  done
  for ((i = 0; i < n; i++)); do
    until grep -q "listening on" "$DIR/r$i.err"; do
      kill -0 %$((i + 1)) 2>/dev/null || { cat "$DIR/r$i.err" >&2; return 1; }
      sleep 0.05
    done
  done
}

# one MODE: runs MODE once and prints its MB/s per receiver, or fails
one() {
  local mode=$1 t0 t1 i n=3 status=0 relay=()
  [ "$mode" = single ] && n=1
  [ "$mode" = chain ] && relay=(--relay-allow "$ADDR")
  receivers "$n" "${relay[@]}"
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
  [ "$status" = 0 ] || kill $(jobs -p) 2>/dev/null || true # receivers left waiting
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

# chain N FILE: streams FILE through a chain of N receivers with small windows and prints
# the seconds until every process exited, or fails
chain() {
  local n=$1 file=$2 to="" i t0 t1 status=0 bytes
  bytes=$(stat -c %s "$file")
  receivers "$n" --relay-allow "$ADDR" --chunk-size 256K --depth 4
  for ((i = 0; i < n; i++)); do to+="${to:+,}$ADDR:$((PORT + i))"; done
  t0=$(date +%s.%N)
  "$BIN/rdmasend" --transport "$TRANSPORT" --to "$to" < "$file" || status=$?
  [ "$status" = 0 ] || kill $(jobs -p) 2>/dev/null || true # receivers left waiting
  for ((i = 0; i < n; i++)); do wait %$((i + 1)) || status=$?; done
  t1=$(date +%s.%N)
  for ((i = 0; i < n; i++)); do
    grep -q "\"bytes\": $bytes," "$DIR/r$i.json" || { echo "chain of $n, receiver $i: not all bytes" >&2; status=1; }
  done
  [ "$status" = 0 ] || { echo "chain of $n failed ($status)" >&2; return 1; }
  awk -v a="$t0" -v z="$t1" 'BEGIN { printf "%.4f\n", z - a }'
}

[ "$CHAIN_SIZE" = 0 ] && exit 0
head -c "$CHAIN_SIZE" /dev/zero > "$DIR/chain-src"
: > "$DIR/empty"
CHAIN_BYTES=$(stat -c %s "$DIR/chain-src")
declare -A secs
for run in empty-1 empty-n data-1 data-n; do
  n=1 file=$DIR/empty
  case $run in *-n) n=$HOSTS ;; esac
  case $run in data-*) file=$DIR/chain-src ;; esac
  for ((r = 0; r < RUNS; r++)); do chain "$n" "$file"; done > "$DIR/$run.secs"
  secs[$run]=$(median < "$DIR/$run.secs")
  echo "broadcast: chain $run: $(tr '\n' ' ' < "$DIR/$run.secs")s" >&2
done
echo
awk -v t="$TRANSPORT" -v a="$ADDR" -v n="$HOSTS" -v b="$CHAIN_BYTES" -v r="$RUNS" \
  -v e1="${secs[empty-1]}" -v en="${secs[empty-n]}" -v d1="${secs[data-1]}" -v dn="${secs[data-n]}" 'BEGIN {
  printf "| chain, %s on %s, chunk 256 KiB x 4, median of %d | one host | %d hosts |\n", t, a, r, n
  print "| --- | ---: | ---: |"
  printf "| empty stream: set-up and confirmation, ms | %.1f | %.1f |\n", e1 * 1000, en * 1000
  printf "| set-up per host after the first, ms | | %.2f |\n", (en - e1) * 1000 / (n - 1)
  printf "| %d bytes: MB/s per host | %.1f | %.1f |\n", b, b / 1e6 / d1, b / 1e6 / dn
  printf "| per host / one hop | 1.00 | %.2f |\n", d1 / dn
  printf "| bytes delivered per second / one hop | 1.00 | %.2f |\n", n * d1 / dn
}'
