#!/usr/bin/env bash
# bench/latency.sh - latency and start-up as a new user notices them (`make bench-latency`;
# also a host-only section of `make bench`): over TCP on loopback (127.0.0.1), rdmasend ->
# rdmarecv with the default transport (auto: it probes RDMA devices first) and with
# --transport tcp, against netcat-openbsd (`nc -N` -> `nc -d -l`) in the same run:
#   first byte: from starting the sender (its stdin already holds a line; the receiver
#               already listens) until the first byte is read from the receiver's stdout;
#   line:       a stream is started, and 1 s into it LINES lines (default 5) are written
#               into the sender's stdin, GAP apart (default 200 ms): from each write until
#               the line is read from the receiver's stdout.
# Both are timed by bench/latency (a small Go program) on its own monotonic clock: it
# starts both sides with pipes on the sender's stdin and the receiver's stdout, and starts
# the sender once /proc/net/tcp shows the receiver's listening socket (no fixed sleep).
# Every tool runs once untimed (warm-up: binaries and libraries into the page cache), then
# RUNS rounds, each of every tool in turn (interleaved), first byte then line. Prints a
# markdown section on stdout: median ms per tool, and each rdmapipe variant / nc; progress
# and failures go to stderr. Raw per-run figures: $LATENCY_TSV if set.
#
# env:
#   RUNS       rounds (default 5); every figure is the median of the successful rounds
#   LINES, GAP lines per line run (default 5) and the time between them (default 200ms)
#   BENCH_BIN  where rdmasend and rdmarecv are (default bin/, after `make build`)
#   LATENCY_TOOLS  default "rdmapipe rdmapipe-tcp nc"
#   LATENCY_TSV    also write the raw figures there (tool, measure, run, ms)
#   GO         the go command that builds bench/latency (default go)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh   # free_port

RUNS=${RUNS:-5}
LINES=${LINES:-5}
GAP=${GAP:-200ms}
BENCH_BIN=${BENCH_BIN:-bin}
GO=${GO:-go}
LATENCY_TOOLS=${LATENCY_TOOLS:-rdmapipe rdmapipe-tcp nc}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "latency: RUNS must be a positive number" >&2; exit 2; }
for f in "$BENCH_BIN/rdmasend" "$BENCH_BIN/rdmarecv"; do
  [ -x "$f" ] || { echo "latency: $f missing: run make build" >&2; exit 1; }
done
command -v nc > /dev/null || { echo "latency: nc (netcat-openbsd) missing" >&2; exit 1; }

tmp=$(mktemp -d /tmp/rdmapipe-latency.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
"$GO" build -o "$tmp/latency" ./bench/latency
raw=$tmp/raw.tsv
: > "$raw"

# sides TOOL: the receiver's and the sender's command lines, as the helper's arguments
sides() {
  local R=$BENCH_BIN/rdmarecv S=$BENCH_BIN/rdmasend
  case $1 in
    rdmapipe)     echo "-- $R --bind 127.0.0.1 --port PORT -- $S --port PORT 127.0.0.1" ;;
    rdmapipe-tcp) echo "-- $R --transport tcp --bind 127.0.0.1 --port PORT -- $S --transport tcp --port PORT 127.0.0.1" ;;
    nc)           echo "-- nc -d -l 127.0.0.1 PORT -- nc -N 127.0.0.1 PORT" ;;
    *) echo "latency: unknown tool $1" >&2; return 1 ;;
  esac
}

# one TOOL MODE RUN: one trial; appends "TOOL MEASURE RUN MS" lines to $raw (run 0, the
# warm-up, is not recorded)
one() {
  local tool=$1 mode=$2 run=$3 port out rc=0 args
  port=$(free_port)
  args=$(sides "$tool")
  # shellcheck disable=SC2086  # args is a word list without blanks inside words
  out=$(timeout 60 "$tmp/latency" -mode "$mode" -port "$port" -lines "$LINES" -gap "$GAP" $args 2> "$tmp/err") || rc=$?
  if [ "$rc" != 0 ]; then
    echo "latency: $tool $mode run $run FAILED (exit $rc): $(tr '\n' ' ' < "$tmp/err" | tail -c 400)" >&2
    printf '%s\t%s\t%s\tFAILED\n' "$tool" "$mode" "$run" >> "$raw"
    return 0
  fi
  echo "latency: $tool $mode run $run: $(tr '\n' ' ' <<< "$out")ms" >&2
  [ "$run" = 0 ] && return 0
  awk -v t="$tool" -v r="$run" '
    $1 == "first" { printf "%s\tfirst\t%s\t%s\n", t, r, $2 }
    $1 == "line" { printf "%s\tline%s\t%s\t%s\n", t, $2, r, $3 }' <<< "$out" >> "$raw"
}

