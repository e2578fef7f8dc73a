#!/usr/bin/env bash
# bench/flood.sh - what pre-auth connect floods cost a keyed receiver and its real sender
# (`make bench-flood`; also a host-only section of `make bench`), over TCP on loopback,
# issue 30's and issue 42's cases: a keyed `rdmarecv -k --key-file` under a flood of
# connections from bench/flood, one case for each of CASES (space-separated), each
# MODE:SOURCES:SHAPE:
#   MODE     what each flood connection does (bench/flood's -mode): proposal or stall (a
#            valid proposal, then nothing, held open), silent, mixed (held open too);
#            version (another protocol version's proposal), garbage (16 random bytes):
#            these two are refused, and close at once
#   SOURCES  the flood comes from 127.0.0.2 ... 127.0.0.(SOURCES+1) (at most 253), and the
#            real sender from 127.0.0.1; 0: the flood from 127.0.0.1 too
#   SHAPE    N/OVER: N connections evenly over OVER (e.g. 1000/15s); RxFOR: R a second for
#            FOR (e.g. 60x30s); a stream case. N alone: N connections as fast as the
#            flooder can (e.g. 60000); a memory case
# A stream case runs RUNS rounds (default 10), each with one keyed sender (--wait WAIT,
# default 20s) of FLOOD_SIZE (default 256M) zeros without the flood and one under it,
# starting once a third of the flood was tried, each against a receiver of its own. A run
# is exact when the sender exits 0 and the receiver wrote FLOOD_SIZE bytes. Its target:
# exact in RUNS of RUNS runs under the flood, and the median of the rounds' paired ratios
# (under / without, as the owners judge a noisy ratio) within 2x.
# A memory case floods a receiver once and reads its peak RSS (VmHWM) from /proc when the
# flood ends, against the target of at most 64 MiB; then one keyed stream shows whether
# the receiver still serves. Prints a markdown section on stdout, one table row a case;
# progress goes to stderr, and the raw figures to $FLOOD_TSV if set.
#
# env: RUNS, CASES (default: issue 30's proposal:0:1000/15s; version, garbage and stall,
#   each from 1 and from 200 sources, as 1000/15s and as 60x30s; version:200:60000),
#   WAIT, FLOOD_SIZE (K/M/G are binary), FLOOD_TSV;
#   BENCH_BIN  where rdmasend and rdmarecv are (default bin/, after `make build`)
#   GO         the go command that builds bench/flood (default go)
set -euo pipefail
cd "$(dirname "$0")/.."
# shellcheck source=bench/lib.sh
. bench/lib.sh   # free_port, to_bytes

RUNS=${RUNS:-10}
if [ -z "${CASES:-}" ]; then
  CASES=proposal:0:1000/15s
  for m in version garbage stall; do
    for s in 1 200; do CASES+=" $m:$s:1000/15s $m:$s:60x30s"; done
  done
  CASES+=" version:200:60000"
