#!/usr/bin/env bash
# bench/cp.sh - rdmacp against scp and rsync -a (issue 34): uploads through one private
# sshd on 127.0.0.1 (the data over TCP loopback), median of RUNS (default 3) each, on
# three workloads: one file of 1 GiB (big), 20,000 files of 4 KiB in 200 directories
# (small), 2,000 files of 1 MiB (mid). Prints a markdown table with each tool's median
# wall time and rdmacp's speed-up over the others (target: >= 1.5x on each workload).
# DIRECTION=down times downloads instead (rdmacp -r target:TREE DIR, and the same for
# scp and rsync -a), through the same sshd.
#
# Then issue 43's table: rdmacp -a -H -X -A against rsync -aHAX, the two run one after
# the other in every round, each verdict on the median of the rounds' paired speed-ups
# (rsync's time over rdmacp's): the first copy of each workload (target >= 1.5x), and,
# for each of INCR_WORKLOADS, the second copy of the unchanged tree and the copy after 1
# file in 100 changed (target >= 1.0x each). For those two the destination first gets
# the tree by the same tool (untimed), then its file system is unmounted and mounted
# again, so that each tool starts with the destination's caches dropped and the sources
# page-cached (no drop_caches: the sources would come from the virtual disk).
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
# 2.3 GiB for mid) besides the sources' page cache (3.1 GiB, and a changed copy of each
# of INCR_WORKLOADS).
#
# Environment:
#   RUNS       runs per tool and workload (default 3)
#   WORKLOADS  which of big, small, mid to run (default "big small mid")
#   TOOLS      which of rdmacp, scp, rsync, rdmacp-aHAX (rdmacp -a -H -X -A) and
#              rsync-aHAX (rsync -aHAX) to run on first copies (default all five; the
#              tables have a blank for each left out)
#   INCR_WORKLOADS  which of big, small, mid get the second-copy rows (default small;
#              empty: none)
#   BENCH_BIN  where rdmacp is (default bin, as make build leaves it)
#   BEFORE_BIN where an earlier rdmacp is, to compare with: it runs as a sixth
#              tool, "before", in the same rounds, and the table gets its column
#              and rdmacp's speed-up over it
#   DIRECTION  up (default): the local trees to target:DIR; down: target:TREE to a
#              local directory (both on this host, through the same sshd)
#   CP_DIR     scratch directory for the sources, keys and mount point (default a new
#              one under /var/tmp, removed at the end)
#   CP_SHM     where the file systems' backing files go (default /dev/shm)
#   CP_TSV     if set, one line per run appended there: workload tool seconds (the
#              workload as small-unchanged or small-changed for the second copies)
#   AGED       1: each file system of a first copy has just held and lost a like tree
#              (cp -a of the workload into it, sync, rm -rf, sync; untimed), as a user's
#              has; 0 (default): fresh
#   MKFS_OPTS  more options of mkfs.ext4, e.g. "-O ^has_journal" (this machine's root
#              file system has no journal: there ext4's allocator skips inodes deleted in
#              the last minute, and scans them for every file made)
set -euo pipefail
export LC_ALL=C

RUNS=${RUNS:-3}
WORKLOADS=${WORKLOADS:-big small mid}
TOOLS=${TOOLS:-rdmacp scp rsync rdmacp-aHAX rsync-aHAX}
INCR_WORKLOADS=${INCR_WORKLOADS-small}
DIRECTION=${DIRECTION:-up}
case $DIRECTION in
  up) WHAT=uploads ;;
  down) WHAT=downloads ;;
  *) echo "bench/cp.sh: DIRECTION is up or down, not $DIRECTION" >&2; exit 1 ;;
esac
FS_WHAT="a new ext4 for each copy${MKFS_OPTS:+ (mkfs.ext4 $MKFS_OPTS)}"
[ "${AGED:-0}" != 1 ] || FS_WHAT="$FS_WHAT that has just held and lost a like tree"
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

# As the suite's sshd (test/rdmacp's withoutBashrc): the whole run, sshd and every mount,
# in a mount namespace of its own where root's ~/.bashrc reads as empty. sshd runs each
# session's command through bash, which reads ~/.bashrc then, for every tool alike: what a
# developer put there (pyenv's init: 0.1-0.5 s of every login here) is not what is measured.
if [ -z "${CP_NS:-}" ] && [ -e "$HOME/.bashrc" ]; then
  exec unshare -m --propagation private env CP_NS=1 bash -c \
    'mount --bind /dev/null "$HOME/.bashrc" && exec "$0" "$@"' "$0" "$@"
