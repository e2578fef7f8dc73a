#!/usr/bin/env bash
# bench/run.sh - rdmapipe's benchmark (`make bench`, after `make build`). Prints one
# markdown table per environment, every figure the median of RUNS runs, with ratios against
# the peers measured in the same run, then the project's targets with pass/miss, each
# saying which comparison it uses (wall/wall: everything a user waits for; own/own: the
# data-phase rates the tools report themselves; see bench/README.md):
#   1. host, TCP loopback: rdmasend/rdmarecv --transport tcp vs socat -u, nc and mbuffer,
#      SIZE bytes from `head -c SIZE /dev/zero |` into `> /dev/null` (and `| wc -c`), plus
#      rdmasend fed from a regular file in /dev/shm; then bench/latency.sh: first byte and
#      line latency, rdmasend/rdmarecv (auto and --transport tcp) vs nc; then
#      bench/ceiling.sh: each side's own ceiling without a network (BenchmarkCeiling),
#      unkeyed, keyed and encrypted, at GOMAXPROCS 1..nproc, RUNS rounds; then
#      bench/flood.sh: a keyed stream under pre-auth connect floods, FLOOD_RUNS rounds;
#      then bench/ratelimit.sh: rdmasend --limit-rate's achieved vs asked rate;
#      then bench/cp.sh (as root): rdmacp against scp and rsync -a through a private sshd,
#      one big file, 20,000 small files and 2,000 files of 1 MiB, CP_RUNS rounds;
#   2. the SoftRoCE VM (one boot, needs root): rdmasend/rdmarecv --transport rdma, pipe to
#      pipe and file (guest tmpfs) to /dev/null and to file, vs ib_send_bw -R at the same
#      message size (polling and -e events), rcopy (file to file), and socat and nc over
#      the guest's kernel TCP (nc also file to file), VM_SIZE bytes, both ends on $RXE_IP.
# The report goes to stdout and to bench/results/latest.md; progress lines go to stderr;
# the raw per-run measurements are kept in bench/results/latest-{host,vm}.tsv. Runs that
# fail (exit status, byte count) are left out of the medians and listed under the table.
#
# env:
#   RUNS       runs per tool and environment (default 5)
#   SIZE       bytes per host run (default 1G; K/M/G suffixes are binary)
#   VM_SIZE    bytes per VM run (default 256M, at least 8M; rxe under TCG moves ~40-50 MB/s,
#              and the VM holds the file-fed tools' source and destination in its 2 GiB of
#              RAM: <= 512M)
#   BENCH_HOST 0 skips the host part      BENCH_VM   0 skips the VM part
#   BENCH_LATENCY 0 skips the host's latency section (bench/latency.sh; LINES, GAP)
#   BENCH_CEILING 0 skips the host's ceiling section (bench/ceiling.sh; BENCHTIME, CPUS, PIN)
#   BENCH_FLOOD 0 skips the host's flood section (bench/flood.sh; FLOOD_RUNS rounds, default
#              10, of 7-35 s each per stream case of CASES; WAIT, FLOOD_SIZE)
#   BENCH_RATELIMIT 0 skips the host's --limit-rate section (bench/ratelimit.sh;
#              RATELIMIT_RUNS rounds, default 1, of SECONDS_PER_RUN, default 60, per rate of
#              RATES, default "10M 100M 1G")
#   BENCH_CP 0 skips the host's rdmacp section (bench/cp.sh; CP_RUNS rounds, default 3;
#              WORKLOADS; needs root, else a note)
#   HOST_TOOLS, VM_TOOLS  override the tool lists (names: see trial() in bench/lib.sh and
#              bench/README.md), e.g. VM_TOOLS="rdmapipe rdmapipe-send rdmapipe-64k
#              ib_send_bw-e ib_send_bw-e-64k" for the SEND data path and 64 KiB chunks
#   IB_SIZE    ib_send_bw's message size (default: the chunk rdmapipe negotiated in its
#              warm-up run, else 4M)
#   VM_TIMEOUT seconds before the VM is killed (default: from RUNS and VM_SIZE)
#   BENCH_REPORT  where the report goes (default bench/results/latest.md; the raw
#              measurements go beside it, as NAME-host.tsv, NAME-vm.tsv and NAME-latency.tsv,
#              and the ceiling's raw benchmark output as NAME-ceiling.txt)
#   RXE_WORK   the VM's shared work dir (default .cache/softroce; see test/softroce/README.md)
# Quick mode: RUNS=1 SIZE=256M VM_SIZE=32M bench/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
# shellcheck source=bench/lib.sh
. bench/lib.sh