fi
WAIT=${WAIT:-20s}
FLOOD_SIZE=${FLOOD_SIZE:-256M}
BENCH_BIN=${BENCH_BIN:-bin}
GO=${GO:-go}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "flood: RUNS must be a positive number" >&2; exit 2; }
BYTES=$(to_bytes "$FLOOD_SIZE")
for c in $CASES; do
  [[ $c =~ ^(silent|proposal|stall|mixed|version|garbage):[0-9]+:([0-9]+/[0-9]+s|[0-9]+x[0-9]+s|[0-9]+)$ ]] ||
    { echo "flood: case '$c': want MODE:SOURCES:SHAPE (see bench/flood.sh)" >&2; exit 2; }
  IFS=: read -r _ s _ <<< "$c"
  ((10#$s <= 253)) || { echo "flood: case '$c': at most 253 sources" >&2; exit 2; }
done
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

# receiver: start a keyed receiver on a free port; sets port and rpid, fails if it never
# listens
receiver() {
  port=$(free_port)
  "$BENCH_BIN/rdmarecv" --transport tcp -k -v --key-file "$tmp/key" --bind 127.0.0.1 --port "$port" \
    > "$out/out" 2> "$tmp/recv.log" &
  rpid=$!
  pids+=("$rpid")
  if ! wait_line "$tmp/recv.log" "listening on" 10; then
    echo "flood: the receiver never listened: $(tail -n 3 "$tmp/recv.log")" >&2
    kill "$rpid" 2> /dev/null || true
    return 1
  fi
}

# stream: one keyed sender of FLOOD_SIZE to the receiver on port; sets exact (1 or 0) and
# secs, and says so on stderr after the text $1
stream() {
  local t0 t1 rc=0 got
  t0=$(date +%s.%N)
  head -c "$BYTES" /dev/zero |
    "$BENCH_BIN/rdmasend" --transport tcp --key-file "$tmp/key" --wait "$WAIT" --port "$port" 127.0.0.1 \
      2> "$tmp/send.log" || rc=$?
  t1=$(date +%s.%N)
  secs=$(echo "$t1 - $t0" | bc)
  got=$(stat -c %s "$out/out")
  exact=0
  if [ "$rc" = 0 ] && [ "$got" = "$BYTES" ]; then exact=1; fi
  if [ "$exact" = 1 ]; then
    echo "flood: $1: exact, $secs s" >&2
  else
    echo "flood: $1: NOT exact (sender exit $rc, $got of $BYTES bytes written), $secs s: $(tail -n 2 "$tmp/send.log" | tr '\n' ' ')" >&2
  fi
}

# stop_receiver: end the receiver of rpid, and drop its output
stop_receiver() {
  kill "$rpid" 2> /dev/null || true
  wait "$rpid" 2> /dev/null || true
  rm -f "$out/out"
}

# hwm PID: the peak RSS of PID in KiB (VmHWM), or - if it is gone
hwm() { awk '/VmHWM/ {print $2}' "/proc/$1/status" 2> /dev/null || echo -; }

# one CASE KIND RUN FLOOD_ARGS...: one stream, KIND none or flood; appends
# "CASE KIND RUN EXACT SECONDS RSS_KB - -" to $raw
one() {
  local id=$1 kind=$2 run=$3 fpid='' rss=- port rpid exact secs
  shift 3
  if ! receiver; then
    printf '%s\t%s\t%s\t0\t-\t-\t-\t-\n' "$id" "$kind" "$run" >> "$raw"
    return 0
  fi
  if [ "$kind" = flood ]; then
    rm -f "$tmp/hold"
    mkfifo "$tmp/hold"   # the held connections stay open until the flood's stdin closes
    "$tmp/flood" -addr "127.0.0.1:$port" "$@" < "$tmp/hold" > "$tmp/flood.log" &
    fpid=$!
    pids+=("$fpid")
    exec 9> "$tmp/hold"
    wait_line "$tmp/flood.log" "mark:" 120 || echo "flood: the flood never reached its mark" >&2
  fi
  stream "$id, run $run, $kind"
  if [ -n "$fpid" ]; then
    rss=$(hwm "$rpid")
    exec 9>&-
    kill "$fpid" 2> /dev/null || true
    wait "$fpid" 2> /dev/null || true
  fi
  stop_receiver
  printf '%s\t%s\t%s\t%s\t%s\t%s\t-\t-\n' "$id" "$kind" "$run" "$exact" "$secs" "$rss" >> "$raw"
}

# memory CASE FLOOD_ARGS...: one flood against a receiver, its peak RSS when the flood
# ends, then one stream; appends "CASE memory 1 EXACT FLOOD_SECONDS RSS_KB MADE FAILED"
memory() {
  local id=$1 rss=- port rpid exact secs summary made=- failed=- fsecs=-
  shift
  if ! receiver; then
    printf '%s\tmemory\t1\t0\t-\t-\t-\t-\n' "$id" >> "$raw"
    return 0
  fi
  timeout 600 "$tmp/flood" -addr "127.0.0.1:$port" "$@" < /dev/null > "$tmp/flood.log" || true
  rss=$(hwm "$rpid")
  if summary=$(grep 'flood: done:' "$tmp/flood.log"); then
    read -r made failed fsecs <<< "$(echo "$summary" | awk '{print $3, $5, $7}')"
  fi
  echo "flood: $id: $made made, $failed failed in $fsecs s; the receiver's peak RSS $rss KiB" >&2
  stream "$id, a stream after the flood"
  stop_receiver
  printf '%s\tmemory\t1\t%s\t%s\t%s\t%s\t%s\n' "$id" "$exact" "$fsecs" "$rss" "$made" "$failed" >> "$raw"
}

for c in $CASES; do
  IFS=: read -r mode sources shape <<< "$c"
  args=(-mode "$mode" -sources "$sources")
  case $shape in
    */*) total=${shape%/*}; args+=(-n "$total" -over "${shape#*/}") ;;
    *x*) rate=${shape%x*} span=${shape#*x}; total=$((rate * ${span%s})); args+=(-rate "$rate" -for "$span") ;;
    *)
      echo "flood: $c: $shape connections as fast as the flooder can" >&2
      memory "$c" "${args[@]}" -n "$shape"
      continue
      ;;
  esac
  echo "flood: $c: $RUNS rounds: $FLOOD_SIZE keyed, without and under the flood" >&2
  for ((i = 1; i <= RUNS; i++)); do
    one "$c" none "$i"
    one "$c" flood "$i" "${args[@]}" -mark $((total / 3 > 0 ? total / 3 : 1))
  done
