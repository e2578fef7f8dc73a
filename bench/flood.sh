#!/usr/bin/env bash
# bench/flood.sh - what a pre-auth connect flood costs the real sender (`make bench-flood`;
# also a host-only section of `make bench`), issue 30's case over TCP on loopback: a
# keyed `rdmarecv -k --key-file` while FLOOD connections (default 1000) arrive evenly over
# OVER (default 15s) from 127.0.0.1, each sending a valid proposal and then nothing
# (MODE=proposal; silent: nothing at all; mixed: every other one), and a keyed sender
# with --wait WAIT (default 20s) sends FLOOD_SIZE (default 256M) of zeros, starting once
# a third of the flood is open (the receiver's pending handshakes are full by then).
# Each of RUNS rounds (default 10) runs the same stream once without the flood and once
# under it, each against a receiver of its own. A run is exact when the sender exits 0
# and the receiver wrote FLOOD_SIZE bytes. Prints a markdown section on stdout: runs exact
# out of RUNS, the sender's median and worst time with and without the flood, and their
# ratio against the target (10 of 10 exact, within 2x); progress goes to stderr, and the
# raw figures to $FLOOD_TSV if set. While the flood is open, the receiver's peak RSS is
# read from /proc (VmHWM) too.
#
# env: RUNS, FLOOD, OVER, MODE, WAIT, FLOOD_SIZE (K/M/G are binary), FLOOD_TSV;
#   BENCH_BIN  where rdmasend and rdmarecv are (default bin/, after `make build`)
#   GO         the go command that builds bench/flood (default go)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh   # free_port, to_bytes

RUNS=${RUNS:-10}
FLOOD=${FLOOD:-1000}
OVER=${OVER:-15s}
MODE=${MODE:-proposal}
WAIT=${WAIT:-20s}
FLOOD_SIZE=${FLOOD_SIZE:-256M}
BENCH_BIN=${BENCH_BIN:-bin}
GO=${GO:-go}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "flood: RUNS must be a positive number" >&2; exit 2; }
BYTES=$(to_bytes "$FLOOD_SIZE")
for f in "$BENCH_BIN/rdmasend" "$BENCH_BIN/rdmarecv"; do
  [ -x "$f" ] || { echo "flood: $f missing: run make build" >&2; exit 1; }
done

tmp=$(mktemp -d /tmp/rdmapipe-flood.XXXXXX)
out=$(mktemp -d /dev/shm/rdmapipe-flood.XXXXXX)   # the receiver's output, FLOOD_SIZE at a time
pids=()
# shellcheck disable=SC2317  # called through the trap
cleanup() {
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  rm -rf "$tmp" "$out"
}
trap cleanup EXIT
"$GO" build -o "$tmp/flood" ./bench/flood
ulimit -n 8192
head -c 32 /dev/urandom | base64 > "$tmp/key"
chmod 600 "$tmp/key"
raw=$tmp/raw.tsv
: > "$raw"

# wait_line FILE TEXT SECONDS: until FILE holds TEXT, at most SECONDS
wait_line() {
  local i
  for ((i = 0; i < $3 * 20; i++)); do
    if grep -q "$2" "$1" 2> /dev/null; then return 0; fi
    sleep 0.05
  done
  return 1
}

