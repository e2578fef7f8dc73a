#!/usr/bin/env bash
# bench/tune.sh - the evidence behind the default --chunk-size and --depth:
# streams SIZE bytes through real pipes (head -c SIZE /dev/zero | rdmasend,
# rdmarecv > /dev/null) for each chunk x depth pair and prints the median of
# RUNS of rdmasend's own rate (--stats-json) as a markdown table.
#
# usage: bench/tune.sh                 on the host, over TCP loopback
#        bench/tune.sh vm              in the SoftRoCE VM, over rdma (root)
# env:   SIZE (1G on the host, 128M in the VM), RUNS (3),
#        CHUNKS ("256K 1M 4M"), DEPTHS ("3 4 8")
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = vm ]; then
  export RXE_WORK=${RXE_WORK:-$PWD/.cache/softroce}
  dir=$RXE_WORK/tune
  mkdir -p "$dir"
  cp bin/rdmasend bin/rdmarecv bench/tune.sh "$dir/"
  exec test/softroce/vm-run.sh env SIZE="${SIZE:-128M}" RUNS="${RUNS:-3}" \
    CHUNKS="${CHUNKS:-256K 1M 4M}" DEPTHS="${DEPTHS:-3 4 8}" BIN="$dir" \
    bash "$dir/tune.sh" guest
fi

bin=${BIN:-$PWD/bin}
host=127.0.0.1 transport=tcp
if [ "${1:-}" = guest ]; then host=$RXE_IP transport=rdma; fi
size=${SIZE:-1G} runs=${RUNS:-3}
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT

# one CHUNK DEPTH PORT: rdmasend's own MB/s for one stream, or "-" if it failed
one() {
  "$bin/rdmarecv" --transport "$transport" --bind "$host" --port "$3" \
    --chunk-size "$1" --depth "$2" > /dev/null 2> "$work/recv.err" &
  local rpid=$!
  if head -c "$size" /dev/zero | timeout 300 "$bin/rdmasend" --transport "$transport" \
      --wait 10s --port "$3" --chunk-size "$1" --depth "$2" \
      --stats-json "$work/s.json" "$host" 2> "$work/send.err" && wait "$rpid"; then
    # --stats-json's rate is in MiB/s; this table's MB/s are 10^6 B/s
    sed -n 's/.*"mib_per_s": \([0-9.]*\).*/\1/p' "$work/s.json" | awk '{ printf "%.1f\n", $1 * 1.048576 }'
  else
    wait "$rpid" 2>/dev/null || true
    echo "-"
  fi
}

depths=${DEPTHS:-3 4 8}
echo "| chunk \\ depth | ${depths// / | } |"
echo "| --- |$(for _ in ${DEPTHS:-3 4 8}; do printf ' ---: |'; done)"
port=24000
for c in ${CHUNKS:-256K 1M 4M}; do
  row="| $c |"
  for d in ${DEPTHS:-3 4 8}; do
    rates=()
    for _ in $(seq "$runs"); do
      port=$((port + 1))
      rates+=("$(one "$c" "$d" "$port")")
    done
    med=$(printf '%s\n' "${rates[@]}" | grep -v '^-$' | sort -n | awk '{a[NR]=$1} END {print NR ? a[int((NR+1)/2)] : "-"}')
    row="$row $med |"
  done
  echo "$row"
done
echo
echo "MB/s (10^6 B/s), rdmasend's own rate, median of $runs; $size per stream over $transport to $host; $(date -u +%F)"