done
if [ -n "${FLOOD_TSV:-}" ]; then cp "$raw" "$FLOOD_TSV"; fi

# the report: per case, medians and worst times of the exact runs, the ratio, the target
awk -F'\t' -v runs="$RUNS" -v size="$FLOOD_SIZE" -v wait="$WAIT" '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j-1] > a[j]; j--) { t = a[j]; a[j] = a[j-1]; a[j-1] = t }
    return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
  }
  function secs(x) { return sprintf("%.2f", x) }
  function mib(kb) { return kb == "" || kb == "-" ? "-" : sprintf("%.0f", kb / 1024) }
  function from(s) { return s == 0 ? "127.0.0.1" : s == 1 ? "127.0.0.2" : "127.0.0.2-" (s + 1) }
  function shape(s,   p) {
    if (s ~ /\//) { split(s, p, "/"); return p[1] (p[2] + 0 ? " over " p[2] : " at once, held") }
    if (s ~ /x/) { split(s, p, "x"); return p[1] "/s for " p[2] }
    return s " as fast as it can"
  }
  !($1 in seen) { seen[$1] = 1; order[++cases] = $1 }
  $2 == "memory" { mem[$1] = 1; mexact[$1] = $4; msecs[$1] = $5; rss[$1] = $6; made[$1] = $7; failed[$1] = $8; next }
  { k = $1 SUBSEP $2
    if ($4 == 1) { n[k]++; t[k, n[k]] = $5; if ($5 > worst[k]) worst[k] = $5; round[k, $3] = $5 }
    if ($6 != "-" && $6 + 0 > rss[$1] + 0) rss[$1] = $6 }
  END {
    printf "## Pre-auth connect flood (host, TCP loopback)\n\n"
    printf "A keyed `rdmarecv -k --key-file` on 127.0.0.1 under floods from bench/flood; the real keyed sender (--wait %s, from 127.0.0.1) sends %s of zeros once a third of the flood was tried, in %d rounds each without and under the flood. ", wait, size, runs
    printf "Each flood connection: *proposal*, *stall*: a valid proposal, then nothing, held open (issue 30); *version*: a proposal of another protocol version, then closed; *garbage*: 16 random bytes, then closed (issue 42). "
    printf "Targets: a stream case, the real stream exact in %d of %d runs under the flood, the median of the rounds'"'"' paired ratios (under / without) within 2x; a memory case (a flood as fast as the flooder can), the receiver'"'"'s peak RSS (VmHWM) when the flood ends at most 64 MiB (a keyed stream after the flood shows whether it still serves).\n\n", runs, runs
    printf "| case | flood | from | exact without / under | median s without / under | worst s under | paired ratio, median | receiver peak RSS MiB | target | result |\n"
    printf "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n"
    for (c = 1; c <= cases; c++) {
      id = order[c]; split(id, f, ":")
      what = f[1] ", " shape(f[3])
      if (id in mem) {
        ok = rss[id] != "-" && rss[id] + 0 <= 64 * 1024
        printf "| %s | %s: %s made, %s failed, in %s s | %s | the stream after it: %s | - | - | - | %s | at most 64 MiB | %s |\n", id, what, made[id], failed[id], msecs[id], from(f[2]), mexact[id] == 1 ? "exact" : "NOT exact", mib(rss[id]), ok ? "pass" : "miss"
      } else {
        for (j = 1; j <= 2; j++) {
          k = id SUBSEP (j == 1 ? "none" : "flood")
          delete a; for (i = 1; i <= n[k]; i++) a[i] = t[k, i]
          med[j] = n[k] ? median(a, n[k]) : ""
        }
        kn = id SUBSEP "none"; kf = id SUBSEP "flood"
        delete a; m = 0
        for (i = 1; i <= runs; i++) if ((kn, i) in round && (kf, i) in round) a[++m] = round[kf, i] / round[kn, i]
        ratio = m ? median(a, m) : ""
        ok = n[kf] == runs && ratio != "" && ratio <= 2
        printf "| %s | %s | %s | %d / %d of %d | %s / %s | %s | %s | %s | %d of %d exact, within 2x | %s |\n", id, what, from(f[2]), n[kn], n[kf], runs, n[kn] ? secs(med[1]) : "-", n[kf] ? secs(med[2]) : "-", n[kf] ? secs(worst[kf]) : "-", ratio == "" ? "-" : sprintf("%.2fx", ratio), mib(rss[id]), runs, runs, ok ? "pass" : "miss"
      }
      met += ok
    }
    printf "\nTargets met: %d of %d.\n", met, cases
  }' "$raw"