# one KIND RUN: one stream, KIND none or flood; appends "KIND RUN EXACT SECONDS RSS_KB" to $raw
one() {
  local kind=$1 run=$2 port rpid fpid='' t0 t1 rc=0 got rss=-
  port=$(free_port)
  "$BENCH_BIN/rdmarecv" --transport tcp -k -v --key-file "$tmp/key" --bind 127.0.0.1 --port "$port" \
    > "$out/out" 2> "$tmp/recv.log" &
  rpid=$!
  pids+=("$rpid")
  if ! wait_line "$tmp/recv.log" "listening on" 10; then
    echo "flood: the receiver never listened: $(tail -n 3 "$tmp/recv.log")" >&2
    kill "$rpid" 2> /dev/null || true
    printf '%s\t%s\t0\t-\t-\n' "$kind" "$run" >> "$raw"
    return 0
  fi
  if [ "$kind" = flood ]; then
    rm -f "$tmp/hold"
    mkfifo "$tmp/hold"   # the flood holds its connections until its stdin closes
    "$tmp/flood" -addr "127.0.0.1:$port" -n "$FLOOD" -over "$OVER" -mode "$MODE" -mark $((FLOOD / 3)) \
      < "$tmp/hold" > "$tmp/flood.log" &
    fpid=$!
    pids+=("$fpid")
    exec 9> "$tmp/hold"
    wait_line "$tmp/flood.log" "open" 120 || echo "flood: the flood never reached its mark" >&2
  fi
  t0=$(date +%s.%N)
  head -c "$BYTES" /dev/zero |
    "$BENCH_BIN/rdmasend" --transport tcp --key-file "$tmp/key" --wait "$WAIT" --port "$port" 127.0.0.1 \
      2> "$tmp/send.log" || rc=$?
  t1=$(date +%s.%N)
  if [ -n "$fpid" ]; then
    rss=$(awk '/VmHWM/ {print $2}' "/proc/$rpid/status" 2> /dev/null || echo -)
    exec 9>&-
    kill "$fpid" 2> /dev/null || true
    wait "$fpid" 2> /dev/null || true
  fi
  kill "$rpid" 2> /dev/null || true
  wait "$rpid" 2> /dev/null || true
  got=$(stat -c %s "$out/out")
  rm -f "$out/out"
  local exact=0 secs
  secs=$(echo "$t1 - $t0" | bc)
  if [ "$rc" = 0 ] && [ "$got" = "$BYTES" ]; then exact=1; fi
  printf '%s\t%s\t%s\t%s\t%s\n' "$kind" "$run" "$exact" "$secs" "$rss" >> "$raw"
  if [ "$exact" = 1 ]; then
    echo "flood: run $run, $kind: exact, $secs s" >&2
  else
    echo "flood: run $run, $kind: NOT exact (sender exit $rc, $got of $BYTES bytes written), $secs s: $(tail -n 2 "$tmp/send.log" | tr '\n' ' ')" >&2
  fi
}

echo "flood: $RUNS rounds: $FLOOD_SIZE keyed, without and under $FLOOD $MODE connections over $OVER" >&2
for ((i = 1; i <= RUNS; i++)); do
  one none "$i"
  one flood "$i"
done
if [ -n "${FLOOD_TSV:-}" ]; then cp "$raw" "$FLOOD_TSV"; fi

# the report: medians and worst times of the exact runs, the ratio, the target
awk -F'\t' -v runs="$RUNS" -v flood="$FLOOD" -v over="$OVER" -v mode="$MODE" -v size="$FLOOD_SIZE" -v wait="$WAIT" '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
  }
  { if ($3 == 1) { n[$1]++; t[$1, n[$1]] = $4; if ($4 > worst[$1]) worst[$1] = $4 } else failed[$1]++
    if ($5 != "-" && $5 > rss) rss = $5 }
  END {
    for (k in n) { delete a; for (i = 1; i <= n[k]; i++) a[i] = t[k, i]; med[k] = median(a, n[k]) }
    printf "## Pre-auth connect flood (host, TCP loopback)\n\n"
    printf "%s connections from 127.0.0.1 over %s, each %s, against `rdmarecv -k --key-file`; the keyed sender (--wait %s) sends %s once a third are open. %d rounds, each without and under the flood.\n\n", flood, over, (mode == "proposal" ? "a valid proposal and then nothing" : mode == "silent" ? "silent" : "silent or a proposal, in turn"), wait, size, runs
    printf "| stream | exact | median s | worst s |\n| --- | --- | --- | --- |\n"
    printf "| without the flood | %d of %d | %s | %s |\n", n["none"], runs, n["none"] ? sprintf("%.2f", med["none"]) : "-", n["none"] ? sprintf("%.2f", worst["none"]) : "-"
    printf "| under the flood | %d of %d | %s | %s |\n\n", n["flood"], runs, n["flood"] ? sprintf("%.2f", med["flood"]) : "-", n["flood"] ? sprintf("%.2f", worst["flood"]) : "-"
    if (n["none"] && n["flood"]) {
      r = med["flood"] / med["none"]; w = worst["flood"] / med["none"]
      printf "Ratio under/without the flood: %.2fx (medians), %.2fx (worst under the flood against the median without). The receiver'"'"'s peak RSS under the flood: %s MiB.\n\n", r, w, rss == "" ? "?" : sprintf("%.0f", rss / 1024)
      printf "Target (issue 30): the real stream exact in every run under the flood, within 2x its time without it: %s.\n", (n["flood"] == runs && w <= 2) ? "pass" : "miss"
    } else {
      printf "Target (issue 30): miss (no exact run to compare).\n"
    }
  }' "$raw"