RUNS=${RUNS:-5}
SIZE=${SIZE:-1G}
VM_SIZE=${VM_SIZE:-256M}
# The guest CPU model for every tool in the VM table (see test/softroce/README.md).
VM_CPU=${VM_CPU:-max,-erms,-fsrm}
BENCH_HOST=${BENCH_HOST:-1}
BENCH_VM=${BENCH_VM:-1}
BENCH_LATENCY=${BENCH_LATENCY:-1}
BENCH_CEILING=${BENCH_CEILING:-1}
BENCH_FLOOD=${BENCH_FLOOD:-1}
BENCH_RATELIMIT=${BENCH_RATELIMIT:-1}
BENCH_CP=${BENCH_CP:-1}
HOST_TOOLS=${HOST_TOOLS:-pipe rdmapipe rdmapipe-wc rdmapipe-file socat socat-wc nc mbuffer}
# Left out of the VM by default: rdmapipe-busy (--busy-poll on both sides: ~20 s per
# 256 MiB run), rdmapipe-send (--rdma-op send), rdmapipe-64k, ib_send_bw-e-64k, socat-wc
VM_TOOLS=${VM_TOOLS:-pipe rdmapipe rdmapipe-wc rdmapipe-file rdmapipe-f2f ib_send_bw ib_send_bw-e rcopy socat nc nc-f2f}
export RXE_WORK=${RXE_WORK:-$REPO/.cache/softroce}
[[ $RUNS =~ ^[1-9][0-9]*$ ]] || { echo "bench: RUNS must be a positive number" >&2; exit 2; }
HOST_BYTES=$(to_bytes "$SIZE")
VM_BYTES=$(to_bytes "$VM_SIZE")
if [ "$VM_BYTES" -lt $((8 * 1048576)) ]; then
  echo "bench: VM_SIZE must be at least 8M" >&2; exit 2
fi
if [ -n "${IB_SIZE:-}" ]; then to_bytes "$IB_SIZE" > /dev/null || exit 2; fi

