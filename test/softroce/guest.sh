#!/bin/bash
# guest.sh - runs inside the VM (host userland, after switch_root): sets up SoftRoCE, runs
# the user's command, reports its exit status through the run dir. vm-run.sh copies this
# file into the run dir; its only argument is that dir.
#
# Run dir protocol (all files written by vm-run.sh on the host, except the last three):
#   vars       shell assignments: VMRUN_TOKEN, PATH, RXE_WORK, VM_WIRE, VM_SIW, forwarded VM_ENV variables
#   cmd        bash script: cd to the host's current directory, then the command
#   modprobe   kernel usermode-helper modprobe pointing at the unpacked kernel tree
#   wire.sh    the two-host wire, set up when vars says VM_WIRE=1
#   exit-code  (guest) the command's exit status
#   setup-error (guest) why the command was not run, if it was not
#   dmesg      (guest) the kernel log at the end of the run
#
# stdout/stderr go to hvc0, a virtio console that qemu connects to vm-run.sh (the kernel's
# own console is ttyS0, logged to a file). Lines that contain VMRUN_TOKEN are harness
# lines; vm-run.sh routes them to the host's stderr and everything between the "begin" and
# "end" lines (the command's output) to its stdout.
RUN=$1
# shellcheck source=/dev/null
. "$RUN/vars"

say() { echo "$VMRUN_TOKEN $(cut -d' ' -f1 /proc/uptime)s $*"; }
setup_fail() {
  say "setup failed: $*"
  echo "$*" > "$RUN/setup-error"
  dmesg > "$RUN/dmesg" 2>&1
  exit 1
}

export HOME=/tmp TERM=dumb LANG=C.UTF-8
ulimit -l unlimited   # verbs memory registration pins pages
ulimit -n 65536
# devtmpfs has no /dev/fd links; bash process substitution and /dev/stdin need them
ln -sf /proc/self/fd /dev/fd
ln -sf /proc/self/fd/0 /dev/stdin
ln -sf /proc/self/fd/1 /dev/stdout
ln -sf /proc/self/fd/2 /dev/stderr
# Output goes through a tty so programs keep line buffering, but without the tty's
# LF -> CRLF translation: the host gets the bytes the command wrote.
if [ -c /dev/hvc0 ]; then
  exec >/dev/hvc0 2>&1
else
  echo "guest.sh: no /dev/hvc0 (virtio_console not loaded?); output goes to the kernel console"
fi
stty -onlcr -echo 2>/dev/null <&1

# SoftRoCE on a dummy interface. rdma_cm cannot connect to 127.0.0.1 over rxe, so the
# tests use 10.0.3.1: two processes in this VM reach each other through it.
# rdma_link DEV TYPE NETDEV ADDR: put ADDR on the (up) dummy NETDEV and an RDMA device
# DEV of TYPE (rxe, siw) on it, and wait (briefly) until its port is ACTIVE: the port
# follows the netdev's state.
rdma_link() {
  ip link set "$3" up || setup_fail "ip link set $3 up"
  ip addr add "$4" dev "$3" || setup_fail "ip addr add $4 dev $3"
  rdma link add "$1" type "$2" netdev "$3" || setup_fail "rdma link add $1 type $2 netdev $3"
  for _ in $(seq 50); do
    rdma link show "$1/1" 2>/dev/null | grep -q 'state ACTIVE' && return
    sleep 0.1
  done
  setup_fail "$1 port not ACTIVE: $(rdma link show "$1/1" 2>&1)"
}

ip link set lo up || setup_fail "ip link set lo up"
ip link show dummy0 >/dev/null 2>&1 || setup_fail "no dummy0 (dummy module not loaded?)"
rdma_link rxe0 rxe dummy0 10.0.3.1/24
export RXE_DEV=rxe0 RXE_IP=10.0.3.1 RXE_WORK

say "rxe0 ready on dummy0 $RXE_IP (root: $(cat /run/vm-root-mode 2>/dev/null), $(nproc) CPUs)"
# VM_SIW=1: soft-iWARP beside it, siw0 on dummy1 (vm-run.sh built siw.ko into the kernel
# tree; the kernel's modprobe helper loads it from there)
if [ "${VM_SIW:-0}" = 1 ]; then
  "$(cat /proc/sys/kernel/modprobe)" siw || setup_fail "modprobe siw (VM_SIW=1)"
  ip link add dummy1 type dummy || setup_fail "ip link add dummy1 type dummy"
  rdma_link siw0 siw dummy1 10.0.5.1/24
  export SIW_DEV=siw0 SIW_IP=10.0.5.1
  say "siw0 ready on dummy1 $SIW_IP"
fi
# VM_WIRE=1: two "hosts" on a veth pair (see wire.sh); its variables go to the command
if [ "${VM_WIRE:-0}" = 1 ]; then
  wire=$(bash "$RUN/wire.sh" up 2>&1) || setup_fail "wire.sh up: $wire"
  wire=$(tail -n 1 <<<"$wire")
  # shellcheck disable=SC2163,SC2086  # the line is NAME=value pairs without spaces
  export $wire
  say "wire ready: $wire"
fi
say "begin"
# stdin is /dev/null: the host's stdin is not forwarded, and a command reading the console
# would otherwise wait forever
bash "$RUN/cmd" </dev/null
rc=$?
say "end: exit status $rc"
dmesg > "$RUN/dmesg" 2>&1
echo "$rc" > "$RUN/exit-code"
sync
