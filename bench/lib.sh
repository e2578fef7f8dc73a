# shellcheck shell=bash
# bench/lib.sh - helpers shared by bench/run.sh (on the host) and bench/vm-guest.sh (in
# the SoftRoCE VM). Sourced, never executed. Needs bash >= 4.3, GNU time at /usr/bin/time,
# coreutils timeout, ss (iproute2), and for the RDMA listener wait, rdma (iproute2).
#
# One trial = one receiver and one sender started as background jobs: the receiver first,
# then (once it listens) the sender; the wall time runs from the sender's start until both
# sides are done. Each side runs as
#     /usr/bin/time -f "$TFMT" -o FILE timeout T TOOL ...
# so GNU time reports the tool's user+sys CPU and peak RSS (the rusage of timeout includes
# its waited-for child; timeout itself costs nothing measurable), and timeout bounds it.
# Each trial appends one tab-separated line to $BENCH_TSV (see record() for the columns);
# bench/report.awk turns those lines into tables.

export LC_ALL=C   # '.' as the decimal separator in $EPOCHREALTIME and in awk

TFMT='%e %U %S %M'   # GNU time: wall s, user s, sys s, max RSS KiB

# bench_init DIR: scratch dir for this process's trials, and a FIFO that nobody writes to,
# held open on SLEEP_FD: `read -t` on it is a sleep without a fork (the samplers poll
# /proc several times a second; forking `sleep` each time costs real CPU under TCG).
bench_init() {
  SCRATCH=$1
  mkdir -p "$SCRATCH"
  rm -f "$SCRATCH/sleep.fifo"
  mkfifo "$SCRATCH/sleep.fifo"
  exec {SLEEP_FD}<>"$SCRATCH/sleep.fifo"
  BG_PIDS=()
}

# nap SECONDS: sleep without forking
nap() { read -r -t "$1" -u "$SLEEP_FD" _ || true; }

# to_bytes SIZE: 1G, 256M, 64K or a plain byte count -> bytes (binary units)
to_bytes() {
  local s=$1 n m=1
  case $s in
    *[kK]) n=${s%?}; m=1024 ;;
    *[mM]) n=${s%?}; m=$((1024 * 1024)) ;;
    *[gG]) n=${s%?}; m=$((1024 * 1024 * 1024)) ;;
    *)     n=$s ;;
  esac
  if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -eq 0 ]; then echo "bench: bad size '$s'" >&2; return 1; fi
  echo $((n * m))
}

