#!/usr/bin/env bash
# Runs the RDMA suites in one SoftRoCE VM boot (`make test-rdma`, after `make build`).
# SUITE=quick (`make test`) runs what only the VM can prove, each once; SUITE=full
# (`make test-full`) runs everything below. README.md beside this file says what runs
# where, and why.
#  1. the rdma transport's own tests on rxe0 (RoCE), then on siw0 (soft-iWARP): the
#     transport's contract on both (both suites);
#  2. the end-to-end suite (test/e2e) with --transport rdma against rxe0, then against
#     siw0 (iWARP: no immediate data, so rdmapipe sends its data with SEND; no
#     receiver-not-ready retry); quick: each data path mode (write, send, events, busy-poll,
#     several QPs) end to end, keys and encryption, a relay, a broadcast with a killed hop
#     and its repair, memory limits, --check with devices; full: all of it;
#  3. rdmacp's tests (test/rdmacp) with --transport rdma: sshd, started by the tests, listens
#     on rxe0's address (then siw0's), so the remote side listens there and the local side
#     connects there over rdma_cm; -short leaves out the 1 GiB copy (the guest's writable
#     filesystem is in its RAM); quick: a copy up and down, a tree, a copy between two
#     other hosts, and what a lying remote side cannot make us write;
#  4. on the two-host wire that wire.sh sets up (veth pair, rxeA 10.0.9.1 <-> rxeB
#     10.0.9.2): full only, the fault tests (test/e2e/fault_test.go) over rdma and tcp, and
#     the delay test (delay_test.go: 32 MiB streams at 5, 20 and 50 ms each way, DELAY_RUNS
#     times each; `make test-delay` runs it 20 times); then (both suites) a second wire
#     beside it (`wire.sh second`: rxeC 10.0.10.1 <-> rxeD 10.0.10.2) and streams striped
#     over two devices on each side (TestTwoDevices, and TestStripeDevices with the
#     commands);
#  5. full only, last, with every RDMA device removed: rdmasend --check on a host without
#     RDMA (the host's own make test-unit runs it where no module is loaded).
# env: SUITE (quick); FAULT_RUN=REGEXP narrows the fault tests (-test.run); FAULT_ONLY=1
#      runs only them (and the delay test); SIW=0 leaves soft-iWARP out (no siw.ko build, no
#      siw sections); E2E_RUN, SIW_RUN, CP_RUN, SIW_CP_RUN: -test.run of the e2e suite over
#      rxe and siw and of rdmacp's over rxe and siw (defaults per SUITE below);
#      SIW_RDMA_SKIP: -test.skip of the rdma transport tests over siw; DELAY_RUNS (1): runs per
#      delay of the delay test, 0 to leave it out; CP_ONLY=1 runs only rdmacp's tests;
#      VM_PARALLEL: how many of the e2e and rdmacp tests that may run in parallel do at a
#      time in the VM (quick: 2, on the guest's 2 CPUs; full: 1, the bounds of its other
#      tests were set for one at a time).
# Every test runs with RDMAPIPE_STRICT=1: a missing precondition fails, never skips.
# Everything is compiled on the host; the VM only runs binaries. Needs root (see vm-run.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export RXE_WORK=${RXE_WORK:-$PWD/.cache/softroce}
suite=$RXE_WORK/suite
rm -rf "$suite"
mkdir -p "$suite"

SUITE=${SUITE:-quick}
case $SUITE in
quick)
  E2E_RUN=${E2E_RUN:-'^(TestBigStream|TestKeys|TestRelay|TestRelayLagSpills|TestRelaySlowHostLeaves|TestBroadcastHopKilled|TestBroadcastRepair|TestChunkUnderMemlock|TestRelayUnderMemlock|TestCheckMemlock|TestCheckReceiver|TestCheckAgainstReceiver|TestAutoTransport)$'}
  # The refusals of TestKeys (a wrong or missing key, an unencrypted sender) are the
  # engine's, above the transport: the host runs them over TCP.
  E2E_SKIP='^TestKeys$/^(wrong_key|sender_without_key|receiver_without_key|receiver_requires_encryption)$'
  SIW_RUN=${SIW_RUN:-'^(TestBigStream|TestKeys|TestCheckReceiver)$'}
  # A file up (TestCopyFile) and a file and a tree down (TestDownload), a window
  # under a memlock limit (TestUnderMemlock), and a lying remote side's stream
  # (TestHostileRemote's entry and resume through a link: its other cases are refusals
  # of plans and names, the same over any transport; TestHostileOffer), and a copy between two other hosts
  # straight over rdma_cm, alone and down a chain (TestBetweenTransport): the other
  # downloads differ in their plans, which the host runs over TCP.
  CP_RUN=${CP_RUN:-'^(TestCopyFile|TestDownload|TestTransport|TestUnderMemlock|TestHostileRemote|TestHostileOffer|TestBetweenTransport)$'}
  CP_SKIP='^TestDownload$/^(file_to_a_new_name,_-p|empty_file|unencrypted|tree_to_a_new_name|several_sources|tree_as_dir|several_files_without_-r)|^TestHostileRemote$/^(an_archive|a_file|a_directory|a_name|an_entry_outside|a_hard_link|a_resume_that)'
  SIW_CP_RUN=${SIW_CP_RUN:-'^TestTransport$'}
  BIG_MIB=16 VM_TIMEOUT=${VM_TIMEOUT:-2400} VM_PARALLEL=${VM_PARALLEL:-2} ;;
