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
# Then the fleet (FLEET, host counts, default "4 8"; "" skips it): a keyed rdmasend --to N
# receivers, each one's output read by bench/drain at its own rate, FLEET_SIZE bytes
# (default 128M) of random data; for each host the time from rdmasend's start until its
# drain had the last byte, counted only when the drain's XXH3 equals the input's and the
# host exited 0. Cases: all alike (no limit), one host at a quarter of the chain's rate
# (host 2; SLOW_RATE, bytes a second, overrides: the chain's rate is FLEET_SIZE over the
# all-alike case's median time), two slow (hosts 2 and N-1), one killed (SIGKILL) a
# quarter of the all-alike time into the stream (host N/2+1), one slow and one killed.
# FLEET_BINS (space-separated dirs of rdmasend/rdmarecv, default BENCH_BIN) runs each
# round of every case with each in turn, so that a baseline and a change share the run,
# and the table's paired column is the median over the rounds of each bin's slowest host
# over the first bin's in the same round; the last column is the median of the rounds' CPU
# seconds, all processes together (sender, receivers, drains: on one machine they share
# its cores, so that a bin's CPU is every host's time);
# RECV_FLAGS go to every receiver. PARTS (default "three chain fleet") picks the sections.
# Every receiver of a machine shares its CPUs: see bench/README.md for what that means.
set -euo pipefail
BIN=${BENCH_BIN:-bin} TRANSPORT=${TRANSPORT:-tcp} ADDR=${ADDR:-127.0.0.1}
SIZE=${SIZE:-256M} RUNS=${RUNS:-3} PORT=${PORT:-28900} HOSTS=${HOSTS:-16}
CHAIN_SIZE=${CHAIN_SIZE:-$([ "$TRANSPORT" = rdma ] && echo 8M || echo 64M)}
PARTS=${PARTS:-three chain fleet} FLEET=${FLEET-4 8} FLEET_SIZE=${FLEET_SIZE:-128M}
FLEET_BINS=${FLEET_BINS:-$BIN} RECV_FLAGS=${RECV_FLAGS:-}
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

part() { [[ " $PARTS " == *" $1 "* ]]; }

declare -A rate
part three && for mode in single chain parallel; do
  for ((r = 0; r < RUNS; r++)); do one "$mode"; done > "$DIR/$mode.rates"
  rate[$mode]=$(median < "$DIR/$mode.rates")
  echo "broadcast: $mode: $(tr '\n' ' ' < "$DIR/$mode.rates")MB/s" >&2
done
part three && {
echo "| $TRANSPORT on $ADDR, $BYTES bytes, median of $RUNS | MB/s per receiver | chain / this |"
echo "| --- | ---: | ---: |"
echo "| one rdmasend -> one rdmarecv | ${rate[single]} | $(awk -v a="${rate[chain]}" -v b="${rate[single]}" 'BEGIN { printf "%.2f", a / b }') |"
echo "| **rdmasend --to** 3 rdmarecv (chain) | ${rate[chain]} | 1.00 |"
echo "| 3 rdmasend in parallel, 1 rdmarecv each | ${rate[parallel]} | $(awk -v a="${rate[chain]}" -v b="${rate[parallel]}" 'BEGIN { printf "%.2f", a / b }') |"
}

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

chains() {
[ "$CHAIN_SIZE" = 0 ] && return 0
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
}
part chain && chains