# descendants PID: every descendant of PID, deepest first (bash builtins only)
descendants() {
  local t k
  local -a kids
  for t in /proc/"$1"/task/*/children; do
    [ -r "$t" ] || continue
    kids=()
    read -r -a kids 2>/dev/null < "$t" || true
    for k in "${kids[@]}"; do
      descendants "$k"
      echo "$k"
    done
  done
}

# kill_tree PID: SIGTERM PID and all its descendants (leaves first), by process id
kill_tree() {
  local p
  for p in $(descendants "$1") "$1"; do
    kill "$p" 2>/dev/null || true
  done
}

# kill_all_bg: the cleanup trap's work: every background job this shell started
kill_all_bg() {
  local p
  for p in "${BG_PIDS[@]}"; do kill_tree "$p"; done
}

# alive PID: PID exists and is not a zombie
alive() {
  local st=
  read -r st 2>/dev/null < "/proc/$1/stat" || return 1
  st=${st##*) }
  [ "${st%% *}" != Z ]
}

# find_proc PID COMM: print the pid of PID's descendant whose comm is COMM, waiting up to
# 10 s for it to appear; fails if it does not, or if PID ends first
find_proc() {
  local root=$1 want=$2 p c i
  for ((i = 0; i < 500; i++)); do
    for p in $(descendants "$root"); do
      c=
      read -r c 2>/dev/null < "/proc/$p/comm" || true
      if [ "$c" = "$want" ]; then echo "$p"; return 0; fi
    done
    alive "$root" || return 1
    nap 0.02
  done
  return 1
}

# watch_mem PID COMM OUT: in the background, find PID's descendant COMM and sample_mem it
watch_mem() {
  { local p; if p=$(find_proc "$1" "$2"); then sample_mem "$p" "$3"; fi; } &
  BG_PIDS+=("$!")
}

# sample_mem PID OUT: while PID lives, poll its /proc status every 0.1 s and finally write
# "VmPin VmLck VmHWM" peaks (KiB) to OUT. VmPin counts pages pinned by verbs memory
# registration (ib_umem), VmLck pages locked with mlock.
sample_mem() {
  local pid=$1 out=$2 pin=0 lck=0 hwm=0 k v
  while [ -r "/proc/$pid/status" ]; do
    while read -r k v _; do
      case $k in
        VmPin:) if ((v > pin)); then pin=$v; fi ;;
        VmLck:) if ((v > lck)); then lck=$v; fi ;;
        VmHWM:) if ((v > hwm)); then hwm=$v; fi ;;
      esac
    done 2>/dev/null < "/proc/$pid/status" || break
    nap 0.1
  done
  echo "$pin $lck $hwm" > "$out"
}

# free_port: a TCP port in 20000-59999 that no socket on this machine uses
free_port() {
  local p i
  for ((i = 0; i < 200; i++)); do
    p=$((20000 + RANDOM % 40000))
    if [ -z "$(ss -Htan "( sport = :$p or dport = :$p )" 2>/dev/null)" ]; then
      echo "$p"
      return 0
    fi
  done
  echo "bench: no free port found" >&2
  return 1
}

# wait_listen KIND PORT: poll (every 20 ms, up to 15 s) until something listens on PORT:
# KIND tcp looks at the kernel's TCP sockets, KIND cm at rdma_cm's listening cm_ids
wait_listen() {
  local kind=$1 port=$2 i
  for ((i = 0; i < 750; i++)); do
    case $kind in
      tcp) [ -n "$(ss -Htln "sport = :$port" 2>/dev/null)" ] && return 0 ;;
      cm)  rdma resource show cm_id 2>/dev/null | grep -q "state LISTEN .*:$port " && return 0 ;;
    esac
    nap 0.02
  done
  echo "bench: nothing listens on $kind port $port after 15 s" >&2
  return 1
}

# time_cpu FILE / time_rss FILE: user+sys seconds / peak RSS KiB from a GNU time -o file
# (its last line; a line before it says when the command failed)
time_cpu() { tail -n 1 "$1" 2>/dev/null | awk 'NF == 4 { printf "%.3f", $2 + $3; ok = 1 } END { if (!ok) print "-" }'; }
time_rss() { tail -n 1 "$1" 2>/dev/null | awk 'NF == 4 { print $4; ok = 1 } END { if (!ok) print "-" }'; }

# json_num FILE KEY: a number from rdmapipe's --stats-json output, or -
json_num() {
  local v
  v=$(sed -n "s/^ *\"$2\": *\([0-9.eE+-]*\),\{0,1\}$/\1/p" "$1" 2>/dev/null | head -n 1)
  echo "${v:--}"
}

# json_str FILE KEY: a string (without blanks) from rdmapipe's --stats-json output, or -
json_str() {
  local v
  v=$(sed -n "s/^ *\"$2\": *\"\([^\" ]*\)\",\{0,1\}$/\1/p" "$1" 2>/dev/null | head -n 1)
  echo "${v:--}"
}

# tail_of FILE: the end of a tool's output, on one line (for a failed trial's note)
tail_of() {
  local t
  t=$(tail -c 240 "$1" 2>/dev/null | tr '\t\n' '  ' || true)
  echo "${t:-(nothing)}"
}

# record ENV TOOL RUN OK BYTES WALL S_CPU S_RSS R_CPU R_RSS SELF_MBPS S_PIN R_PIN S_LCK
#        R_LCK CHUNK DEPTH MSGS S_PINNED R_PINNED RDMA_OP NOTE
# appends one line to $BENCH_TSV. CPU in seconds (user+sys), RSS/PIN/LCK in KiB, SELF_MBPS
# the rate the tool reports itself (MB = 1e6 bytes), S_/R_PINNED the pinned memory rdmasend/
# rdmarecv report (--stats-json pinned_bytes, what -v prints) in KiB, RDMA_OP their data path;
# CHUNK is rdmapipe's negotiated chunk, or ib_send_bw's message size; - where not applicable.
record() {
  local IFS=$'\t'
  echo "$*" >> "$BENCH_TSV"
}

# run_pair ENV TOOL RUN BYTES LISTEN RECV_FN SEND_FN [SERVER_COMM]
#   LISTEN: tcp or cm (see wait_listen); RECV_FN/SEND_FN: functions that run the two sides
#   (they see $TD, the trial dir, $PORT, $BYTES and $TT, the per-side timeout). They must
#   write GNU time output to $TD/r.time and $TD/s.time. SERVER_COMM, for a receiver that
#   never exits by itself (rcopy's server): the receiver's process name; once the sender is
#   done, that process alone is stopped (so that timeout and GNU time still report it),
#   and the wall time ends with the sender. For rdmasend/rdmarecv, VmPin/VmLck are sampled while they
#   run. Sets TRIAL_OK (1/0), TRIAL_WALL, TRIAL_NOTE and leaves the files in $TD.
run_pair() {
  local env=$1 tool=$2 run=$3 recv_fn=$6 send_fn=$7 server=${8:-} p
  local listen=$5 rp sp rrc=0 src=0 t0 t1
  BYTES=$4
  TD=$SCRATCH/$env-$tool-$run
  rm -rf "$TD"; mkdir -p "$TD"
  PORT=$(free_port)
  TRIAL_OK=1 TRIAL_NOTE=

  "$recv_fn" > "$TD/r.out" 2>&1 &
  rp=$!
  BG_PIDS+=("$rp")
  if ! wait_listen "$listen" "$PORT"; then
    kill_tree "$rp"; wait "$rp" 2>/dev/null || true
    TRIAL_OK=0 TRIAL_NOTE="receiver never listened; it said: $(tail_of "$TD/r.out")"
    TRIAL_WALL=-
    return 0
  fi
  case $tool in rdmapipe*) watch_mem "$rp" rdmarecv "$TD/r.mem" ;; esac

  t0=$EPOCHREALTIME
  "$send_fn" > "$TD/s.out" 2>&1 &
  sp=$!
  BG_PIDS+=("$sp")
  case $tool in rdmapipe*) watch_mem "$sp" rdmasend "$TD/s.mem" ;; esac
  wait "$sp" || src=$?
  if [ -n "$server" ]; then
    t1=$EPOCHREALTIME
    if p=$(find_proc "$rp" "$server"); then kill "$p" 2>/dev/null || true; else kill_tree "$rp"; fi
    wait "$rp" 2>/dev/null || true
  else
    wait "$rp" || rrc=$?
    t1=$EPOCHREALTIME
  fi
  wait   # the samplers: they end with the processes they watch
  BG_PIDS=()
  TRIAL_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
  if [ "$src" != 0 ] || [ "$rrc" != 0 ]; then
    TRIAL_OK=0
    TRIAL_NOTE="exit status: sender $src, receiver $rrc; sender said: $(tail_of "$TD/s.out"); receiver said: $(tail_of "$TD/r.out")"
  fi
}

# record_pair ENV TOOL RUN SELF_MBPS: record the trial run_pair just ran (reads $TD; for
# ib_send_bw, $IB_MSG and $ITERS)
record_pair() {
  local env=$1 tool=$2 run=$3 self=$4 spin=- rpin=- slck=- rlck=- chunk=- depth=- msgs=- m
  local spinned=- rpinned=- op=-
  if [ -f "$TD/s.mem" ]; then read -r spin slck _ < "$TD/s.mem"; fi
  if [ -f "$TD/r.mem" ]; then read -r rpin rlck _ < "$TD/r.mem"; fi
  if [ -f "$TD/s.json" ]; then
    chunk=$(json_num "$TD/s.json" chunk)
    depth=$(json_num "$TD/s.json" depth)
    msgs=$(json_num "$TD/s.json" messages)
    spinned=$(json_num "$TD/s.json" pinned_bytes)
    op=$(json_str "$TD/s.json" rdma_op)
  fi
  if [ -f "$TD/r.json" ]; then rpinned=$(json_num "$TD/r.json" pinned_bytes); fi
  if [ "$spinned" != - ]; then spinned=$((spinned / 1024)); fi
  if [ "$rpinned" != - ]; then rpinned=$((rpinned / 1024)); fi
  case $tool in ib_send_bw*) chunk=$IB_MSG msgs=$ITERS ;; esac
  record "$env" "$tool" "$run" "$TRIAL_OK" "$BYTES" "$TRIAL_WALL" \
    "$(time_cpu "$TD/s.time")" "$(time_rss "$TD/s.time")" \
    "$(time_cpu "$TD/r.time")" "$(time_rss "$TD/r.time")" \
    "$self" "$spin" "$rpin" "$slck" "$rlck" "$chunk" "$depth" "$msgs" \
    "$spinned" "$rpinned" "$op" "${TRIAL_NOTE:--}"
  m=$(awk -v b="$BYTES" -v w="$TRIAL_WALL" 'BEGIN { if (w + 0 > 0) printf "%.1f MB/s", b / w / 1e6; else print "-" }')
  if [ "$self" != - ]; then m="$m (own $(awk -v x="$self" 'BEGIN { printf "%.1f", x }') MB/s)"; fi
  local what="run $run"
  if [ "$run" = 0 ]; then what="warm-up"; fi
  if [ "$TRIAL_OK" = 1 ]; then
    echo "bench: $env $tool $what: $m" >&2
  else
    echo "bench: $env $tool $what: FAILED: $TRIAL_NOTE" >&2
  fi
}

# pipe_only ENV RUN BYTES: the pipe alone, `head -c BYTES /dev/zero | cat > /dev/null`:
# the ceiling for any tool fed through a pipe; head's CPU is the "sender" side (the same
# head feeds every pipe-fed tool, and is never counted in their CPU columns)
pipe_only() {
  local env=$1 run=$2 t0 t1 rc=0
  BYTES=$3
  TD=$SCRATCH/$env-pipe-$run
  rm -rf "$TD"; mkdir -p "$TD"
  TRIAL_OK=1 TRIAL_NOTE=
  t0=$EPOCHREALTIME
  /usr/bin/time -f "$TFMT" -o "$TD/s.time" head -c "$BYTES" /dev/zero |
    /usr/bin/time -f "$TFMT" -o "$TD/r.time" cat > /dev/null || rc=$?
  t1=$EPOCHREALTIME
  TRIAL_WALL=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", b - a }')
  if [ "$rc" != 0 ]; then TRIAL_OK=0 TRIAL_NOTE="exit status $rc"; fi
  record_pair "$env" pipe "$run" -
}

# ---- the tools ------------------------------------------------------------------------
# Each pair of functions runs one side of one tool (see run_pair). They read $ADDR (the
# address both sides use), $PORT, $BYTES, $TT, $TD, and for rdmapipe $BENCH_BIN (where
# rdmasend/rdmarecv are) and $RP_TRANSPORT (tcp or rdma). Pipe-fed senders read `head -c
# BYTES /dev/zero` through a pipe, file-fed ones the regular file $FILE_SRC (in tmpfs);
# receivers write to /dev/null, to `wc -c` (the -wc tools) or to the file $FILE_DST.

# rdmapipe, in every variant trial() sets up: RP_BIN (where its commands are: $BENCH_BIN,
# or $BEFORE_BIN for rdmapipe-before), RP_ARGS (extra flags, both sides), RP_IN
# (pipe: `head -c |`; file: `< $FILE_SRC`) and RP_OUT (null, wc: `| wc -c`, file: `> $FILE_DST`)
recv_rdmapipe() {
  local cmd=(/usr/bin/time -f "$TFMT" -o "$TD/r.time" timeout "$TT" "$RP_BIN/rdmarecv" "${RP_ARGS[@]}"
    --transport "$RP_TRANSPORT" --bind "$ADDR" --port "$PORT" --stats-json "$TD/r.json")
  case $RP_OUT in
    null) exec "${cmd[@]}" > /dev/null ;;
    file) exec "${cmd[@]}" > "$FILE_DST" ;;
    wc)   "${cmd[@]}" | wc -c > "$TD/wc" ;;
  esac
}
send_rdmapipe() {
  local cmd=(/usr/bin/time -f "$TFMT" -o "$TD/s.time" timeout "$TT" "$RP_BIN/rdmasend" "${RP_ARGS[@]}"
    --transport "$RP_TRANSPORT" --wait 10s --port "$PORT" --stats-json "$TD/s.json" "$ADDR")
  case $RP_IN in
    pipe) head -c "$BYTES" /dev/zero | "${cmd[@]}" ;;
    file) exec "${cmd[@]}" < "$FILE_SRC" ;;
  esac
}

recv_socat() {
  exec /usr/bin/time -f "$TFMT" -o "$TD/r.time" timeout "$TT" \
    socat -u "TCP-LISTEN:$PORT,bind=$ADDR,reuseaddr" STDOUT > /dev/null
}
recv_socat_wc() {
  /usr/bin/time -f "$TFMT" -o "$TD/r.time" timeout "$TT" \
    socat -u "TCP-LISTEN:$PORT,bind=$ADDR,reuseaddr" STDOUT | wc -c > "$TD/wc"
}
send_socat() {
  head -c "$BYTES" /dev/zero | /usr/bin/time -f "$TFMT" -o "$TD/s.time" timeout "$TT" \
    socat -u STDIN "TCP:$ADDR:$PORT"
}

# netcat-openbsd: -d, the receiver does not read its stdin; -N, the sender shuts its side
# of the connection down at the end of its input, so that the receiver sees the end.
# nc-f2f: the same from the file $FILE_SRC into the file $FILE_DST.
recv_nc() {
  exec /usr/bin/time -f "$TFMT" -o "$TD/r.time" timeout "$TT" nc -d -l "$ADDR" "$PORT" > /dev/null
}
send_nc() {
  head -c "$BYTES" /dev/zero | /usr/bin/time -f "$TFMT" -o "$TD/s.time" timeout "$TT" nc -N "$ADDR" "$PORT"
}
recv_nc_f2f() {
  exec /usr/bin/time -f "$TFMT" -o "$TD/r.time" timeout "$TT" nc -d -l "$ADDR" "$PORT" > "$FILE_DST"
}
send_nc_f2f() {
  exec /usr/bin/time -f "$TFMT" -o "$TD/s.time" timeout "$TT" nc -N "$ADDR" "$PORT" < "$FILE_SRC"
}

# mbuffer with its defaults (block size, buffer memory), quiet: -q no status line, -Q no
# summary. The receiver takes one connection on PORT (-I, any address); the sender -O.
recv_mbuffer() {
  exec /usr/bin/time -f "$TFMT" -o "$TD/r.time" timeout "$TT" mbuffer -q -Q -I "$PORT" -o /dev/null
}
send_mbuffer() {
  head -c "$BYTES" /dev/zero | /usr/bin/time -f "$TFMT" -o "$TD/s.time" timeout "$TT" \
    mbuffer -q -Q -O "$ADDR:$PORT"
}

# perftest over rdma_cm (-R): ITERS messages of IB_MSG bytes; IB_EVENTS=-e for completion
# events instead of busy polling
recv_ib_send_bw() {
  # shellcheck disable=SC2086  # IB_EVENTS is empty or one flag
  exec /usr/bin/time -f "$TFMT" -o "$TD/r.time" timeout "$TT" \
    ib_send_bw -R -d "$RXE_DEV" -s "$IB_MSG" -n "$ITERS" -p "$PORT" $IB_EVENTS
}
send_ib_send_bw() {
  # shellcheck disable=SC2086
  exec /usr/bin/time -f "$TFMT" -o "$TD/s.time" timeout "$TT" \
    ib_send_bw -R -d "$RXE_DEV" -s "$IB_MSG" -n "$ITERS" -p "$PORT" $IB_EVENTS "$ADDR"
}

# librdmacm's rcopy (rsockets): the server never exits by itself; the client copies the
# regular file $FILE_SRC (it mmaps it) into $FILE_DST on the server (mmapped too).
# Both names must differ: the server truncates its destination.
recv_rcopy() {
  exec /usr/bin/time -f "$TFMT" -o "$TD/r.time" timeout "$TT" rcopy -p "$PORT"
}
send_rcopy() {
  exec /usr/bin/time -f "$TFMT" -o "$TD/s.time" timeout "$TT" rcopy "$FILE_SRC" "$ADDR:$FILE_DST" -p "$PORT"
}

# check_wc: fail the trial if `wc -c` did not count exactly BYTES
check_wc() {
  local n
  n=$(tr -d ' ' < "$TD/wc" 2>/dev/null || true)
  if [ "$TRIAL_OK" = 1 ] && [ "$n" != "$BYTES" ]; then
    TRIAL_OK=0 TRIAL_NOTE="wc -c counted ${n:-nothing}, expected $BYTES"
  fi
}

# files_for BYTES: FILE_SRC, a file of BYTES zeros in $FILE_DIR (tmpfs: made once, outside
# the timing), and FILE_DST, a fresh destination name beside it
files_for() {
  : "${FILE_DIR:?set by the caller: a tmpfs dir for the file-fed tools}"
  FILE_SRC=$FILE_DIR/src.$1 FILE_DST=$FILE_DIR/dst
  if [ ! -f "$FILE_SRC" ]; then head -c "$1" /dev/zero > "$FILE_SRC"; fi
  rm -f "$FILE_DST"
}

# check_dst: fail the trial unless $FILE_DST holds exactly BYTES bytes; then remove it
check_dst() {
  local n
  n=$(stat -c %s "$FILE_DST" 2>/dev/null || echo 0)
  if [ "$TRIAL_OK" = 1 ] && [ "$n" != "$BYTES" ]; then
    TRIAL_OK=0 TRIAL_NOTE="$FILE_DST holds $n bytes, expected $BYTES"
  fi
  rm -f "$FILE_DST"
}

# The message size of ib_send_bw: $IB_SIZE if set (K/M suffixes), else the chunk rdmapipe
# negotiated in its first successful run of this environment (RP_CHUNK_SEEN: the warm-up,
# when rdmapipe comes before ib_send_bw in the tool list), else 4 MiB, rdmapipe's default
# chunk where locked memory is unlimited. A tool name ending in -64k (ib_send_bw-e-64k)
# fixes 64 KiB, for rdmapipe-64k.
RP_CHUNK_SEEN=

# trial ENV TOOL RUN BYTES: one measured run of TOOL, recorded in $BENCH_TSV.
# $RP_LISTEN says how to wait for rdmarecv (tcp or cm).
trial() {
  local env=$1 tool=$2 run=$3 bytes=$4 self=- c
  case $tool in
    pipe)
      pipe_only "$env" "$run" "$bytes"; return 0 ;;
    rdmapipe|rdmapipe-before|rdmapipe-wc|rdmapipe-busy|rdmapipe-send|rdmapipe-64k|rdmapipe-file|rdmapipe-f2f)
      RP_BIN=$BENCH_BIN RP_ARGS=() RP_IN=pipe RP_OUT=null
      case $tool in
        rdmapipe-before) RP_BIN=${BEFORE_BIN:?rdmapipe-before needs BEFORE_BIN} ;;
        rdmapipe-wc)   RP_OUT="wc" ;;
        rdmapipe-busy) RP_ARGS=(--busy-poll) ;;
        rdmapipe-send) RP_ARGS=(--rdma-op send) ;;
        rdmapipe-64k)  RP_ARGS=(--chunk-size 64K) ;;
        rdmapipe-file) RP_IN="file" ;;
        rdmapipe-f2f)  RP_IN="file" RP_OUT="file" ;;
      esac
      if [ "$RP_IN" = file ]; then files_for "$bytes"; fi
      run_pair "$env" "$tool" "$run" "$bytes" "$RP_LISTEN" recv_rdmapipe send_rdmapipe
      case $RP_OUT in
        wc)   check_wc ;;
        file) check_dst ;;
      esac
      # --stats-json's rate is in MiB/s; the tables' MB/s are 10^6 B/s, as perftest's
      self=$(json_num "$TD/s.json" mib_per_s)
      [ "$self" = - ] || self=$(awk -v m="$self" 'BEGIN { printf "%.3f", m * 1.048576 }')
      c=$(json_num "$TD/s.json" chunk)
      if [ "$tool" = rdmapipe ] && [ "$TRIAL_OK" = 1 ] && [ -z "$RP_CHUNK_SEEN" ] && [ "$c" != - ]; then
        RP_CHUNK_SEEN=$c
      fi ;;
    socat)
      run_pair "$env" "$tool" "$run" "$bytes" tcp recv_socat send_socat ;;
    socat-wc)
      run_pair "$env" "$tool" "$run" "$bytes" tcp recv_socat_wc send_socat
      check_wc ;;
    nc)
      run_pair "$env" "$tool" "$run" "$bytes" tcp recv_nc send_nc ;;
    nc-f2f)
      files_for "$bytes"
      run_pair "$env" "$tool" "$run" "$bytes" tcp recv_nc_f2f send_nc_f2f
      check_dst ;;
    mbuffer)
      run_pair "$env" "$tool" "$run" "$bytes" tcp recv_mbuffer send_mbuffer ;;
    ib_send_bw|ib_send_bw-e|ib_send_bw-64k|ib_send_bw-e-64k)
      case $tool in
        *-64k) IB_MSG=65536 ;;
        *)     IB_MSG=$(to_bytes "${IB_SIZE:-${RP_CHUNK_SEEN:-4194304}}") ;;
      esac
      ITERS=$((bytes / IB_MSG))
      if [ "$ITERS" -lt 5 ]; then ITERS=5; fi   # perftest's minimum
      IB_EVENTS=
      case $tool in ib_send_bw-e*) IB_EVENTS=-e ;; esac
      run_pair "$env" "$tool" "$run" $((ITERS * IB_MSG)) cm recv_ib_send_bw send_ib_send_bw
      # the client's line under "#bytes #iterations BW peak[MB/sec] BW average[MB/sec]
      # MsgRate[Mpps]"; perftest's MB is 2^20 bytes: converted to 1e6
      self=$(awk -v s="$IB_MSG" '$1 == s && NF >= 5 { v = $4 * 1.048576 } END { if (v) printf "%.2f", v; else print "-" }' "$TD/s.out" 2>/dev/null || echo -)
      if [ "$self" = - ] && [ "$TRIAL_OK" = 1 ]; then TRIAL_OK=0 TRIAL_NOTE="no BW line in ib_send_bw's output"; fi ;;
    rcopy)
      files_for "$bytes"
      run_pair "$env" "$tool" "$run" "$bytes" cm recv_rcopy send_rcopy rcopy
      # "N bytes in S seconds = G Gb/sec", Gb = 1e9 bits; its timer runs from the first
      # rsend of the data to the server's acknowledgement (no start-up, no connect)
      self=$(awk '/bytes in .* seconds = / { v = $(NF - 1) * 125 } END { if (v) printf "%.2f", v; else print "-" }' "$TD/s.out" 2>/dev/null || echo -)
      check_dst ;;
    *)
      echo "bench: unknown tool $tool" >&2; return 1 ;;
  esac
  record_pair "$env" "$tool" "$run" "$self"
}

# bench_env ENV BYTES RUNS TOOL...: a warm-up of every tool (8 MiB, recorded as run 0,
# which the report leaves out of the medians: it loads the binaries and libraries into the
# page cache), then RUNS rounds, each running every tool once (interleaved, so that slow
# phases of a noisy machine hit all tools alike)
bench_env() {
  local env=$1 bytes=$2 runs=$3 tool run
  shift 3
  for tool in "$@"; do
    trial "$env" "$tool" 0 $((8 * 1048576))
  done
  for ((run = 1; run <= runs; run++)); do
    for tool in "$@"; do
      trial "$env" "$tool" "$run" "$bytes"
    done
  done
}
