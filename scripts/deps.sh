#!/usr/bin/env bash
# Installs the packages rdmapipe needs to build (cgo against rdma-core) and
# test (rdmacp's tests run a real sshd and ssh, and start remote sides with
# pdsh and clush as cluster launchers; internal/cp/filter and internal/cp/quick
# compare their rules with rsync's own; test/docs runs the bash, zsh and fish
# completions) when they are missing.
# Debian/Ubuntu: apt-get; on RHEL-like systems install rdma-core-devel, gcc
# and openssh-server/-clients yourself.
set -euo pipefail
pkgs=(gcc libc6-dev pkg-config libibverbs-dev librdmacm-dev openssh-client openssh-server iproute2 pdsh clustershell acl attr rsync zsh fish "$@")
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if ! command -v apt-get >/dev/null; then
  echo "deps: missing ${missing[*]}: install rdma-core development files (e.g. rdma-core-devel) and gcc" >&2
  exit 1
fi
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
echo "deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
# A fresh machine has no package lists: update once when an install is needed.
$sudo apt-get update -qq >/dev/null
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
