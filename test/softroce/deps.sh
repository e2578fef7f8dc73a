#!/bin/bash
# deps.sh - install the Debian packages that the SoftRoCE VM harness (vm-run.sh) and the
# project's cgo build need. Idempotent: when everything is installed it only runs one
# dpkg-query and exits (a few milliseconds).
#
# usage: test/softroce/deps.sh          (as root, or with everything already installed)
#
# The package lists are refreshed ('apt-get update') at most once per run, and only when
# something has to be installed and the lists are missing, or when the first install attempt
# fails (stale lists point at files the mirror no longer has). A fresh CI machine has no
# lists at all, so its first run always updates.
#
# vm-run.sh sources this file to reuse softroce_apt_update (same once-only rule) for the
# kernel download; sourcing defines the functions and does nothing else.

SOFTROCE_PKGS=(
  qemu-system-x86 busybox-static kmod cpio xz-utils       # the VM and its initramfs
  rdma-core ibverbs-utils ibverbs-providers rdmacm-utils   # verbs stack + rxe provider
  perftest libibverbs-dev librdmacm-dev                    # benchmarks, cgo headers/libs
  iproute2 socat netcat-openbsd                            # ip/rdma tools, TCP baselines
  openssh-server openssh-client                            # rdmacp's tests: sshd in the guest
)

softroce_log() { echo "[softroce $(date +%T)] $*" >&2; }

softroce_apt() {
  # non-interactive, quiet, and wait for the dpkg lock instead of failing when another
  # apt (an engineer's, unattended-upgrades) holds it
  DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300 "$@"
}

# apt-get update, at most once per process (and its children, through the environment)
softroce_apt_update() {
  [ "${SOFTROCE_APT_UPDATED:-0}" = 1 ] && return 1
  export SOFTROCE_APT_UPDATED=1
  softroce_log "apt-get update"
  local out
  if ! out=$(softroce_apt update 2>&1); then
    echo "$out" >&2
    softroce_log "apt-get update failed"
    return 1
  fi
  # apt-get update exits 0 when some index could not be fetched: show why
  grep -E '^(W|E): ' <<<"$out" >&2 || true
}

# true when there are package lists at all (a fresh image or container has none)
softroce_have_lists() {
  compgen -G '/var/lib/apt/lists/*_Packages*' >/dev/null
}

softroce_missing_pkgs() {
  # one dpkg-query for all packages; absent ones are reported on stderr, hence 2>/dev/null
  local installed
  installed=$(dpkg-query -W -f='${Package} ${db:Status-Status}\n' "${SOFTROCE_PKGS[@]}" 2>/dev/null |
              awk '$2 == "installed" {print $1}')
  local p
  for p in "${SOFTROCE_PKGS[@]}"; do
    grep -qxF "$p" <<<"$installed" || echo "$p"
  done
}

softroce_install_deps() {
  local missing
  missing=$(softroce_missing_pkgs | tr '\n' ' ')
  missing=${missing% }
  [ -z "$missing" ] && return 0
  if [ "$(id -u)" != 0 ]; then
    softroce_log "missing packages: $missing; run as root to install them"
    return 1
  fi
  softroce_log "installing: $missing"
  if ! softroce_have_lists; then softroce_apt_update || return 1; fi
  local out
  # shellcheck disable=SC2086  # word splitting of the package list is intended
  if ! out=$(softroce_apt install --no-install-recommends $missing 2>&1); then
    # most likely stale lists: refresh once and try again
    if softroce_apt_update &&
       out=$(softroce_apt install --no-install-recommends $missing 2>&1); then
      :
    else
      echo "$out" | tail -n 20 >&2
      softroce_log "installing $missing failed"
      return 1
    fi
  fi
  softroce_log "installed: $missing"
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  set -euo pipefail
  softroce_install_deps
fi
