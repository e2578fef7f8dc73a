#!/usr/bin/env bash
# bench/ratelimit.sh - how close rdmasend --limit-rate comes to the rate asked for
# (`make bench-ratelimit`; also a host-only section of `make bench`), over TCP on loopback:
# for each rate of RATES (default "10M 100M 1G"; bytes per second, binary units), RUNS
# runs (default 3) each send for about SECONDS (default 60) the bytes that rate allows
# (rate x SECONDS, of zeros from /dev/zero) to an rdmarecv writing to /dev/null, timed from
# starting the sender to its exit, and by the sender's own data phase (its --stats-json
# seconds, without the processes' start and the connection's setup). Prints a markdown
# section on stdout: per rate, the median achieved rate, its ratio to the rate asked for
# (the target: 0.97 to 1.00, as a token bucket allows a tenth of a second's burst, so
# slightly above 1 on short runs), the sender's own ratio, and the runs exact (exit 0 on
# both sides); progress goes to stderr, the raw figures to $RATELIMIT_TSV if set.
#
# First one stream of UNLIMITED (default 8G) zeros without a limit: a rate above what it
# reaches is judged against what it reached (the machine's limit, not the limiter's).
#
# env: RATES, RUNS, SECONDS_PER_RUN (default 60), UNLIMITED, RATELIMIT_TSV;
#   BENCH_BIN  where rdmasend and rdmarecv are (default bin/, after `make build`)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh   # free_port, wait_listen, to_bytes

RATES=${RATES:-10M 100M 1G}
RUNS=${RUNS:-3}
SECS=${SECONDS_PER_RUN:-60}
UNLIMITED=${UNLIMITED:-8G}
BENCH_BIN=${BENCH_BIN:-bin}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "ratelimit: RUNS must be a positive number" >&2; exit 2; }
[[ $SECS =~ ^[1-9][0-9]*$ ]] || { echo "ratelimit: SECONDS_PER_RUN must be a positive number" >&2; exit 2; }
for f in "$BENCH_BIN/rdmasend" "$BENCH_BIN/rdmarecv"; do
  [ -x "$f" ] || { echo "ratelimit: $f missing: run make build" >&2; exit 1; }
done
tmp=$(mktemp -d /tmp/rdmapipe-ratelimit.XXXXXX)
rpid=''
# shellcheck disable=SC2317  # called through the trap
cleanup() {
  if [ -n "$rpid" ]; then kill "$rpid" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT
bench_init "$tmp"
raw=$tmp/raw.tsv
: > "$raw"

# one RATE RUN [BYTES]: one limited stream (RATE none: without a limit, BYTES of zeros);
# appends "RATE_BYTES RUN EXACT SECONDS ACHIEVED OWN" to $raw (RATE_BYTES 0 without a limit;
# OWN: bytes per second of the sender's own data phase, 0 if it did not say)
one() {
  local rate=$1 run=$2 bytes port t0 t1 rc=0 rrc=0 secs own want=0 limit=()
  if [ "$rate" = none ]; then
    bytes=$3
  else
    want=$(to_bytes "$rate") bytes=$(( $(to_bytes "$rate") * SECS )) limit=(--limit-rate "$rate")
  fi
  port=$(free_port)
  "$BENCH_BIN/rdmarecv" --transport tcp --bind 127.0.0.1 --port "$port" > /dev/null 2> "$tmp/recv.err" &
  rpid=$!
  wait_listen tcp "$port"
  t0=$(date +%s.%N)
  head -c "$bytes" /dev/zero | "$BENCH_BIN/rdmasend" --transport tcp "${limit[@]}" --stats-json "$tmp/send.json" --port "$port" 127.0.0.1 2> "$tmp/send.err" || rc=$?
  t1=$(date +%s.%N)
  wait "$rpid" || rrc=$?
  rpid=''
  secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", b - a }')
  own=$(awk -v n="$bytes" -F'[:,]' '$1 ~ /"seconds"/ && $2 > 0 { printf "%.0f", n / $2; found = 1 } END { if (!found) print 0 }' "$tmp/send.json" 2>/dev/null || echo 0)
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$want" "$run" "$([ "$rc$rrc" = 00 ] && echo 1 || echo 0)" "$secs" \
    "$(awk -v n="$bytes" -v s="$secs" 'BEGIN { printf "%.0f", n / s }')" "$own" >> "$raw"
  echo "ratelimit: $rate run $run: exit $rc/$rrc, $bytes bytes in $secs s (own rate $own bytes/s)" >&2
}

one none 1 "$(to_bytes "$UNLIMITED")"
for rate in $RATES; do
  for ((run = 1; run <= RUNS; run++)); do one "$rate" "$run"; done
done
cap=$(awk -F'\t' '$1 == 0 && $3 { print $5 }' "$raw")
if [ -n "${RATELIMIT_TSV:-}" ]; then cp "$raw" "$RATELIMIT_TSV"; fi

echo "## --limit-rate (host, TCP loopback)"
echo
echo "rdmasend --limit-rate RATE of RATE x ${SECS} s of zeros to rdmarecv > /dev/null, $RUNS runs each, timed from the sender's start to its exit (own: the sender's data phase, its --stats-json seconds); target: achieved / asked 0.97 to 1.00 (a tenth of a second's burst may lift short runs just above 1); a rate this machine does not reach without a limit is judged against what it reaches: the same stream of $UNLIMITED without --limit-rate, in this run, moved ${cap:-0} bytes/s."
echo
echo "| asked (bytes/s) | achieved, median (bytes/s) | achieved / asked | own / asked, median | runs exact | target |"
echo "|---|---|---|---|---|---|"
for rate in $RATES; do
  want=$(to_bytes "$rate")
  exact=$(awk -F'\t' -v w="$want" '$1 == w { e += $3 } END { print e + 0 }' "$raw")
  mapfile -t got < <(awk -F'\t' -v w="$want" '$1 == w && $3 { print $5 }' "$raw" | sort -n)
  if [ ${#got[@]} = 0 ]; then
    echo "| $rate ($want) | - | - | - | $exact of $RUNS | miss |"
    continue
  fi
  m=${#got[@]}
  med=$(( m % 2 ? got[m / 2] : (got[m / 2 - 1] + got[m / 2]) / 2 ))
  mapfile -t own < <(awk -F'\t' -v w="$want" '$1 == w && $3 { print $6 }' "$raw" | sort -n)
  omed=$(( m % 2 ? own[m / 2] : (own[m / 2 - 1] + own[m / 2]) / 2 ))
  awk -v want="$want" -v name="$rate" -v med="$med" -v omed="$omed" -v exact="$exact" -v runs="$RUNS" -v cap="${cap:-0}" 'BEGIN {
    r = med / want
    v = (r >= 0.97 && r <= 1.01 && exact == runs) ? "pass" : "miss"
    if (cap > 0 && cap < want) {
      v = sprintf("%s (unlimited %.3f of asked; achieved / unlimited %.3f)", (med >= 0.97 * cap && exact == runs) ? "pass" : "miss", cap / want, med / cap)
    }
    printf "| %s (%d) | %d | %.3f | %.3f | %d of %d | %s |\n", name, want, med, r, omed / want, exact, runs, v
  }'
done