fi
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
mkdir -p "$DIR/keys" "$DIR/src" "$DIR/changed" "$DIR/dst" /run/sshd

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
  # shellcheck disable=SC2086 # MKFS_OPTS is a list of options
  mkfs.ext4 -q -F -b 4096 -N 131072 -E lazy_itable_init=0,lazy_journal_init=0 ${MKFS_OPTS:-} "$IMG"
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
  rm -rf "$w" "$w.md5" "$DIR/changed/$1.done"
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

# make_changed NAME: $DIR/changed/NAME, workload NAME's tree with every hundredth file
# (in sorted order, the first one included) rewritten with new bytes of the same size
# and a new modification time, in a later second than the tree's: rsync compares whole
# seconds, and would skip a file made and rewritten within one (the last directories of
# a tree just made).
make_changed() {
  local c=$DIR/changed/$1 f
  [ -e "$c.done" ] && return
  rm -rf "$c" "$c.md5"
  cp -a "$DIR/src/$1" "$c"
  sleep 1
  (cd "$c" && find . -type f | sort | awk 'NR % 100 == 1') | while read -r f; do
    head -c "$(stat -c %s "$c/$f")" /dev/urandom > "$c/$f.new"
    mv "$c/$f.new" "$c/$f"
  done
  touch "$c.done"
}

# copy TOOL FROM TO: one copy of FROM into the directory TO by TOOL.
copy() {
  local ssh_cfg=$DIR/keys/ssh_config
  case $1 in
    rdmacp) RDMACP_REMOTE_CMD=$RDMACP "$RDMACP" -t tcp -F "$ssh_cfg" -r "$2" "$3" ;;
    before) RDMACP_REMOTE_CMD=$BEFORE "$BEFORE" -t tcp -F "$ssh_cfg" -r "$2" "$3" ;;
    rdmacp-aHAX) RDMACP_REMOTE_CMD=$RDMACP "$RDMACP" -t tcp -F "$ssh_cfg" -a -H -X -A "$2" "$3" ;;
    scp) scp -q -F "$ssh_cfg" -r "$2" "$3" ;;
    rsync) rsync -a -e "ssh -F $ssh_cfg" "$2" "$3" ;;
    rsync-aHAX) rsync -aHAX -e "ssh -F $ssh_cfg" "$2" "$3" ;;
    *) echo "bench/cp.sh: no tool $1" >&2; exit 1 ;;
  esac
}

# run_tool TOOL WORKLOAD [ROW]: one copy into a fresh file system (see fresh_fs),
# printing its wall time in seconds. ROW is first (the default), unchanged (the second
# copy of the tree) or changed (the copy of its changed tree, see make_changed, over
# the first); for the last two the first copy is made before, untimed, and the file
# system mounted again.
run_tool() {
  local dst=$DIR/dst/copy src=$DIR/src/$2 t0 t1 host='' to loop
  fresh_fs "$2" >&2
  mkdir "$dst"
  to=target:$dst/
  [ "$DIRECTION" = up ] || host=target: to=$dst/
  if [ "${3:-first}" != first ]; then
    copy "$1" "$host$src" "$to" >&2
    loop=$(findmnt -n -o SOURCE "$DIR/dst")
    umount "$DIR/dst"
    mount -t ext4 "$loop" "$DIR/dst"
    [ "$3" = unchanged ] || src=$DIR/changed/$2
  elif [ "${AGED:-0}" = 1 ]; then
    cp -a "$src" "$DIR/dst/aged" && sync && rm -rf "$DIR/dst/aged"
  fi
  sync
  t0=$EPOCHREALTIME
  copy "$1" "$host$src" "$to"
  t1=$EPOCHREALTIME
  cmp_tree "$src" "$dst/$2"
  drop_fs >&2
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.2f\n", b - a }'
}

# sum_tree DIR: the md5 sum of DIR's files' bytes, in name order.
sum_tree() { (cd "$1" && find . -type f -print0 | sort -z | xargs -0 cat | md5sum); }

# cmp_tree SRC DST: fails unless DST holds SRC's files with the same bytes (SRC's sum
# is kept beside it, as SRC.md5).
cmp_tree() {
  [ -e "$1.md5" ] || sum_tree "$1" > "$1.md5"
  sum_tree "$2" > "$DIR/b.sum"
  cmp -s "$1.md5" "$DIR/b.sum" || { echo "bench/cp.sh: $2 differs from $1" >&2; exit 1; }
}

median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

