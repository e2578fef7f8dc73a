#!/usr/bin/env bash
# bench/vm-guest.sh - the SoftRoCE half of `make bench`. bench/run.sh starts it inside the
# VM (test/softroce/vm-run.sh env VAR=... bench/vm-guest.sh); it runs every tool RUNS times
# between two processes of the guest over rxe0 ($RXE_IP, both ends) and writes its raw
# measurements to $BENCH_OUT/vm.tsv and a description of the guest to $BENCH_OUT/vm-meta.
#
# env (set by run.sh): BENCH_OUT (a dir in $RXE_WORK, shared with the host), BENCH_BIN
# (rdmasend/rdmarecv), RUNS, VM_BYTES, VM_TOOLS (space-separated, see trial() in lib.sh),
# IB_SIZE (optional: ib_send_bw's message size). From vm-run.sh: RXE_DEV, RXE_IP.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=bench/lib.sh
. "$HERE/lib.sh"

: "${BENCH_OUT:?} ${BENCH_BIN:?} ${RUNS:?} ${VM_BYTES:?} ${VM_TOOLS:?} ${RXE_DEV:?} ${RXE_IP:?}"

# Scratch files live in the guest's RAM (tmpfs): the file-fed tools' sources and
# destinations (rcopy, rdmapipe-file, rdmapipe-f2f, nc-f2f) must not go through 9p.
bench_init /dev/shm/rdmapipe-bench
trap 'kill_all_bg' EXIT
FILE_DIR=$SCRATCH

{
  echo "kernel=$(uname -r)"
  echo "nproc=$(nproc)"
  echo "mem_mib=$(awk '/^MemTotal:/ { printf "%d", $2 / 1024 }' /proc/meminfo)"
  echo "mtu=$(ibv_devinfo -d "$RXE_DEV" 2>/dev/null | awk '/active_mtu/ { print $2 $3; exit }')"
} > "$BENCH_OUT/vm-meta"

BENCH_TSV=$BENCH_OUT/vm.tsv
: > "$BENCH_TSV"
ADDR=$RXE_IP RP_TRANSPORT=rdma RP_LISTEN=cm
TT=$((60 + VM_BYTES / 2000000))   # per-side bound: 2 MB/s would be pathological
# shellcheck disable=SC2086  # VM_TOOLS is a list
bench_env vm "$VM_BYTES" "$RUNS" $VM_TOOLS