full)
  # Left out over rxe: the command-line tests that use no transport (help, man pages,
  # completions, usage errors), which make test-unit runs on the host.
  E2E_RUN=${E2E_RUN:-'.'}
  E2E_SKIP='^(TestVersionHelpDocs|TestUsage|TestRelayUsage)$'
  # Over iWARP only what it changes (README.md beside this file says why each): the data
  # path (SEND, no immediate data) in every mode and size and at volume, keys and
  # encryption over it, relays and broadcast and their repair, a side killed or
  # interrupted, memory registration, --check of a receiver, and the listener that holds
  # the TCP port of its number (busy port, --transport auto, -k). The rest runs over rxe
  # above the same transport interface.
  SIW_RUN=${SIW_RUN:-'^(TestSizes|TestBigStream|TestKeys|TestRelay|TestForward|TestForwardHopKilled|TestBroadcast|TestBroadcastRepair|TestBroadcastHopKilled|TestSenderKilled|TestReceiverKilled|TestInterrupt|TestChunkUnderMemlock|TestCheckMemlock|TestCheckReceiver|TestBusyPort|TestAutoTransport|TestKeepListening|TestNothingListening)$'}
  # Left out over rxe: the resume cases whose difference is in the plan, not the stream (a
  # source changed before the resume, a tree to a new name), which make test-unit runs on
  # the host with 64 MiB and 6 x 64 MiB.
  CP_RUN=${CP_RUN:-'.'}
  CP_SKIP='^TestResume$/source_changed$|^TestResumeTree$/^upload_to_a_new_name$'
  # Over siw only what the transport changes: the stream itself, in both directions, a
  # side dying in it, and a relay's new connection to a host after a dead one; the rest
  # (failures before any stream, trees, sparse files, resume plans, the listening address)
  # is the same as over rxe.
  SIW_CP_RUN=${SIW_CP_RUN:-'^(TestCopyFile|TestDownload|TestKilledMidStream|TestCopyToHostDies|TestTransport)$'}
  BIG_MIB=64 VM_TIMEOUT=${VM_TIMEOUT:-4500} VM_PARALLEL=${VM_PARALLEL:-1} ;;
*)
  echo "SUITE=$SUITE: quick or full" >&2
  exit 2 ;;
esac

go build -o "$suite/" ./cmd/rdmasend ./cmd/rdmarecv ./cmd/rdmacp
go test -c -o "$suite/rdma.test" ./pipe/transport/rdma
go test -c -o "$suite/e2e.test" ./test/e2e
go test -c -o "$suite/rdmacp.test" ./test/rdmacp
cp test/softroce/wire.sh "$suite/"