# issue43_row ROW WORKLOAD TARGET: a row of issue 43's table from times.rdmacp-aHAX and
# times.rsync-aHAX (a line per round each): the medians, the median of the rounds'
# speed-ups (rsync's time over rdmacp's) and its verdict against TARGET.
issue43_row() {
  local r y
  r=$(median < "$DIR/times.rdmacp-aHAX")
  y=$(median < "$DIR/times.rsync-aHAX")
  paste "$DIR/times.rdmacp-aHAX" "$DIR/times.rsync-aHAX" | awk '{ printf "%.4f\n", $2 / $1 }' | median |
    awk -v row="$1" -v w="$2" -v r="$r" -v y="$y" -v t="$3" \
      '{ printf "| %s | %s | %.2f | %.2f | %.2fx | >= %.1fx | %s |\n", row, w, r, y, $1, t, ($1 >= t ? "pass" : "miss") }'
}

label() {
  case $1 in
    big) echo "one file of 1 GiB" ;;
    small) echo "20,000 x 4 KiB" ;;
    mid) echo "2,000 x 1 MiB" ;;
  esac
}

# The first table is issue 34's, printed when TOOLS has one of its tools.
plain=0
for tool in before rdmacp scp rsync; do [[ " $TOOLS " != *" $tool "* ]] || plain=1; done
if [ $plain = 1 ]; then
  echo "## rdmacp against scp and rsync -a ($WHAT through a private sshd on 127.0.0.1, TCP; median of $RUNS)"
  echo
  echo "File systems: $FS_WHAT."
  echo
  if [ -n "$BEFORE" ]; then
    echo "| workload | rdmacp before s | rdmacp s | scp s | rsync -a s | vs before | vs scp | vs rsync |"
    echo "|---|---|---|---|---|---|---|---|"
  else
    echo "| workload | rdmacp s | scp s | rsync -a s | vs scp | vs rsync |"
    echo "|---|---|---|---|---|---|"
  fi
fi
: > "$DIR/issue43.md"
for w in $WORKLOADS; do
  make_workload "$w"
  declare -A med=([before]=0 [rdmacp]=0 [scp]=0 [rsync]=0)
  for tool in $TOOLS; do : > "$DIR/times.$tool"; done
  for _ in $(seq "$RUNS"); do
    for tool in $TOOLS; do
      s=$(run_tool "$tool" "$w")
      echo "$s" >> "$DIR/times.$tool"
      [ -z "${CP_TSV:-}" ] || printf '%s\t%s\t%s\n' "$w" "$tool" "$s" >> "$CP_TSV"
    done
  done
  for tool in before rdmacp scp rsync; do
    [[ " $TOOLS " != *" $tool "* ]] || med[$tool]=$(median < "$DIR/times.$tool")
  done
  [ $plain = 0 ] || awk -v w="$w" -v b="${med[before]}" -v r="${med[rdmacp]}" -v s="${med[scp]}" -v y="${med[rsync]}" -v cmp="$BEFORE" \
    'function t(x) { return x > 0 ? sprintf("%.2f", x) : "" }
     function q(x) { return x > 0 && r > 0 ? sprintf("%.2fx", x / r) : "" }
     BEGIN {
       if (cmp != "") printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", w, t(b), t(r), t(s), t(y), q(b), q(s), q(y)
       else printf "| %s | %s | %s | %s | %s | %s |\n", w, t(r), t(s), t(y), q(s), q(y)
     }'
  if [[ " $TOOLS " == *" rdmacp-aHAX "* && " $TOOLS " == *" rsync-aHAX "* ]]; then
    issue43_row "first copy" "$(label "$w")" 1.5 >> "$DIR/issue43.md"
  fi
done
for w in $INCR_WORKLOADS; do
  make_workload "$w"
  make_changed "$w"
  for row in unchanged changed; do
    for tool in rdmacp-aHAX rsync-aHAX; do : > "$DIR/times.$tool"; done
    for _ in $(seq "$RUNS"); do
      for tool in rdmacp-aHAX rsync-aHAX; do
        s=$(run_tool "$tool" "$w" "$row")
        echo "$s" >> "$DIR/times.$tool"
        [ -z "${CP_TSV:-}" ] || printf '%s\t%s\t%s\n' "$w-$row" "$tool" "$s" >> "$CP_TSV"
      done
    done
    case $row in
      unchanged) issue43_row "second copy, unchanged" "$(label "$w")" 1.0 ;;
      changed) issue43_row "after 1 in 100 changed" "$(label "$w")" 1.0 ;;
    esac >> "$DIR/issue43.md"
  done
done
if [ -s "$DIR/issue43.md" ]; then
  [ $plain = 0 ] || echo
  echo "## rdmacp -a -H -X -A against rsync -aHAX (issue 43; $WHAT, the same sshd; medians of $RUNS paired rounds)"
  echo
  echo "File systems: $FS_WHAT (second copies: into the first's)."
  echo
  echo "| row | workload | rdmacp s | rsync -aHAX s | speed-up (median of pairs) | target | verdict |"
  echo "|---|---|---|---|---|---|---|"
  cat "$DIR/issue43.md"
fi
