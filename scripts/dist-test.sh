#!/usr/bin/env bash
# Installs what `make dist` built into scratch roots, as a package manager
# does (the .deb with dpkg --root, the .rpm with rpm --root), checks that
# the binaries, man pages and completions landed, and runs the installed
# commands: rdmasend --version, and rdmasend --check against the installed
# rdmarecv on loopback. The tarball's binaries run --version too.
# Usage: scripts/dist-test.sh [DIST [LICENSE]]   (default: dist; LICENSE: the
# licence file the packages must ship, if the project has one)
set -euo pipefail
dist=${1:-dist}
license=${2:-}
fail() { echo "dist-test: $*" >&2; exit 1; }
one() { # the one file matching $1
  local m=( $1 )
  [ ${#m[@]} -eq 1 ] && [ -f "${m[0]}" ] || fail "want one $1, found: ${m[*]}"
  echo "${m[0]}"
}
deb=$(one "$dist/rdmapipe_*.deb")
rpm=$(one "$dist/rdmapipe-*.rpm")
tgz=$(one "$dist/rdmapipe_*.tar.gz")
scratch=$(mktemp -d)
recv_pid=""
cleanup() {
  [ -z "$recv_pid" ] || kill "$recv_pid" 2>/dev/null || true
  rm -rf "$scratch"
}
trap cleanup EXIT

# installed ROOT: the files every package must put under ROOT.
installed() {
  local root=$1 n
  for n in rdmasend rdmarecv rdmacp; do
    for f in usr/bin/$n usr/share/man/man1/$n.1.gz usr/share/bash-completion/completions/$n \
      usr/share/zsh/site-functions/_$n usr/share/fish/vendor_completions.d/$n.fish; do
      [ -s "$root/$f" ] || fail "$root: /$f missing or empty"
    done
    [ -x "$root/usr/bin/$n" ] || fail "$root: /usr/bin/$n not executable"
    grep -q "^\.TH $n 1" <<<"$(zcat "$root/usr/share/man/man1/$n.1.gz")" || fail "$root: $n.1.gz is not $n's man page"
  done
  if [ -n "$license" ]; then
    cmp -s "$license" "$root/usr/share/doc/rdmapipe/${license##*/}" || fail "$root: the licence ${license##*/} is missing or differs"
  fi
}

# version ROOT: the installed rdmasend says who it is.
version() {
  local out
  out=$("$1/usr/bin/rdmasend" --version) || fail "$1: rdmasend --version failed"
  [[ $out == "rdmasend "*"(github.com/rdmapipe/rdmapipe, revision "* ]] || fail "$1: rdmasend --version said: $out"
  echo "dist-test: $1: $out"
}

# The .deb: a real dpkg install (its database, its file list) into a root
# of its own; --force-depends since the scratch root has no libc6 package.
droot=$scratch/deb
mkdir -p "$droot/var/lib/dpkg/info" "$droot/var/lib/dpkg/updates"
: > "$droot/var/lib/dpkg/status"
dpkg --root="$droot" --force-depends -i "$deb" >/dev/null
# (the lists are read whole first: grep -q would quit at its match, and
# pipefail would take the lister's SIGPIPE for a failure)
list=$(dpkg --root="$droot" -L rdmapipe)
grep -qx /usr/bin/rdmasend <<<"$list" || fail "dpkg -L rdmapipe lacks /usr/bin/rdmasend"
installed "$droot"
version "$droot"

# --check from the installed commands: rdmarecv counts a check as no
# stream and keeps listening. listen PORT starts it there and waits
# (bounded) until it listens; it fails (1) if PORT is taken.
listen() {
  port=$1
  "$droot/usr/bin/rdmarecv" -P "$port" > /dev/null 2> "$scratch/recv.err" &
  recv_pid=$!
  for _ in $(seq 300); do
    [ -n "$(ss -ltnH "sport = :$port")" ] && return 0
    if ! kill -0 "$recv_pid" 2>/dev/null; then
      recv_pid=""
      grep -q "address already in use" "$scratch/recv.err" && return 1
      fail "rdmarecv exited: $(cat "$scratch/recv.err")"
    fi
    sleep 0.1
  done
  fail "rdmarecv did not listen on $port within 30 s"
}
# A port below Linux's ephemeral range (32768 up), another if it is taken.
for try in $(seq 10); do
  listen $(( 20000 + RANDOM % 12000 )) && break
  [ "$try" -lt 10 ] || fail "rdmarecv found no free port in 10 tries: $(cat "$scratch/recv.err")"
done
"$droot/usr/bin/rdmasend" --check "127.0.0.1:$port" > "$scratch/check.out" || fail "rdmasend --check exited $?: $(cat "$scratch/check.out")"
grep -q "^OK    tcp handshake" "$scratch/check.out" || fail "rdmasend --check made no TCP handshake: $(cat "$scratch/check.out")"
echo "dist-test: $(tail -n 1 "$scratch/check.out")"

# The .rpm: rpm's own install into a root with its own database.
rroot=$scratch/rpm
rpm --root "$rroot" --initdb
rpm --root "$rroot" -i --nodeps "$rpm"
list=$(rpm --root "$rroot" -ql rdmapipe)
grep -qx /usr/bin/rdmasend <<<"$list" || fail "rpm -ql rdmapipe lacks /usr/bin/rdmasend: $list"
installed "$rroot"
version "$rroot"

# The tarball: the binaries.
troot=$scratch/tgz
mkdir -p "$troot/usr"
tar -xzf "$tgz" -C "$troot/usr"
version "$troot"
echo "dist-test: OK: $deb, $rpm and $tgz install and run"
