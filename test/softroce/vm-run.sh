#!/bin/bash
# vm-run.sh - run one command inside a throw-away qemu VM that has a real RDMA device:
# Debian's own kernel with SoftRoCE (rdma_rxe), booted with the host's / as its root
# filesystem, so host-built binaries (cgo + libibverbs/librdmacm included), perftest,
# rping ... run unchanged inside it.
#
# usage: test/softroce/vm-run.sh CMD [ARGS...]      (as root)
#   Runs CMD in the guest, in the same current directory, and exits with its status
#   (98 if the guest never reported one, 99 if the VM could not be started at all).
#   Inside the guest: RXE_DEV=rxe0 RXE_IP=10.0.3.1 (rxe on dummy0) and RXE_WORK are set;
#   with VM_WIRE=1 also the two-host wire (wire.sh): WIRE_A=10.0.9.1 (rxeA on vethA),
#   WIRE_B=10.0.9.2 (rxeB on vethB), WIRE_DEV_A, WIRE_DEV_B and WIRE_SCRIPT.
#   See README.md beside this file for the guest's filesystem and the known facts.
#
# Output: the command's stdout and stderr (merged, through a virtio console) arrive live on
# this script's stdout; the harness's own lines go to stderr; kernel messages go to a log
# only. After the run, $RXE_WORK/last-output.log holds the command's output,
# last-console.log the kernel console and last-dmesg.log the guest's kernel log.
#
# env:
#   RXE_WORK    read-write dir shared with the guest at the same path: put binaries and
#               fixtures here. Default: .cache/softroce in the checkout (git-ignored).
#   RXE_CACHE   kernel + initramfs cache, shared by all checkouts on the machine.
#               Default: /var/cache/rdmapipe-softroce.
#   VM_TIMEOUT  seconds before the VM is killed (default 600; then exit 98)
#   SMP, MEM    guest CPUs and memory (default 2, 2G)
#   VM_ACCEL    tcg (default) or kvm
#   VM_ENV      names of host variables to pass into the guest, e.g. VM_ENV="CI GOFLAGS"
#               (the guest does not inherit the host's environment; PATH is passed)
#   VM_LOG      also copy the command's output to this file
#   VM_WIRE     1: set up the two-host wire (wire.sh up) before running the command
#   VM_SIW      1: also a soft-iWARP device, SIW_DEV=siw0 SIW_IP=10.0.5.1 (siw on dummy1);
#               siw.ko is built out of tree once per kernel (needs gcc, make, the mirror)
set -euo pipefail
export LC_ALL=C   # stable tool output and a '.' in $EPOCHREALTIME

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$HERE/../.." && pwd)
T0=$EPOCHREALTIME

log() { echo "[vm-run $(date +%T)] $*" >&2; }
since() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1fs", b - a }'; }  # elapsed
die() { log "error: $*"; exit 99; }

TMPS=()   # temporary files and dirs, removed on exit
QPID=     # timeout+qemu, while running
RPID=     # follow-output.pl, while running
# shellcheck disable=SC2317  # called through the trap
cleanup() {
  if [ -n "$QPID" ]; then kill "$QPID" 2>/dev/null; wait "$QPID" 2>/dev/null; fi
  if [ -n "$RPID" ]; then touch "$RUN/qemu-done"; wait "$RPID" 2>/dev/null; fi
  rm -rf "${TMPS[@]}"
}
trap cleanup EXIT
trap 'log "interrupted"; exit 130' INT
trap 'log "terminated"; exit 143' TERM

