#!/usr/bin/env bash
# bench/cp.sh - rdmacp against scp and rsync -a (issue 34): uploads through one private
# sshd on 127.0.0.1 (the data over TCP loopback), median of RUNS (default 3) each, on
# three workloads: one file of 1 GiB (big), 20,000 files of 4 KiB in 200 directories
# (small), 2,000 files of 1 MiB (mid). Prints a markdown table with each tool's median
# wall time and rdmacp's speed-up over the others (target: >= 1.5x on each workload).
# DIRECTION=down times downloads instead (rdmacp -r target:TREE DIR, and the same for
# scp and rsync -a), through the same sshd.
#
# Needs root (sshd, logins as root with a throw-away key, and mount); installs rsync and
# openssh-server with apt-get when they are missing. The sources stay page-cached; the
# tools take turns, one run each per round. Every copy (every tool, every run) goes into
# a fresh ext4 file system of its own: mkfs.ext4 on a loop device backed by a file in
# /dev/shm (RAM), sized for the workload, mounted for that copy alone and unmounted and
# freed after it, outside the timed part. So the copy is timed against neither the
# virtual disk (its speed swings with the other guests) nor the file system's history:
# on a long-lived ext4 a file created soon after many were deleted costs a scan of the
# recently deleted inodes (recently_deleted in the inode allocator, up to about 0.5 ms a
# file here), and the write-back of one copy's dirty pages (up to 2 GiB) would fall into
# the next tool's timed copy; umount writes them back before the next copy starts. Every
# tool gets the identical new file system (same size, options and inode count, mounted
# with the defaults, no discard). Memory: /dev/shm holds one copy at a time (about
# 2.3 GiB for mid) besides the sources' page cache (3.1 GiB).
#
# Environment:
#   RUNS       runs per tool and workload (default 3)
#   WORKLOADS  which of big, small, mid to run (default "big small mid")
#   TOOLS      which of rdmacp, scp, rsync to run (default all three; the table has a
#              blank for each left out)
#   BENCH_BIN  where rdmacp is (default bin, as make build leaves it)
#   BEFORE_BIN where an earlier rdmacp is, to compare with: it runs as a fourth
#              tool, "before", in the same rounds, and the table gets its column
#              and rdmacp's speed-up over it
#   DIRECTION  up (default): the local trees to target:DIR; down: target:TREE to a
#              local directory (both on this host, through the same sshd)
#   CP_DIR     scratch directory for the sources, keys and mount point (default a new
#              one under /var/tmp, removed at the end)
#   CP_SHM     where the file systems' backing files go (default /dev/shm)
#   CP_TSV     if set, one line per run appended there: workload tool seconds
set -euo pipefail
export LC_ALL=C

RUNS=${RUNS:-3}
WORKLOADS=${WORKLOADS:-big small mid}
TOOLS=${TOOLS:-rdmacp scp rsync}
DIRECTION=${DIRECTION:-up}
case $DIRECTION in
  up) WHAT=uploads ;;
  down) WHAT=downloads ;;
  *) echo "bench/cp.sh: DIRECTION is up or down, not $DIRECTION" >&2; exit 1 ;;
esac
BENCH_BIN=${BENCH_BIN:-bin}
RDMACP=$(readlink -f "$BENCH_BIN/rdmacp")
BEFORE=
if [ -n "${BEFORE_BIN:-}" ]; then
  BEFORE=$(readlink -f "$BEFORE_BIN/rdmacp")
  [ -x "$BEFORE" ] || { echo "bench/cp.sh: no $BEFORE" >&2; exit 1; }
  TOOLS="before $TOOLS"
fi

if [ "$(id -u)" -ne 0 ]; then
  echo "bench/cp.sh: needs root (a private sshd that takes logins as root)" >&2
  exit 1
fi
[ -x "$RDMACP" ] || { echo "bench/cp.sh: no $RDMACP: make build first" >&2; exit 1; }
if ! command -v rsync >/dev/null || [ ! -x /usr/sbin/sshd ] || ! command -v scp >/dev/null; then
  apt-get install -y rsync openssh-server openssh-client >&2
fi

DIR=${CP_DIR:-$(mktemp -d /var/tmp/rdmacp-bench.XXXXXX)}
IMG=${CP_SHM:-/dev/shm}/rdmacp-bench.$$.img
SSHD_PID=
cleanup() {
  [ -z "$SSHD_PID" ] || kill "$SSHD_PID" 2>/dev/null || true
  drop_fs
  if [ -n "${CP_DIR:-}" ]; then rmdir "$DIR/dst" 2>/dev/null || true; else rm -rf "$DIR"; fi
}
trap cleanup EXIT
mkdir -p "$DIR/keys" "$DIR/src" "$DIR/dst" /run/sshd

# fresh_fs WORKLOAD: a new ext4 file system for one copy of WORKLOAD, mounted on
# $DIR/dst: a file in RAM of the workload's size and a half (a GiB at least), on a
# loop device. Inode tables and journal are written now, not by ext4lazyinit during
# the copy.
fresh_fs() {
  local size
  case $1 in
    big) size=1536M ;;
    small) size=1024M ;;
    mid) size=3072M ;;
  esac
  truncate -s "$size" "$IMG"
  mkfs.ext4 -q -F -b 4096 -N 131072 -E lazy_itable_init=0,lazy_journal_init=0 "$IMG"
  mount -t ext4 "$(losetup -f --show "$IMG")" "$DIR/dst"
}

# drop_fs: unmounts the copy's file system (writing back its dirty pages) and frees
# its loop device and memory.
drop_fs() {
  local l
  if mountpoint -q "$DIR/dst"; then umount "$DIR/dst"; fi
  for l in $(losetup -n -O NAME -j "$IMG"); do losetup -d "$l"; done
  rm -f "$IMG"
}

