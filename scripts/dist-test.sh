#!/usr/bin/env bash
# Installs what `make dist` built into scratch roots, as a package manager
# does (the .deb with dpkg --root, the .rpm with rpm --root), checks that
# the binaries, man pages and completions landed, and runs the installed
# commands: rdmasend --version, and rdmasend --check against the installed
# rdmarecv on loopback. The tarball's binaries run --version too. First it
# lints the packages as a distribution would: lintian on the .deb, rpmlint
# on the .rpm, failing on any error or warning that the overrides in
# PACKAGING (the .deb's lintian-overrides, rpmlint.toml) do not justify,
# and checks the binaries' hardening and that the .deb's copyright file
# names every Go module they link.
# Usage: scripts/dist-test.sh [DIST [LICENSE [PACKAGING]]]   (defaults: dist,
# LICENSE, packaging)
set -euo pipefail
dist=${1:-dist}
license=${2:-LICENSE}
packaging=${3:-packaging}
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
}

# hardened ROOT: the binaries are stripped position-independent
# executables with full RELRO (read-only relocations, bound at load).
hardened() {
  local n f
  for n in rdmasend rdmarecv rdmacp; do
    f=$1/usr/bin/$n
    grep -q "Type: *DYN" <<<"$(readelf -hW "$f")" || fail "$f: not position-independent"
    grep -q "GNU_RELRO" <<<"$(readelf -lW "$f")" || fail "$f: no RELRO"
    grep -q "BIND_NOW" <<<"$(readelf -dW "$f")" || fail "$f: not bound at load (-z now)"
    ! grep -q "\.symtab" <<<"$(readelf -SW "$f")" || fail "$f: not stripped"
  done
}