[ $# -ge 1 ] || { sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2; exit 2; }
[ "$(id -u)" = 0 ] || die "must run as root (qemu shares / with the guest, apt installs packages)"

# 1. host packages -------------------------------------------------------------------
# shellcheck source=deps.sh
. "$HERE/deps.sh"
softroce_install_deps || die "could not install the required packages (see above)"
command -v qemu-system-x86_64 >/dev/null || die "qemu-system-x86_64 not found (package qemu-system-x86)"
BUSYBOX=$(command -v busybox) || die "busybox not found (package busybox-static)"
if ldd "$BUSYBOX" >/dev/null 2>&1; then die "$BUSYBOX is not static: install busybox-static"; fi

# 2. directories -----------------------------------------------------------------------
# Both paths end up on the kernel command line and in qemu options: no whitespace, no commas.
WORK=${RXE_WORK:-$REPO/.cache/softroce}
CACHE=${RXE_CACHE:-/var/cache/rdmapipe-softroce}
mkdir -p "$WORK" "$CACHE"
WORK=$(cd "$WORK" && pwd -P)
CACHE=$(cd "$CACHE" && pwd -P)
case "$WORK$CACHE" in *[[:space:],]*) die "RXE_WORK/RXE_CACHE must not contain whitespace or commas";; esac
case "$WORK" in /|/proc*|/sys*|/dev*|/run*) die "RXE_WORK=$WORK is not usable (hidden in the guest)";; esac

# 3. guest kernel, cached: the image linux-image-amd64 depends on, unpacked (never
#    installed) into $CACHE/kernel/$KVER. A lock serializes concurrent runs.
exec 9>"$CACHE/.lock"
flock 9