# fleet_run BIN N CASE T_ALIKE SLOW_RATE: one keyed rdmasend --to N receivers of BIN in CASE;
# prints the sender's exit status, then for each host the seconds until its drain held a
# verified copy, "killed" for the host killed, or "fail"
fleet_run() {
  local bin=$1 n=$2 kase=$3 alike=$4 slow=$5 i to="" t0 status=0 victim=-1 rates=() pids=() drains=()
  for ((i = 0; i < n; i++)); do rates[i]=0; done
  case $kase in
    slow) rates[1]=$slow ;;
    two-slow) rates[1]=$slow rates[n - 2]=$slow ;;
    killed) victim=$((n / 2)) ;;
    slow-killed) rates[1]=$slow victim=$((n / 2)) ;;
  esac
  for ((i = 0; i < n; i++)); do
    rm -f "$DIR/f$i"
    mkfifo "$DIR/f$i"
    : > "$DIR/r$i.err"
    "$DIR/drain" -rate "${rates[i]}" < "$DIR/f$i" > "$DIR/d$i" &
    drains[i]=$!
    # shellcheck disable=SC2086
    "$bin/rdmarecv" -v --transport "$TRANSPORT" --bind "$ADDR" --port $((PORT + i)) --relay \
      --relay-allow "$ADDR/8" --key-file "$DIR/key" $RECV_FLAGS > "$DIR/f$i" 2> "$DIR/r$i.err" &
    pids[i]=$!
    to+="${to:+,}$ADDR:$((PORT + i))"
  done
  for ((i = 0; i < n; i++)); do
    until grep -q "listening on" "$DIR/r$i.err"; do
      kill -0 "${pids[i]}" 2>/dev/null || { cat "$DIR/r$i.err" >&2; return 1; }
      sleep 0.05
    done
  done
  t0=$(date +%s.%N)
  "$bin/rdmasend" --transport "$TRANSPORT" --key-file "$DIR/key" --to "$to" < "$DIR/fleet-src" 2> "$DIR/s.err" &
  local sender=$!
  if [ "$victim" -ge 0 ]; then
    sleep "$(awk -v t="$alike" 'BEGIN { print t / 4 }')"
    kill -KILL "${pids[victim]}" 2>/dev/null || true
  fi
  wait "$sender" || status=$?
  local st=()
  for ((i = 0; i < n; i++)); do
    st[i]=0
    wait "${pids[i]}" || st[i]=$?
    wait "${drains[i]}" || true
  done
  printf '%s' "$status"
  for ((i = 0; i < n; i++)); do
    if [ "$i" = "$victim" ]; then
      printf ' killed'
    elif [ "${st[i]}" = 0 ] && read -r b h t < "$DIR/d$i" && [ "$b" = "$FLEET_BYTES" ] && [ "$h" = "$FLEET_HASH" ]; then
      awk -v a="$t0" -v z="$t" 'BEGIN { printf " %.3f", z - a }'
    else
      printf ' fail'
      echo "fleet $kase: host $((i + 1)) (exit ${st[i]}): $(tail -n 2 "$DIR/r$i.err" | tr '\n' ' ')" >&2
    fi
  done
  echo
}

# fleet_medians FILE: the median of each column of FILE's lines (a column with any
# "fail" or "killed" in it prints that word)
fleet_medians() {
  awk '{ for (i = 1; i <= NF; i++) v[i, NR] = $i; nf = NF } END {
    for (i = 1; i <= nf; i++) {
      m = 0; bad = ""
      for (r = 1; r <= NR; r++) { if (v[i, r] !~ /^[0-9.]+$/) bad = v[i, r]; else c[++m] = v[i, r] + 0 }
      if (bad != "" && i > 1) { printf "%s%s", (i > 1 ? " " : ""), bad; continue }
      if (i == 1) { s = ""; for (r = 1; r <= NR; r++) s = s (r > 1 ? "/" : "") v[1, r]; printf "%s", s; continue }
      for (a = 2; a <= m; a++) for (b = a; b > 1 && c[b - 1] > c[b]; b--) { x = c[b]; c[b] = c[b - 1]; c[b - 1] = x }
      printf " %.3f", (m % 2) ? c[(m + 1) / 2] : (c[m / 2] + c[m / 2 + 1]) / 2
      delete c
    }
    print ""
  }' "$1"
}

# fleet_paired FILE REF: the median over the rounds of FILE's slowest host's time over
# REF's in the same round (the bins take turns within a round); "" unless every round of
# both has every host's time
fleet_paired() {
  paste -d '|' "$1" "$2" | awk -F'|' '
    function slowest(s,    f, n, i, m) { n = split(s, f, " "); m = 0; for (i = 2; i <= n; i++) { if (f[i] !~ /^[0-9.]+$/) return -1; if (f[i] > m) m = f[i] } return m }
    { a = slowest($1); b = slowest($2); if (a <= 0 || b <= 0) bad = 1; else r[++n] = a / b }
    END {
      if (bad || n == 0) exit
      for (i = 2; i <= n; i++) for (j = i; j > 1 && r[j - 1] > r[j]; j--) { x = r[j]; r[j] = r[j - 1]; r[j - 1] = x }
      printf "%.3f", (n % 2) ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
    }'
}

# fleet_round FILE BIN N CASE T_ALIKE SLOW_RATE: one fleet_run, its line appended to FILE
# and the CPU seconds of all its processes (sender, receivers, drains) to FILE.cpu: the
# change in bash's times for this shell's children (run here: a subshell's would count
# only its own)
fleet_round() {
  local f=$1
  shift
  times > "$f.t0"
  fleet_run "$@" >> "$f"
  times > "$f.t1"
  awk 'FNR == 2 { split($1, u, "m"); split($2, y, "m"); t[FILENAME] = u[1] * 60 + u[2] + y[1] * 60 + y[2] }
    END { printf "%.3f\n", t[ARGV[2]] - t[ARGV[1]] }' "$f.t0" "$f.t1" >> "$f.cpu"
}

