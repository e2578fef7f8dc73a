#!/usr/bin/env bash
# bench/versions.sh - rdma throughput of two builds of rdmapipe in ONE SoftRoCE VM boot
# (`make bench-versions OLD=REV`): the commands built from git revision OLD and those of the
# working tree stream SIZE bytes over rxe0, RUNS times each, in the order old, new, new,
# old, ... (so a drift of the emulated machine's speed hits both alike). Prints each run's
# MB/s, the medians and the ratio new/old. Two boots of the same set-up can differ by ~40%,
# so only figures of one boot are compared.
#
# usage: bench/versions.sh OLD          (host side, as root; builds, then boots the VM)
#        bench/versions.sh --guest OLD_BIN NEW_BIN    (inside the VM)
# env:   SIZE (256M), RUNS (3), PORT (28950), VM_CPU (max,-erms,-fsrm, as the benchmarks),
#        EXTRA (flags for both sides, e.g. "--rdma-op send")
set -euo pipefail
export LC_ALL=C
SIZE=${SIZE:-256M} RUNS=${RUNS:-3} PORT=${PORT:-28950}

if [ "${1:-}" = --guest ]; then
  old=$2 new=$3
  dir=$(mktemp -d /dev/shm/versions.XXXXXX)
  trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$dir"' EXIT
  head -c "$SIZE" /dev/zero > "$dir/src"
  bytes=$(stat -c %s "$dir/src")
  # one BIN: one stream, prints MB/s from the sender's start until both sides exited
  one() {
    local bin=$1 r t0 t1 st=0
    rm -f "$dir/recv.json"
    # shellcheck disable=SC2086  # EXTRA is a list of flags
    timeout 300 "$bin/rdmarecv" -v --transport rdma --bind "$RXE_IP" --port "$PORT" ${EXTRA:-} \
      --stats-json "$dir/recv.json" > /dev/null 2> "$dir/recv.err" &
    r=$!
    until grep -q "listening on" "$dir/recv.err"; do
      kill -0 "$r" 2>/dev/null || { cat "$dir/recv.err" >&2; return 1; }
      sleep 0.05
    done
    t0=$EPOCHREALTIME
    # shellcheck disable=SC2086
    timeout 300 "$bin/rdmasend" -v --transport rdma --port "$PORT" ${EXTRA:-} "$RXE_IP" \
      < "$dir/src" 2> "$dir/send.err" || st=$?
    wait "$r" || st=$?
    t1=$EPOCHREALTIME
    [ "$st" = 0 ] || { echo "$bin: exit status $st" >&2; cat "$dir/send.err" "$dir/recv.err" >&2; return 1; }
    grep -q "\"bytes\": $bytes," "$dir/recv.json" || { echo "$bin: the receiver did not write $bytes bytes" >&2; return 1; }
    awk -v b="$bytes" -v a="$t0" -v z="$t1" 'BEGIN { printf "%.1f\n", b / 1e6 / (z - a) }'
  }
  median() { sort -n | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
  : > "$dir/old" ; : > "$dir/new"
  for ((i = 0; i < RUNS; i++)); do
    order="old new"; [ $((i % 2)) = 1 ] && order="new old"
    for v in $order; do
      b=$old; [ "$v" = new ] && b=$new
      m=$(one "$b") || exit 1
      echo "run $((i + 1)) $v: $m MB/s"
      echo "$m" >> "$dir/$v"
    done
  done
  mo=$(median < "$dir/old") mn=$(median < "$dir/new")
  echo "| rdma on $RXE_IP, $bytes bytes, ${EXTRA:-default flags} | old | new | new/old |"
  echo "| --- | ---: | ---: | ---: |"
  echo "| runs, MB/s | $(tr '\n' ' ' < "$dir/old") | $(tr '\n' ' ' < "$dir/new") | |"
  echo "| median, MB/s | $mo | $mn | $(awk -v a="$mn" -v b="$mo" 'BEGIN { printf "%.3f", a / b }') |"
  exit 0
fi

OLD=${1:?usage: bench/versions.sh OLD-REVISION}
cd "$(dirname "$0")/.."
export RXE_WORK=${RXE_WORK:-$PWD/.cache/softroce}
dir=$RXE_WORK/versions
rev=$(git rev-parse --short "$OLD^{commit}")
rm -rf "$dir/new" "$dir/src"
mkdir -p "$dir/new" "$dir/src" "$dir/old-$rev"
# the old commands: built from a clean export of the revision, once per revision
if [ ! -x "$dir/old-$rev/rdmasend" ]; then
  git archive "$rev" | tar -x -C "$dir/src"
  (cd "$dir/src" && go build -o "$dir/old-$rev/" ./cmd/rdmasend ./cmd/rdmarecv)
fi
go build -o "$dir/new/" ./cmd/rdmasend ./cmd/rdmarecv
rm -rf "$dir/src"
cp "$0" "$dir/versions.sh"
echo "old: $rev ($(git log -1 --format=%s "$rev" | cut -c1-70)); new: the working tree at $(git rev-parse --short HEAD)"
VM_CPU=${VM_CPU:-max,-erms,-fsrm} VM_ENV="SIZE RUNS PORT EXTRA" \
  test/softroce/vm-run.sh bash "$dir/versions.sh" --guest "$dir/old-$rev" "$dir/new"