# A private sshd on a free port of 127.0.0.1, with throw-away keys.
for k in host user; do
  [ -f "$DIR/keys/$k" ] || ssh-keygen -q -t ed25519 -N '' -f "$DIR/keys/$k"
done
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat > "$DIR/keys/sshd_config" <<EOF
Port $PORT
ListenAddress 127.0.0.1
HostKey $DIR/keys/host
AuthorizedKeysFile $DIR/keys/user.pub
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
PidFile none
StrictModes no
Subsystem sftp internal-sftp
EOF
cat > "$DIR/keys/ssh_config" <<EOF
Host target
  HostName 127.0.0.1
  Port $PORT
  User root
  IdentityFile $DIR/keys/user
  IdentitiesOnly yes
  StrictHostKeyChecking no
  UserKnownHostsFile $DIR/keys/known_hosts
  BatchMode yes
  LogLevel ERROR
EOF
/usr/sbin/sshd -D -e -f "$DIR/keys/sshd_config" 2> "$DIR/keys/sshd.log" &
SSHD_PID=$!
for _ in $(seq 100); do
  ssh -F "$DIR/keys/ssh_config" target true 2>/dev/null && break
  sleep 0.1
done
ssh -F "$DIR/keys/ssh_config" target true

# make_workload NAME: the source tree of workload NAME under $DIR/src/NAME (kept when
# CP_DIR is reused).
make_workload() {
  local w=$DIR/src/$1 d
  [ -e "$w.done" ] && return
  rm -rf "$w"
  mkdir -p "$w"
  case $1 in
    big) head -c 1G /dev/urandom > "$w/big" ;;
    small)
      head -c $((200 * 100 * 4096)) /dev/urandom > "$DIR/src/blob"
      for d in $(seq 0 199); do
        mkdir "$w/d$d"
        split -a 3 -d -b 4096 <(tail -c +$((d * 409600 + 1)) "$DIR/src/blob" | head -c 409600) "$w/d$d/f"
      done
      rm "$DIR/src/blob" ;;
    mid)
      head -c 2000M /dev/urandom | split -a 4 -d -b 1M - "$w/f" ;;
  esac
  touch "$w.done"
}

# run_tool TOOL WORKLOAD: one copy into a fresh file system (see fresh_fs), printing
# its wall time in seconds.
run_tool() {
  local dst=$DIR/dst/copy src=$DIR/src/$2 t0 t1 from to
  fresh_fs "$2" >&2
  mkdir "$dst"
  sync
  from=$src to=target:$dst/
  [ "$DIRECTION" = up ] || from=target:$src to=$dst/
  t0=$EPOCHREALTIME
  case $1 in
    rdmacp) RDMACP_REMOTE_CMD=$RDMACP "$RDMACP" -t tcp -F "$DIR/keys/ssh_config" -r "$from" "$to" ;;
    before) RDMACP_REMOTE_CMD=$BEFORE "$BEFORE" -t tcp -F "$DIR/keys/ssh_config" -r "$from" "$to" ;;
    scp) scp -q -F "$DIR/keys/ssh_config" -r "$from" "$to" ;;
    rsync) rsync -a -e "ssh -F $DIR/keys/ssh_config" "$from" "$to" ;;
  esac
  t1=$EPOCHREALTIME
  cmp_tree "$src" "$dst/$2"
  drop_fs >&2
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }'
}

# cmp_tree SRC DST: fails unless DST holds SRC's files with the same bytes.
cmp_tree() {
  (cd "$1" && find . -type f -print0 | sort -z | xargs -0 cat | md5sum) > "$DIR/a.sum"
  (cd "$2" && find . -type f -print0 | sort -z | xargs -0 cat | md5sum) > "$DIR/b.sum"
  cmp -s "$DIR/a.sum" "$DIR/b.sum" || { echo "bench/cp.sh: $2 differs from $1" >&2; exit 1; }
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

echo "## rdmacp against scp and rsync -a ($WHAT through a private sshd on 127.0.0.1, TCP; median of $RUNS)"
echo
if [ -n "$BEFORE" ]; then
  echo "| workload | rdmacp before s | rdmacp s | scp s | rsync -a s | vs before | vs scp | vs rsync |"
  echo "|---|---|---|---|---|---|---|---|"
else
  echo "| workload | rdmacp s | scp s | rsync -a s | vs scp | vs rsync |"
  echo "|---|---|---|---|---|---|"
fi
for w in $WORKLOADS; do
  make_workload "$w"
  declare -A med=([before]=0 [rdmacp]=0 [scp]=0 [rsync]=0)
  for tool in $TOOLS; do : > "$DIR/times.$tool"; done
  for run in $(seq "$RUNS"); do
    for tool in $TOOLS; do
      s=$(run_tool "$tool" "$w")
      echo "$s" >> "$DIR/times.$tool"
      [ -z "${CP_TSV:-}" ] || printf '%s\t%s\t%s\n' "$w" "$tool" "$s" >> "$CP_TSV"
    done
  done
  for tool in $TOOLS; do med[$tool]=$(median < "$DIR/times.$tool"); done
  awk -v w="$w" -v b="${med[before]}" -v r="${med[rdmacp]}" -v s="${med[scp]}" -v y="${med[rsync]}" -v cmp="$BEFORE" \
    'function t(x) { return x > 0 ? sprintf("%.2f", x) : "" }
     function q(x) { return x > 0 && r > 0 ? sprintf("%.2fx", x / r) : "" }
     BEGIN {
       if (cmp != "") printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", w, t(b), t(r), t(s), t(y), q(b), q(s), q(y)
       else printf "| %s | %s | %s | %s | %s | %s |\n", w, t(r), t(s), t(y), q(s), q(y)
     }'
done