# The image package linux-image-amd64 depends on. apt-cache takes ~0.7 s, so the answer is
# remembered until the package lists change (apt-get update renames files into the lists
# dir, which updates its mtime).
kernel_pkg() {
  local lists memo=$CACHE/kernel-pkg pkg
  lists=$(apt-config shell L Dir::State::lists/d | sed -n "s/^L='\(.*\)'$/\1/p")
  if [ -s "$memo" ] && [ -d "$lists" ] && [ "$memo" -nt "$lists" ]; then cat "$memo"; return; fi
  pkg=$({ apt-cache depends linux-image-amd64 2>/dev/null || true; } |
        awk '/Depends: linux-image-[0-9]/ {print $2; exit}')
  if [ -n "$pkg" ]; then echo "$pkg" > "$memo"; else rm -f "$memo"; fi
  echo "$pkg"
}
# newest complete cached kernel, for when apt cannot tell or fetch a newer one
cached_kver() { { ls -1 "$CACHE/kernel"/*/.complete 2>/dev/null || true; } | awk -F/ '{print $(NF-1)}' | sort -V | tail -n 1; }

# fetch_kernel PKG: download PKG and unpack it into $CACHE/kernel/<version>; on success the
# trees and initramfs images of other versions are dropped (one kernel is ~400 MB unpacked)
fetch_kernel() {
  local pkg=$1 kver=${1#linux-image-} tmp out
  tmp=$(mktemp -d "$CACHE/fetch.XXXXXX")
  TMPS+=("$tmp")
  # apt-get download, as root, warns that user _apt cannot write here: harmless, hidden
  if ! out=$(cd "$tmp" && apt-get -q download "$pkg" 2>&1); then
    grep -v -e unsandboxed -e '^Get:' <<<"$out" >&2
    rm -rf "$tmp"; return 1
  fi
  if ! dpkg -x "$tmp/${pkg}"_*.deb "$tmp/tree" || ! depmod -b "$tmp/tree" "$kver" ||
     [ ! -f "$tmp/tree/boot/vmlinuz-$kver" ]; then
    log "cannot unpack $pkg"
    rm -rf "$tmp"; return 1
  fi
  # the package version (6.1.192-2): linux-source and the headers of the same version
  # build siw.ko (VM_SIW=1)
  dpkg-deb -f "$tmp/${pkg}"_*.deb Version > "$tmp/tree/.version"
  touch "$tmp/tree/.complete"
  rm -rf "${CACHE:?}/kernel"; mkdir -p "$CACHE/kernel"
  rm -f "$CACHE"/initrd-*.gz
  mv "$tmp/tree" "$CACHE/kernel/$kver"
  rm -rf "$tmp"   # the .deb is not kept: the unpacked tree is the cache
}

KPKG=$(kernel_pkg)
if [ -z "$KPKG" ] && [ -z "$(cached_kver)" ]; then
  # no package lists (fresh machine): refresh them once and ask again
  softroce_apt_update || true
  KPKG=$(kernel_pkg)
fi
if [ -n "$KPKG" ] && [ ! -f "$CACHE/kernel/${KPKG#linux-image-}/.complete" ]; then
  log "downloading $KPKG into $CACHE"
  if ! fetch_kernel "$KPKG"; then
    # stale lists name a file the mirror no longer has: refresh once and retry
    if softroce_apt_update; then
      KPKG=$(kernel_pkg)
      if [ -n "$KPKG" ] && ! fetch_kernel "$KPKG"; then log "download of $KPKG failed"; fi
    else
      log "download of $KPKG failed"
    fi
  fi
fi
KVER=${KPKG#linux-image-}
if [ -z "$KPKG" ] || [ ! -f "$CACHE/kernel/$KVER/.complete" ]; then
  KVER=$(cached_kver)
  [ -n "$KVER" ] || die "no guest kernel: cannot resolve or download linux-image-amd64 (network? apt sources?)"
  log "using the cached kernel $KVER"
fi
KDIR=$CACHE/kernel/$KVER

# 3b. soft-iWARP (VM_SIW=1): Debian's kernel config has CONFIG_RDMA_SIW unset, so siw.ko is
#     built out of tree from linux-source and linux-headers of the kernel's own version and
#     kept in the kernel tree (lib/modules/$KVER/updates/siw.ko, depmod'ed: the guest loads
#     it with modprobe siw). The downloads (~150 MB) are dropped after the build.
SIW_KO=$KDIR/lib/modules/$KVER/updates/siw.ko
# build_siw: builds $SIW_KO; ~1 min on a fresh machine (download, unpack, compile)
build_siw() {
  local ver ser=${KVER%%-*} tmp hdr out d
  ser=${ser%.*}   # 6.1.0-56-amd64 -> 6.1
  ver=$(cat "$KDIR/.version" 2>/dev/null) ||
    ver=$(apt-cache show --no-all-versions "linux-image-$KVER" 2>/dev/null | awk '/^Version:/ {print $2; exit}')
  [ -n "$ver" ] || { log "siw: cannot tell the version of linux-image-$KVER"; return 1; }
  log "building siw.ko for $KVER ($ver) from linux-source-$ser"
  tmp=$(mktemp -d "$CACHE/siw.XXXXXX")
  TMPS+=("$tmp")
  if ! out=$(cd "$tmp" && apt-get -q download "linux-headers-$KVER=$ver" "linux-headers-${KVER%-*}-common=$ver" \
               "linux-kbuild-$ser=$ver" "linux-source-$ser=$ver" 2>&1); then
    grep -v -e unsandboxed -e '^Get:' <<<"$out" >&2
    return 1
  fi
  hdr=$tmp/hdr
  for d in "$tmp"/linux-headers-*.deb "$tmp"/linux-kbuild-*.deb; do dpkg -x "$d" "$hdr" || return 1; done
  # the headers' Makefile includes the common headers by their absolute /usr/src path
  sed -i "s#include /usr/src/#include $hdr/usr/src/#" "$hdr/usr/src/linux-headers-$KVER/Makefile"
  dpkg-deb --fsys-tarfile "$tmp"/linux-source-"$ser"_*.deb | tar -xO "./usr/src/linux-source-$ser.tar.xz" |
    tar -xJ -C "$tmp" --wildcards "linux-source-$ser/drivers/infiniband/sw/siw/*" || return 1
  make -s -C "$hdr/usr/src/linux-headers-$KVER" M="$tmp/linux-source-$ser/drivers/infiniband/sw/siw" \
    CONFIG_RDMA_SIW=m modules >&2 || return 1
  mkdir -p "${SIW_KO%/*}"
  cp "$tmp/linux-source-$ser/drivers/infiniband/sw/siw/siw.ko" "$SIW_KO.tmp" || return 1
  mv "$SIW_KO.tmp" "$SIW_KO"
  depmod -b "$KDIR" "$KVER" || return 1
  rm -rf "$tmp"
}
if [ "${VM_SIW:-0}" = 1 ] && [ ! -f "$SIW_KO" ]; then
  T2=$EPOCHREALTIME
  if ! build_siw; then
    # the package lists may be stale (the mirror moved on): refresh once and retry
    softroce_apt_update && build_siw || die "cannot build siw.ko for $KVER (VM_SIW=1)"
  fi
  log "siw.ko built in $(since "$T2")"
fi

# 4. initramfs, cached by content: static busybox, /init, the modules in dependency order
# veth and sch_netem: the two-host wire (wire.sh) and its faults
MODULES="virtio_pci virtio_console 9pnet_virtio 9p overlay dummy veth sch_netem rdma_rxe rdma_ucm crc32_generic crc32c_generic libcrc32c"
KEY=$( { echo "$KVER $MODULES"; cat "$HERE/init"; sha256sum "$BUSYBOX"; } | sha256sum | cut -c1-16)
INITRD=$CACHE/initrd-$KVER-$KEY.gz
if [ ! -f "$INITRD" ]; then
  ST=$(mktemp -d "$CACHE/initrd.XXXXXX")
  TMPS+=("$ST" "$ST.gz")
  mkdir -p "$ST"/{bin,proc,sys,dev,modules}
  cp "$BUSYBOX" "$ST/bin/busybox"
  install -m 755 "$HERE/init" "$ST/init"
  for m in $MODULES; do
    modprobe -d "$KDIR" -S "$KVER" --show-depends --ignore-install "$m" ||
      die "module $m not found in $KVER"
  done | awk '$1 == "insmod" && !seen[$2]++ {print $2}' | while read -r ko; do
    b=$(basename "$ko")
    case "$b" in
      *.ko.xz) xz -dc "$ko" > "$ST/modules/${b%.xz}"; b=${b%.xz} ;;
      *)       cp "$ko" "$ST/modules/$b" ;;
    esac
    echo "$b" >> "$ST/modules/order"
  done
  (cd "$ST" && find . | cpio -o -H newc --quiet) | gzip -1 > "$ST.gz"
  rm -rf "$ST"
  mv "$ST.gz" "$INITRD"
fi
# images built from other versions of init (other checkouts) stay while in use
touch "$INITRD"
find "$CACHE" -maxdepth 1 -name 'initrd-*.gz' -mtime +7 -delete
flock -u 9

# 5. this run's dir inside the work dir: guest scripts in, exit status and logs out ------
RUN=$(mktemp -d "$WORK/run.XXXXXX")
TMPS+=("$RUN")

TOKEN="@@vm-run-$(basename "$RUN")@@"
cp "$HERE/guest.sh" "$HERE/wire.sh" "$RUN/"
{
  printf 'VMRUN_TOKEN=%q\n' "$TOKEN"
  printf 'export PATH=%q\n' "$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
  printf 'export RXE_WORK=%q\n' "$WORK"
  printf 'VM_WIRE=%q\n' "${VM_WIRE:-0}"
  printf 'VM_SIW=%q\n' "${VM_SIW:-0}"
  for v in ${VM_ENV:-}; do
    if [ -n "${!v+set}" ]; then printf 'export %s=%q\n' "$v" "${!v}"; fi
  done
} > "$RUN/vars"
{
  printf 'cd %q || { echo "vm-run: cannot cd to %q in the guest" >&2; exit 97; }\n' "$PWD" "$PWD"
  printf '%q ' "$@"; echo
} > "$RUN/cmd"
printf '#!/bin/sh\n# kernel module helper for the guest: the unpacked kernel tree on the host\nexec /sbin/modprobe -d %q "$@"\n' \
  "$KDIR" > "$RUN/modprobe"
chmod 755 "$RUN/modprobe"

# 6. boot -------------------------------------------------------------------------------
# shellcheck disable=SC2054  # commas inside qemu arguments
case "${VM_ACCEL:-tcg}" in
  tcg) ACCEL=(-accel tcg,thread=multi -cpu "${VM_CPU:-max}") ;;   # multi-threaded TCG: -smp 2 really runs 2 vCPUs
  kvm) ACCEL=(-accel kvm -cpu max) ;;   # -cpu host fails on nested KVM here
  *)   die "VM_ACCEL must be tcg or kvm" ;;
esac
log "prepared in $(since "$T0"); booting $KVER (${VM_ACCEL:-tcg}, ${SMP:-2} CPUs, ${MEM:-2G})"
T1=$EPOCHREALTIME

# Two channels out of the guest, both written by qemu to files in the run dir:
#  - ttyS0, the kernel's console (boot messages, init's errors, kernel warnings):
#    console.log, shown when the guest fails to report;
#  - hvc0, a virtio console (much faster than the emulated UART: MB/s, not 250 KB/s): the
#    command's stdout+stderr and guest.sh's harness lines: output.raw, which
#    follow-output.pl routes live to our stdout (the command's output, also copied to
#    output.log) and stderr (harness lines).
# qemu runs in the background and this shell waits for it, so that INT/TERM sent to this
# script are handled at once: the EXIT trap stops the VM (timeout forwards the signal).
perl "$HERE/follow-output.pl" "$TOKEN" "$RUN/output.raw" "$RUN/qemu-done" "$RUN/output.log" &
RPID=$!
timeout -k 10 "${VM_TIMEOUT:-600}" qemu-system-x86_64 \
  "${ACCEL[@]}" -smp "${SMP:-2}" -m "${MEM:-2G}" \
  -nodefaults -no-user-config -display none -no-reboot \
  -serial "file:$RUN/console.log" \
  -device virtio-serial-pci -chardev "file,id=out,path=$RUN/output.raw" -device virtconsole,chardev=out \
  -kernel "$KDIR/boot/vmlinuz-$KVER" -initrd "$INITRD" \
  -append "console=ttyS0 quiet loglevel=3 panic=-1 rxe_work=$WORK vmrun=$RUN" \
  -virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap \
  -virtfs "local,path=$WORK,mount_tag=work,security_model=none,multidevs=remap" \
  </dev/null &
QPID=$!
qst=0
wait "$QPID" || qst=$?
QPID=
touch "$RUN/qemu-done"
wait "$RPID" || true
RPID=
log "VM ran $(since "$T1"), total $(since "$T0")"

# 7. results ------------------------------------------------------------------------------
# keep this run's logs as $WORK/last-*.log (and nothing stale from an earlier run)
logs=()
for f in output.log console.log dmesg; do
  dst=$WORK/last-${f%.log}.log
  rm -f "$dst"
  if [ -f "$RUN/$f" ]; then cp "$RUN/$f" "$dst"; logs+=("$dst"); fi
done
[ -n "${VM_LOG:-}" ] && [ -f "$RUN/output.log" ] && cp "$RUN/output.log" "$VM_LOG"

if [ -f "$RUN/exit-code" ]; then
  exit "$(cat "$RUN/exit-code")"
fi
if [ -f "$RUN/setup-error" ]; then
  log "guest setup failed: $(cat "$RUN/setup-error")"
elif [ "$qst" = 124 ] || [ "$qst" = 137 ]; then
  log "timed out after ${VM_TIMEOUT:-600}s (VM_TIMEOUT)"
else
  log "the guest never reported an exit status (qemu status $qst); console:"
  tail -n 30 "$RUN/console.log" >&2 2>/dev/null || true
fi
log "logs: ${logs[*]}"
exit 98