REPORT=${BENCH_REPORT:-$REPO/bench/results/latest.md}
OUT=$RXE_WORK/bench             # shared with the VM: binaries, raw results
mkdir -p "$(dirname "$REPORT")" "$OUT"
bench_init "$(mktemp -d /tmp/rdmapipe-bench.XXXXXX)"
# the file-fed tools' source and destination: in tmpfs, like the VM's
FILE_DIR=$(mktemp -d /dev/shm/rdmapipe-bench.XXXXXX)
# shellcheck disable=SC2317  # called through the trap
cleanup() {
  kill_all_bg
  rm -rf "$SCRATCH" "$FILE_DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The host's tools (scripts/deps.sh installs what is missing; the VM's own packages,
# perftest and rdmacm-utils among them, come with test/softroce/deps.sh).
scripts/deps.sh time socat netcat-openbsd mbuffer iproute2
for f in bin/rdmasend bin/rdmarecv; do
  [ -x "$f" ] || { echo "bench: $f missing: run make build (or make bench)" >&2; exit 1; }
done
# A snapshot of the binaries, so that a concurrent `make build` cannot change them mid-run;
# in $RXE_WORK, where the VM sees them too.
BENCH_BIN=$OUT/bin
rm -rf "$BENCH_BIN"; mkdir -p "$BENCH_BIN"
cp bin/rdmasend bin/rdmarecv "$BENCH_BIN/"
rm -f "$OUT/host.tsv" "$OUT/vm.tsv" "$OUT/vm-meta" "$OUT/latency.md" "$OUT/latency.tsv" "$OUT/ceiling.md" "$OUT/ceiling.txt" \
  "$OUT/flood.md" "$OUT/flood.tsv" "$OUT/ratelimit.md" "$OUT/ratelimit.tsv" \
  "$OUT/cp.md" "$OUT/cp.tsv"

# ---- 1. host: TCP loopback ----------------------------------------------------------------
if [ "$BENCH_HOST" != 0 ]; then
  echo "bench: host, TCP loopback: $RUNS x $SIZE per tool: $HOST_TOOLS" >&2
  BENCH_TSV=$OUT/host.tsv
  : > "$BENCH_TSV"
  ADDR=127.0.0.1 RP_TRANSPORT=tcp RP_LISTEN=tcp
  TT=$((60 + HOST_BYTES / 5000000))
  # shellcheck disable=SC2086  # HOST_TOOLS is a list
  bench_env host "$HOST_BYTES" "$RUNS" $HOST_TOOLS
  rm -f "$FILE_DIR"/src.*   # up to SIZE of RAM
  if [ "$BENCH_LATENCY" != 0 ]; then
    # its own section of the report; a failure leaves a note there, not a failed bench
    RUNS=$RUNS BENCH_BIN=$BENCH_BIN LATENCY_TSV=$OUT/latency.tsv bench/latency.sh > "$OUT/latency.md" ||
      printf '## Latency and start-up (host, TCP loopback)\n\nbench/latency.sh failed (exit status %s): see its output on stderr.\n' "$?" > "$OUT/latency.md"
  fi
  if [ "$BENCH_CEILING" != 0 ]; then
    # the same: its own section, a note if it fails
    COUNT=$RUNS CEILING_RAW=$OUT/ceiling.txt bench/ceiling.sh > "$OUT/ceiling.md" ||
      printf "## Each side's own ceiling (no network)\n\nbench/ceiling.sh failed (exit status %s): see its output on stderr.\n" "$?" > "$OUT/ceiling.md"
  fi
  if [ "$BENCH_FLOOD" != 0 ]; then
    # the same: its own section, a note if it fails
    RUNS=${FLOOD_RUNS:-10} BENCH_BIN=$BENCH_BIN FLOOD_TSV=$OUT/flood.tsv bench/flood.sh > "$OUT/flood.md" ||
      printf '## Pre-auth connect flood (host, TCP loopback)\n\nbench/flood.sh failed (exit status %s): see its output on stderr.\n' "$?" > "$OUT/flood.md"
  fi
  if [ "$BENCH_RATELIMIT" != 0 ]; then
    # the same: its own section, a note if it fails
    RUNS=${RATELIMIT_RUNS:-1} BENCH_BIN=$BENCH_BIN RATELIMIT_TSV=$OUT/ratelimit.tsv bench/ratelimit.sh > "$OUT/ratelimit.md" ||
      printf '## --limit-rate (host, TCP loopback)\n\nbench/ratelimit.sh failed (exit status %s): see its output on stderr.\n' "$?" > "$OUT/ratelimit.md"
  fi
  if [ "$BENCH_CP" != 0 ]; then
    # the same: its own section, a note if it fails (or without root)
    RUNS=${CP_RUNS:-3} BENCH_BIN=bin CP_TSV=$OUT/cp.tsv bench/cp.sh > "$OUT/cp.md" ||
      printf '## rdmacp against scp and rsync -a\n\nbench/cp.sh failed (exit status %s): see its output on stderr.\n' "$?" > "$OUT/cp.md"
  fi
fi

# ---- 2. the SoftRoCE VM ---------------------------------------------------------------------
VM_STATUS=skipped
if [ "$BENCH_VM" != 0 ]; then
  if [ "$(id -u)" != 0 ]; then
    VM_STATUS="not run: the SoftRoCE VM needs root"
    echo "bench: $VM_STATUS" >&2
  else
    ntools=$(wc -w <<<"$VM_TOOLS")
    # generous: boot, plus every run at 5 MB/s with 15 s of set-up
    vm_timeout=${VM_TIMEOUT:-$((120 + ntools * (RUNS + 1) * (VM_BYTES / 5000000 + 15)))}
    echo "bench: SoftRoCE VM: $RUNS x $VM_SIZE per tool: $VM_TOOLS (VM_TIMEOUT $vm_timeout s)" >&2
    st=0
    # the guest's output is progress only: to stderr, with the harness's own lines
    VM_CPU=$VM_CPU VM_TIMEOUT=$vm_timeout test/softroce/vm-run.sh env \
      BENCH_OUT="$OUT" BENCH_BIN="$BENCH_BIN" RUNS="$RUNS" VM_BYTES="$VM_BYTES" VM_TOOLS="$VM_TOOLS" \
      IB_SIZE="${IB_SIZE:-}" \
      "$REPO/bench/vm-guest.sh" >&2 || st=$?
    if [ "$st" = 0 ]; then
      VM_STATUS=ok
    else
      VM_STATUS="failed (vm-run.sh exit status $st; see $RXE_WORK/last-output.log)"
      echo "bench: the VM part $VM_STATUS" >&2
    fi
  fi
fi

# ---- 3. report --------------------------------------------------------------------------------
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
# read-only: no optional index refresh
if [ -n "$(GIT_OPTIONAL_LOCKS=0 git status --porcelain --untracked-files=no 2>/dev/null)" ]; then
  commit=$commit-dirty
fi
vm_meta() { sed -n "s/^$1=//p" "$OUT/vm-meta" 2>/dev/null; }
ver() { dpkg-query -W -f '${Version}' "$1" 2>/dev/null || echo "?"; }

report() {
  echo "# rdmapipe benchmark"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1), kernel $(uname -r)"
  echo "- Go: $(go version 2>/dev/null | sed 's/^go version //' || echo '?'); rdmapipe commit $commit"
  echo "- peers: socat $(ver socat), netcat-openbsd $(ver netcat-openbsd), mbuffer $(ver mbuffer), perftest $(ver perftest), rdmacm-utils $(ver rdmacm-utils)"
  echo "- VM CPU model (qemu TCG -cpu): $VM_CPU, the same for every tool"
  echo "- RUNS=$RUNS (every figure is the median of the successful runs), host SIZE=$SIZE, VM_SIZE=$VM_SIZE"
  if [ "$VM_STATUS" = ok ]; then
    echo "- VM: qemu TCG, $(vm_meta nproc) vCPUs, $(vm_meta mem_mib) MiB, guest kernel $(vm_meta kernel), rxe0 on dummy0, active MTU $(vm_meta mtu)"
  else
    echo "- VM: $VM_STATUS"
  fi
  echo "- MB = 10^6 bytes, GiB = 2^30 bytes. MB/s (wall): bytes / wall time from the sender's start until both sides have exited."
  echo "  MB/s (own): the rate the tool reports itself, data phase only (rdmasend --stats-json, ib_send_bw's BW average, rcopy)."
  echo "  CPU: user+sys seconds of the tool alone (GNU time), per GiB moved; RSS: peak resident set (GNU time %M)."
  echo "  The sender and the receiver share the machine's $(nproc) CPUs (the VM's 2 vCPUs in the VM)."
  echo
  local files=()
  if [ -s "$OUT/host.tsv" ]; then files+=("$OUT/host.tsv"); fi
  if [ -s "$OUT/vm.tsv" ]; then files+=("$OUT/vm.tsv"); fi
  if [ ${#files[@]} = 0 ]; then
    echo "No measurements."
  else
    awk -F'\t' -v host_size="$SIZE" -v vm_size="$VM_SIZE" -f bench/report.awk "${files[@]}"
  fi
  local e
  for e in latency ceiling flood ratelimit cp; do
    if [ -s "$OUT/$e.md" ]; then
      echo
      cat "$OUT/$e.md"
    fi
  done
}

report | tee "$REPORT.tmp"
mv "$REPORT.tmp" "$REPORT"
for e in host vm latency flood ratelimit cp; do
  if [ -s "$OUT/$e.tsv" ]; then cp "$OUT/$e.tsv" "${REPORT%.md}-$e.tsv"; else rm -f "${REPORT%.md}-$e.tsv"; fi
done
if [ -s "$OUT/ceiling.txt" ]; then cp "$OUT/ceiling.txt" "${REPORT%.md}-ceiling.txt"; else rm -f "${REPORT%.md}-ceiling.txt"; fi
echo "bench: written to $REPORT" >&2