fleet() {
  local n bin kase r alike slow cases=${FLEET_CASES:-alike slow two-slow killed slow-killed} first=${FLEET_BINS%% *}
  go build -o "$DIR/drain" ./bench/drain
  head -c "$FLEET_SIZE" /dev/urandom > "$DIR/fleet-src"
  head -c 32 /dev/urandom | base64 > "$DIR/key"
  FLEET_BYTES=$(stat -c %s "$DIR/fleet-src")
  read -r _ FLEET_HASH _ < <("$DIR/drain" < "$DIR/fleet-src")
  for n in $FLEET; do
    declare -A med=()
    for bin in $FLEET_BINS; do : > "$DIR/fleet-$n-alike-${bin//\//_}" > "$DIR/fleet-$n-alike-${bin//\//_}.cpu"; done
    for ((r = 0; r < RUNS; r++)); do
      for bin in $FLEET_BINS; do fleet_round "$DIR/fleet-$n-alike-${bin//\//_}" "$bin" "$n" alike 1 0; done
    done
    # the chain's time: the slowest host's median, all alike, with the first of FLEET_BINS
    alike=$(fleet_medians "$DIR/fleet-$n-alike-${first//\//_}" | awk '{ m = 0; for (i = 2; i <= NF; i++) if ($i > m) m = $i; print m }')
    slow=${SLOW_RATE:-$(awk -v b="$FLEET_BYTES" -v t="$alike" 'BEGIN { printf "%d", b / t / 4 }')}
    echo "broadcast: fleet of $n: all alike ${alike}s, slow hosts drain at $slow B/s" >&2
    for kase in $cases; do
      [ "$kase" = alike ] && continue
      for bin in $FLEET_BINS; do : > "$DIR/fleet-$n-$kase-${bin//\//_}" > "$DIR/fleet-$n-$kase-${bin//\//_}.cpu"; done
      for ((r = 0; r < RUNS; r++)); do
        for bin in $FLEET_BINS; do fleet_round "$DIR/fleet-$n-$kase-${bin//\//_}" "$bin" "$n" "$kase" "$alike" "$slow"; done
      done
    done
    echo
    echo "| fleet of $n, $TRANSPORT on $ADDR, $FLEET_BYTES bytes, median of $RUNS, slow = $slow B/s | bin | rdmasend exit | hosts 1-$n: s until a verified copy | fast hosts, slowest / all alike | slow hosts / size÷rate | slowest host / the first bin's, paired | CPU s, all processes |"
    echo "| --- | --- | --- | --- | ---: | ---: | ---: | ---: |"
    for kase in $cases; do
      for bin in $FLEET_BINS; do
        local ref
        ref=$(fleet_medians "$DIR/fleet-$n-alike-${bin//\//_}" | awk '{ m = 0; for (i = 2; i <= NF; i++) if ($i > m) m = $i; print m }')
        fleet_medians "$DIR/fleet-$n-$kase-${bin//\//_}" | awk -v k="$kase" -v b="$bin" -v ref="$ref" -v n="$n" \
          -v paired="$(fleet_paired "$DIR/fleet-$n-$kase-${bin//\//_}" "$DIR/fleet-$n-$kase-${first//\//_}")" \
          -v cpu="$(sort -n "$DIR/fleet-$n-$kase-${bin//\//_}.cpu" | awk '{ v[NR] = $1 } END { printf "%.2f", NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }')" \
          -v bound="$(awk -v s="$FLEET_BYTES" -v r="$slow" 'BEGIN { print s / r }')" '{
          slow[2] = (k ~ /slow/); slow[n - 1] = (k == "two-slow")
          fast = 0; sl = 0; hosts = ""
          for (i = 2; i <= NF; i++) {
            h = i - 1; hosts = hosts (h > 1 ? " " : "") $i
            if ($i !~ /^[0-9.]+$/) continue
            if (slow[h]) { if ($i > sl) sl = $i } else if ($i > fast) fast = $i
          }
          printf "| %s | %s | %s | %s | %.2f | %s | %s | %s |\n", k, b, $1, hosts, fast / ref, (sl > 0 ? sprintf("%.2f", sl / bound) : ""), paired, cpu
        }'
      done
    done
  done
}
part fleet && [ -n "$FLEET" ] && fleet