cat > "$suite/run.sh" <<GUEST
#!/bin/bash
# Runs inside the VM: RXE_IP is the address of rxe0's network interface.
set -u
# The binaries run from a copy in the guest's memory: the work dir is shared over 9p
# without a page cache, and each process started from there read its binary over 9p again
# (0.8 s more per start in the TCG guest; the suite starts hundreds).
bin=\$(mktemp -d)
cp "$suite"/{rdmasend,rdmarecv,rdmacp,rdma.test,e2e.test,rdmacp.test,wire.sh} "\$bin/" || exit 1
cd "\$bin"
export RDMAPIPE_STRICT=1 RDMAPIPE_BIN="\$bin"
status=0
# cputime: the guest's CPU time so far, busy and in all (jiffies, /proc/stat)
cputime() { awk '/^cpu / {print \$2+\$3+\$4+\$7+\$8+\$9, \$2+\$3+\$4+\$5+\$6+\$7+\$8+\$9}' /proc/stat; }
# section NAME CMD...: runs CMD, says how long it took and how busy it kept the guest's
# CPUs, remembers a failure
section() {
  local name=\$1 t0=\$SECONDS c0 rc=0 busy
  c0=\$(cputime)
  shift
  echo "== \$name"
  "\$@" || rc=\$?
  busy=\$(awk -v a="\$c0" -v b="\$(cputime)" 'BEGIN { split(a, x); split(b, y); if (y[2] > x[2]) printf "%d", 100 * (y[1] - x[1]) / (y[2] - x[2]) }')
  echo "== \$name: exit status \$rc after \$((SECONDS - t0))s, the CPUs \${busy:-?}% busy"
  [ \$rc = 0 ] || status=1
}
# emptyroot CMD...: CMD in a mount namespace of its own with an empty /root. The rdmacp
# tests' sshd runs root's commands through root's shell, which reads /root/.bashrc: the
# host's, where what a developer added there (pyenv's rehash waits up to 60 s for a lock
# the host may hold, seen through 9p) took 10-70 s of each ssh login in the VM, 3 s without.
emptyroot() {
  local home
  home=\$(mktemp -d)
  unshare -m --propagation private sh -c 'mount --bind "\$0" /root && exec "\$@"' "\$home" "\$@"
}
if [ "${FAULT_ONLY:-0}" != 1 ] && [ "${CP_ONLY:-0}" != 1 ]; then
  section "rdma transport tests on \$RXE_DEV" ./rdma.test -test.timeout 5m
  if [ -n "\${SIW_DEV:-}" ]; then
    # Left out on iWARP (tests that assume RoCE's ways, see README.md): the RDMA WRITE data
    # path (TestConn/write*, TestDataPath, TestRingProtocol: iWARP always takes SEND), and
    # TestStalledPeer (its stalled set-up is an IB/RoCE one that never sends the RTU).
    RXE_DEV=\$SIW_DEV RXE_IP=\$SIW_IP section "rdma transport tests on \$SIW_DEV (soft-iWARP)" \\
      ./rdma.test -test.timeout 5m -test.skip '${SIW_RDMA_SKIP:-^TestConn/write|^TestDataPath\$|^TestRingProtocol\$|^TestStalledPeer\$}'
  fi
  RDMAPIPE_E2E_TRANSPORT=rdma RDMAPIPE_E2E_HOST=\$RXE_IP RDMAPIPE_E2E_BIG_MIB=$BIG_MIB \\
    section "end-to-end suite ($SUITE) over --transport rdma to \$RXE_IP" ./e2e.test -test.timeout 25m -test.parallel $VM_PARALLEL -test.v \\
    -test.run '$E2E_RUN' -test.skip '${E2E_SKIP:-^\$}'
  if [ -n "\${SIW_DEV:-}" ]; then
    RDMAPIPE_E2E_TRANSPORT=rdma RDMAPIPE_E2E_HOST=\$SIW_IP RDMAPIPE_E2E_BIG_MIB=16 \\
      section "end-to-end suite ($SUITE) over --transport rdma to \$SIW_IP (\$SIW_DEV, soft-iWARP)" \\
      ./e2e.test -test.timeout 25m -test.parallel $VM_PARALLEL -test.v -test.run '$SIW_RUN' -test.skip '${E2E_SKIP:-^\$}'
  elif [ "${SIW:-1}" = 1 ]; then
    echo "== no soft-iWARP device (SIW_DEV unset)"
    status=1
  fi
