#!/usr/bin/env bash
# bench/startup.sh - what the progress bar costs (github.com/schollz/progressbar/v3, which
# internal/progress draws -p and rdmacp --progress with; issue 45), on this host:
#   start:  `rdmasend --version`, from exec to exit: the binaries of BEFORE_BIN (built
#           without the library) against BENCH_BIN's, which link it (and net/http, which
#           it imports) whether -p is given or not;
#   stream: a one-byte stream over TCP loopback to an rdmarecv -k, from starting rdmasend
#           to its exit, with and without -p (BENCH_BIN's binaries);
#   size:   each binary's size, before and after.
# RUNS rounds (default 30), each running every variant once in turn (paired, interleaved)
# after one untimed warm-up; prints a markdown table of medians and ratios on stdout.
#
# env:
#   RUNS        rounds (default 30)
#   BENCH_BIN   the binaries to measure (default bin/, after `make build`)
#   BEFORE_BIN  binaries built without the progress bar, e.g. from the commit before it:
#               git archive REV | tar -x -C /tmp/before && (cd /tmp/before && make build)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh   # free_port

RUNS=${RUNS:-30}
BENCH_BIN=${BENCH_BIN:-bin}
: "${BEFORE_BIN:?set BEFORE_BIN to binaries built without the progress bar}"
for f in "$BENCH_BIN"/rdma{send,recv,cp} "$BEFORE_BIN"/rdma{send,recv,cp}; do
  [ -x "$f" ] || { echo "startup: $f missing" >&2; exit 1; }
done

# ms CMD...: the wall time of CMD in milliseconds (its output discarded).
ms() {
  local t0=$EPOCHREALTIME
  "$@" > /dev/null 2>&1
  awk -v a="$t0" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.3f\n", (b - a) * 1000 }'
}
# median: of the numbers on stdin.
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

port=$(free_port)
"$BENCH_BIN/rdmarecv" -k -P "$port" > /dev/null 2>&1 &
recv=$!
trap 'kill $recv 2>/dev/null || true' EXIT
send() { printf x | "$BENCH_BIN/rdmasend" -P "$port" --wait 10s "$@" 127.0.0.1; }

tmp=$(mktemp -d)
trap 'kill $recv 2>/dev/null || true; rm -rf "$tmp"' EXIT
ms send > /dev/null; ms send -p > /dev/null; ms "$BEFORE_BIN/rdmasend" --version > /dev/null
for _ in $(seq "$RUNS"); do
  ms "$BEFORE_BIN/rdmasend" --version >> "$tmp/start-before"
  ms "$BENCH_BIN/rdmasend" --version >> "$tmp/start-after"
  ms send >> "$tmp/stream"
  ms send -p >> "$tmp/stream-p"
done
for f in start-before start-after stream stream-p; do
  eval "m_${f//-/_}=$(median < "$tmp/$f")"
done
size() { stat -c %s "$1" | awk '{ printf "%.1f", $1 / 1e6 }'; }
echo "| measure ($RUNS paired runs, medians) | without | with | with / without |"
echo "| --- | --- | --- | --- |"
awk -v a="$m_start_before" -v b="$m_start_after" 'BEGIN { printf "| rdmasend --version, ms: built without the library, with it | %.2f | %.2f | %.2f |\n", a, b, b / a }'
awk -v a="$m_stream" -v b="$m_stream_p" 'BEGIN { printf "| a 1-byte stream on loopback, ms: without -p, with -p | %.2f | %.2f | %.2f |\n", a, b, b / a }'
for n in rdmasend rdmarecv rdmacp; do
  awk -v a="$(size "$BEFORE_BIN/$n")" -v b="$(size "$BENCH_BIN/$n")" -v n="$n" 'BEGIN { printf "| %s, MB | %.1f | %.1f | %.2f |\n", n, a, b, b / a }'
done