echo "latency: $RUNS rounds of: $LATENCY_TOOLS (first byte, then $LINES lines $GAP apart 1 s into a stream)" >&2
for tool in $LATENCY_TOOLS; do
  one "$tool" first 0
done
for ((run = 1; run <= RUNS; run++)); do
  for tool in $LATENCY_TOOLS; do
    one "$tool" first "$run"
    one "$tool" line "$run"
  done
done
if [ -n "${LATENCY_TSV:-}" ]; then cp "$raw" "$LATENCY_TSV"; fi

load=$(cut -d' ' -f1-3 /proc/loadavg)
awk -F'\t' -v runs="$RUNS" -v lines="$LINES" -v gap="$GAP" -v tools="$LATENCY_TOOLS" -v load="$load" '
function median(s,    a, n, i, j, t) {
  n = split(s, a, " ")
  if (n == 0) return ""
  for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] + 0 > t + 0; j--) a[j + 1] = a[j]; a[j + 1] = t }
  return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
function fmt(v) { return v == "" ? "-" : sprintf("%.2f", v) }
function ratio(v, base) { return (v == "" || base == "" || base + 0 == 0) ? "-" : sprintf("%.2fx", v / base) }
function verdict(v, base) { return (v == "" || base == "" || base + 0 == 0) ? "-" : (v / base <= 2 ? "pass" : "miss") }
$4 == "FAILED" { failed[$1] = failed[$1] " " $2 "#" $3; next }
$2 == "first" { first[$1] = first[$1] " " $4; nfirst[$1]++ }
$2 ~ /^line/ {
  perrun[$1, $3] = perrun[$1, $3] " " $4
  if ($2 == "line1") idle[$1] = idle[$1] " " $4
  runs_of[$1] = runs_of[$1] " " $3
}
END {
  nt = split(tools, tl, " ")
  for (i = 1; i <= nt; i++) {
    t = tl[i]
    mf[t] = median(first[t])
    # a run'"'"'s line figure: the median of its lines; the tool'"'"'s: the median of those
    split(runs_of[t], rr, " "); delete seen; s = ""
    for (k in rr) if (!(rr[k] in seen)) { seen[rr[k]] = 1; s = s " " median(perrun[t, rr[k]]); nline[t]++ }
    ml[t] = median(s)
    mi[t] = median(idle[t])
    lo[t] = ""; hi[t] = ""
    split(s, v, " ")
    for (k in v) { if (lo[t] == "" || v[k] + 0 < lo[t] + 0) lo[t] = v[k]; if (hi[t] == "" || v[k] + 0 > hi[t] + 0) hi[t] = v[k] }
  }
  print "## Latency and start-up (host, TCP loopback)"
  print ""
  printf "Median ms of %d rounds (interleaved, one warm-up each); load average at the end: %s.\n", runs, load
  print "first byte: sender start -> first byte on the receiver'"'"'s stdout (receiver already listening)."
  printf "line: %d lines written %s apart from 1 s into a stream, write -> read from the receiver'"'"'s stdout; a round'"'"'s figure is the median of its lines (range: lowest and highest round); line 1: the first of them, after 1 s of silence.\n", lines, gap
  print ""
  print "| tool | first byte ms | x nc | line ms | (range) | x nc | line 1 ms | x nc | runs ok (first/line) |"
  print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"
  names["rdmapipe"] = "rdmapipe (auto)"; names["rdmapipe-tcp"] = "rdmapipe (--transport tcp)"; names["nc"] = "nc (netcat-openbsd)"
  for (i = 1; i <= nt; i++) {
    t = tl[i]
    printf "| %s | %s | %s | %s | %s-%s | %s | %s | %s | %d/%d |\n", (t in names ? names[t] : t), fmt(mf[t]), ratio(mf[t], mf["nc"]), fmt(ml[t]), fmt(lo[t]), fmt(hi[t]), ratio(ml[t], ml["nc"]), fmt(mi[t]), ratio(mi[t], mi["nc"]), nfirst[t], nline[t]
  }
  print ""
  print "Target (issue 18): the first byte and a line each within 2x nc'"'"'s latency."
  print ""
  print "| target | measured | verdict |"
  print "| --- | ---: | --- |"
  for (i = 1; i <= nt; i++) {
    t = tl[i]
    if (t == "nc") continue
    printf "| %s first byte <= 2x nc | %s | %s |\n", (t in names ? names[t] : t), ratio(mf[t], mf["nc"]), verdict(mf[t], mf["nc"])
    printf "| %s line <= 2x nc | %s | %s |\n", (t in names ? names[t] : t), ratio(ml[t], ml["nc"]), verdict(ml[t], ml["nc"])
  }
  nf = 0
  for (t in failed) nf++
  if (nf) {
    print ""
    for (t in failed) printf "Failed runs of %s (measure#round):%s\n", t, failed[t]
  }
}' "$raw"