fi
# cptmp_up: mounts on \$cptmp the rdmacp tests' TMPDIR, an ext4 on a sparse image in
# /dev/shm (a tmpfs), through a loop device. The guest's /tmp is a tmpfs of kernel 6.1,
# which refuses the user xattrs that TestKeep* set (tmpfs takes them from 6.6 on), and
# \$RXE_WORK (9p) keeps no sub-second file times, which -p must; ext4 with 256-byte
# inodes has both, and POSIX ACLs. 768 MiB, below /dev/shm's half of the guest's RAM, so
# ext4 runs out before the tmpfs under it: the full suite's rdmacp sections (-short) kept
# at most 108 MiB there (df each second), and -o discard gives what the tests delete back
# to the tmpfs. 1-3 s to make in the TCG guest, under 1 s to take down.
cptmp= cptmp_dev= cptmp_img=/dev/shm/rdmacp-tmp.img
cptmp_up() {
  local modprobe dir
  modprobe=\$(cat /proc/sys/kernel/modprobe)
  "\$modprobe" loop && "\$modprobe" ext4 && truncate -s 768M "\$cptmp_img" &&
    mkfs.ext4 -q -I 256 -O ^has_journal -E nodiscard,lazy_itable_init=0 "\$cptmp_img" &&
    cptmp_dev=\$(losetup -f --show "\$cptmp_img") && dir=\$(mktemp -d) &&
    mount -t ext4 -o discard "\$cptmp_dev" "\$dir" && cptmp=\$dir && chmod 1777 "\$cptmp" &&
    touch "\$cptmp/check" && setfattr -n user.check -v 1 "\$cptmp/check" &&
    setfacl -m u:1234:rwx "\$cptmp/check" && rm "\$cptmp/check"
}
# cptmp_down: unmounts \$cptmp, detaches its loop device and removes its image
cptmp_down() {
  local rc=0
  if [ -n "\$cptmp" ]; then umount "\$cptmp" && rmdir "\$cptmp" || rc=1; fi
  if [ -n "\$cptmp_dev" ]; then losetup -d "\$cptmp_dev" || rc=1; fi
  rm -f "\$cptmp_img" || rc=1
  return \$rc
}
if [ "${FAULT_ONLY:-0}" != 1 ]; then
  # rdmacp through an sshd in the guest on the device's address (test/rdmacp/transport_test.go
  # says how): TestTransport checks -v's "over rdma" and that rxe0's packet counters grew by
  # the copy. -short: no 1 GiB copy, which the guest's RAM-backed filesystem cannot hold.
  # Without the ext4 the suite fails; the tests still run, in /tmp (TestKeep* fail there).
  section "an ext4 in the guest's memory for the rdmacp tests' TMPDIR" cptmp_up
  TMPDIR=\${cptmp:-/tmp} RDMAPIPE_CP_TRANSPORT=rdma RDMAPIPE_CP_HOST=\$RXE_IP RDMAPIPE_CP_DEVICE=\$RXE_DEV \\
    section "rdmacp tests ($SUITE) over --transport rdma to \$RXE_IP, sshd in the guest, TMPDIR \${cptmp:-/tmp}" emptyroot ./rdmacp.test -test.timeout 25m -test.parallel $VM_PARALLEL -test.v -test.short \\
    -test.run '$CP_RUN' -test.skip '${CP_SKIP:-^\$}'
  if [ -n "\${SIW_DEV:-}" ]; then
    TMPDIR=\${cptmp:-/tmp} RDMAPIPE_CP_TRANSPORT=rdma RDMAPIPE_CP_HOST=\$SIW_IP \\
      section "rdmacp tests ($SUITE) over --transport rdma to \$SIW_IP (\$SIW_DEV, soft-iWARP), sshd in the guest" \\
      emptyroot ./rdmacp.test -test.timeout 25m -test.parallel $VM_PARALLEL -test.v -test.short -test.run '$SIW_CP_RUN'
  fi
  section "unmount the rdmacp tests' TMPDIR" cptmp_down
fi
[ "${CP_ONLY:-0}" = 1 ] && exit \$status
# the two-host wire; its variables (WIRE_A, WIRE_B, WIRE_SCRIPT) go to the fault tests
if wire=\$(bash ./wire.sh up); then
  export \$wire
  echo "== wire: \$wire"
  if [ "$SUITE" = full ]; then
    RDMAPIPE_E2E_WORK="$suite/fault" \\
      section "fault tests on the wire, rdma and tcp" ./e2e.test -test.timeout 12m -test.v -test.run '${FAULT_RUN:-^TestFault}'
    echo "== fault results (seconds from the fault to the exit):"
    cat "$suite/fault/fault-results.txt" 2>/dev/null
    if [ "${DELAY_RUNS:-1}" != 0 ]; then
      RDMAPIPE_DELAY_RUNS=${DELAY_RUNS:-1} RDMAPIPE_DELAY_RESULTS="$suite/delay-results.txt" \\
        section "delay test on the wire: 32 MiB streams, 5, 20 and 50 ms each way, ${DELAY_RUNS:-1} per delay" \\
        ./e2e.test -test.timeout 20m -test.v -test.run '^TestDelay\$'
      echo "== delay results:"
      cat "$suite/delay-results.txt" 2>/dev/null
    fi
  fi
  # a second wire beside the first: streams striped over two devices on each side
  if wire2=\$(bash ./wire.sh second); then
    echo "== second wire: \$wire2"
    section "rdma transport over two devices on each side (both wires)" ./rdma.test -test.timeout 3m -test.v -test.run '^TestTwoDevices\$'
    export \$wire2
    RDMAPIPE_E2E_WORK="$suite/fault" \\
      section "rdmasend --device rxeA,rxeC to rdmarecv --device rxeB,rxeD (both wires)" ./e2e.test -test.timeout 3m -test.v -test.run '^TestStripeDevices\$'
  else
    echo "== wire.sh second failed"
    status=1
  fi
else
  echo "== wire.sh up failed"
  status=1
fi
if [ "$SUITE" = full ]; then
  # last, since it removes every RDMA device: --check on a host without one
  for dev in \$(rdma -j link show | grep -o '"ifname":"[^"]*"' | cut -d'"' -f4); do rdma link delete "\$dev"; done
  RDMAPIPE_E2E_HOST=\$RXE_IP \\
    section "--check without RDMA devices" ./e2e.test -test.timeout 2m -test.v -test.run '^TestCheckNoDevice\$'
fi
exit \$status
GUEST
chmod +x "$suite/run.sh"
VM_SIW=${SIW:-1} VM_TIMEOUT=$VM_TIMEOUT test/softroce/vm-run.sh "$suite/run.sh"