# copyrighted ROOT: every Go module the binaries link has its paragraph
# in the copyright file (Files: MODULE/*).
copyrighted() {
  local m copyright=$1/usr/share/doc/rdmapipe/copyright
  for m in $(go version -m "$1"/usr/bin/* | awk '$1 == "dep" { print $2 }' | sort -u); do
    grep -qx "Files: $m/\*" "$copyright" || fail "$copyright: no paragraph for the module $m"
  done
}

# lint: lintian and rpmlint, strict; what they print goes to the log.
lint() {
  local out
  out=$(lintian --fail-on error,warning --display-info --info "$deb" 2>&1) || fail "lintian $deb:"$'\n'"$out"
  echo "dist-test: lintian: ${out:-clean}"
  # rpmlint unpacks with cpio -id, which writes an absolute name (nfpm's
  # .rpm holds /usr/bin/rdmasend where rpmbuild's holds ./usr/bin/...) to
  # that path on this machine: the cpio it finds first keeps every name
  # under rpmlint's own directory.
  mkdir -p "$scratch/cpio"
  printf '#!/bin/sh\nexec /usr/bin/cpio --no-absolute-filenames "$@"\n' > "$scratch/cpio/cpio"
  chmod +x "$scratch/cpio/cpio"
  out=$(PATH="$scratch/cpio:$PATH" rpmlint --strict -c "$packaging/rpmlint.toml" "$rpm" 2>&1) || fail "rpmlint $rpm:"$'\n'"$out"
  echo "dist-test: rpmlint: $(tail -n 1 <<<"$out")"
}
lint

# version ROOT: the installed rdmasend says who it is.
version() {
  local out
  out=$("$1/usr/bin/rdmasend" --version) || fail "$1: rdmasend --version failed"
  [[ $out == "rdmasend "*"(github.com/rdmapipe/rdmapipe, revision "* ]] || fail "$1: rdmasend --version said: $out"
  echo "dist-test: $1: $out"
}

# The .deb: a real dpkg install (its database, its file list) into a root
# of its own; --force-depends since the scratch root has no libc6 package.
# Its postinst runs outside the root, with DPKG_ROOT (the root has no
# shell), and must make the service's user in the root's /etc/passwd.
droot=$scratch/deb
mkdir -p "$droot/var/lib/dpkg/info" "$droot/var/lib/dpkg/updates" "$droot/etc"
: > "$droot/var/lib/dpkg/status"
printf 'root:x:0:0:root:/root:/bin/sh\n' > "$droot/etc/passwd"
printf 'root:x:0:\n' > "$droot/etc/group"
: > "$droot/etc/shadow"
: > "$droot/etc/gshadow"
dpkg --root="$droot" --force-depends --force-script-chrootless -i "$deb" >/dev/null
grep -q '^rdmapipe:x:[0-9]*:[0-9]*:.*:/usr/sbin/nologin$' "$droot/etc/passwd" || fail "the postinst made no user rdmapipe: $(cat "$droot/etc/passwd")"
# (the lists are read whole first: grep -q would quit at its match, and
# pipefail would take the lister's SIGPIPE for a failure)
list=$(dpkg --root="$droot" -L rdmapipe)
grep -qx /usr/bin/rdmasend <<<"$list" || fail "dpkg -L rdmapipe lacks /usr/bin/rdmasend"
installed "$droot"
cmp -s "$packaging/copyright" "$droot/usr/share/doc/rdmapipe/copyright" || fail "$droot: the copyright file is missing or differs"
hardened "$droot"
copyrighted "$droot"
version "$droot"

# service: the rdmarecv@ unit verifies (systemd-analyze verify of an
# instance "test", with its ExecStart's command in the root, silent), and
# that command runs as systemd would run it: the installed rdmarecv with
# the variables of /etc/rdmapipe/test.env (written from the packaged
# example) in the service's working directory, which then holds each
# stream, whole.
service() {
  local unit=$droot/lib/systemd/system/rdmarecv@.service env=$droot/etc/rdmapipe/test.env out
  [ -s "$unit" ] || fail "$unit missing"
  mkdir -p "$scratch/units"
  sed "s|^ExecStart=/usr/bin/|ExecStart=$droot/usr/bin/|" "$unit" > "$scratch/units/rdmarecv@test.service"
  out=$(systemd-analyze verify --man=no "$scratch/units/rdmarecv@test.service" 2>&1) || fail "systemd-analyze verify rdmarecv@test.service:"$'\n'"$out"
  [ -z "$out" ] || fail "systemd-analyze verify rdmarecv@test.service says:"$'\n'"$out"
  head -c 32 /dev/urandom | base64 > "$droot/etc/rdmapipe/test.key"
  chmod 600 "$droot/etc/rdmapipe/test.key"
  sed -e "s|^RDMARECV_OPTS=.*|RDMARECV_OPTS=--key-file $droot/etc/rdmapipe/test.key|" \
    "$droot/usr/share/doc/rdmapipe/examples/rdmarecv.env" > "$env"
  mkdir -p "$droot/var/lib/rdmapipe/test"
  local exec_start
  exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
  for try in $(seq 10); do
    listen $(( 20000 + RANDOM % 12000 )) "$exec_start" "$env" && break
    [ "$try" -lt 10 ] || fail "the service found no free port in 10 tries: $(cat "$scratch/recv.err")"
  done
  local data=$scratch/data
  head -c 3000000 /dev/urandom > "$data"
  for n in 1 2; do
    "$droot/usr/bin/rdmasend" --key-file "$droot/etc/rdmapipe/test.key" "127.0.0.1:$port" < "$data" || fail "rdmasend to the service exited $?"
    out=$(echo "$droot"/var/lib/rdmapipe/test/stream-*-$n)
    cmp -s "$data" "$out" || fail "the service's stream $n: $out differs or is missing"
  done
  [ ! -s "$scratch/recv.err" ] || fail "the service said: $(cat "$scratch/recv.err")"
  echo "dist-test: the rdmarecv@ service verifies and received 2 streams as its example configures it"
}

# --check from the installed commands: rdmarecv counts a check as no
# stream and keeps listening. listen PORT [EXEC_START ENV] starts it there
# (by default as rdmarecv -P PORT; else EXEC_START, the unit's command
# line, as systemd runs it: its $VARIABLES split at spaces from the file
# ENV, in the service's working directory) and waits (bounded) until it
# listens; it fails (1) if PORT is taken.
listen() {
  port=$1
  if [ $# -eq 1 ]; then
    "$droot/usr/bin/rdmarecv" -P "$port" > /dev/null 2> "$scratch/recv.err" &
  else
    (
      # an environment file as systemd reads it: KEY=VALUE lines, # and ;
      # comments, quotes around a whole value removed
      while IFS= read -r line; do
        case $line in '' | '#'* | ';'*) continue ;; esac
        val=${line#*=}
        case $val in \"*\" | \'*\') val=${val:1:-1} ;; esac
        export "${line%%=*}=$val"
      done < "$3"
      cd "$droot/var/lib/rdmapipe/test"
      eval "exec $droot$2 -P $port"
    ) > /dev/null 2> "$scratch/recv.err" &
  fi
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
kill "$recv_pid"
wait "$recv_pid" 2>/dev/null || true
recv_pid=""
service

# The .rpm: rpm's own install into a root with its own database. Its
# %post runs chrooted in the root, which has no shell: it is not run here,
# but must be the script that the .deb's postinst ran.
rroot=$scratch/rpm
rpm --root "$rroot" --initdb
rpm --root "$rroot" -i --nodeps --noscripts "$rpm"
[ "$(rpm -qp --qf '%{POSTIN}' "$rpm")" = "$(cat "$packaging/postinstall.sh")" ] || fail "$rpm: its %post is not $packaging/postinstall.sh"
[ -s "$rroot/usr/lib/systemd/system/rdmarecv@.service" ] || fail "$rroot: /usr/lib/systemd/system/rdmarecv@.service missing"
list=$(rpm --root "$rroot" -ql rdmapipe)
grep -qx /usr/bin/rdmasend <<<"$list" || fail "rpm -ql rdmapipe lacks /usr/bin/rdmasend: $list"
installed "$rroot"
cmp -s "$license" "$rroot/usr/share/licenses/rdmapipe/${license##*/}" || fail "$rroot: the licence ${license##*/} is missing or differs"
grep -qx "License *: Apache-2.0" <<<"$(rpm -qip "$rpm")" || fail "$rpm: its License tag is not Apache-2.0"
version "$rroot"

# The tarball: the binaries.
troot=$scratch/tgz
mkdir -p "$troot/usr"
tar -xzf "$tgz" -C "$troot/usr"
version "$troot"
echo "dist-test: OK: $deb, $rpm and $tgz install and run"
