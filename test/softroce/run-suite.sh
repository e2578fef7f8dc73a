#!/usr/bin/env bash
# Runs the RDMA suites in one SoftRoCE VM boot: the rdma transport's own tests,
# then the end-to-end suite (test/e2e) with --transport rdma against rxe0, then
# the fault tests (test/e2e/fault_test.go) over rdma and tcp on the two-host
# wire that wire.sh sets up (veth pair, rxeA 10.0.9.1 <-> rxeB 10.0.9.2), and
# last, with every rxe device removed, rdmasend --check on a host without RDMA.
# FAULT_RUN=REGEXP narrows the fault tests (-test.run); FAULT_ONLY=1 runs only them.
# Everything is compiled on the host; the VM only runs binaries.
# `make test-rdma` calls this after `make build`. Needs root (see vm-run.sh).
set -euo pipefail
cd "$(dirname "$0")/../.."
export RXE_WORK=${RXE_WORK:-$PWD/.cache/softroce}
suite=$RXE_WORK/suite
rm -rf "$suite"
mkdir -p "$suite"

go build -o "$suite/" ./cmd/rdmasend ./cmd/rdmarecv
go test -c -o "$suite/rdma.test" ./pipe/transport/rdma
go test -c -o "$suite/e2e.test" ./test/e2e
cp test/softroce/wire.sh "$suite/"

cat > "$suite/run.sh" <<GUEST
#!/bin/bash
# Runs inside the VM: RXE_IP is the address of rxe0's network interface.
set -u
cd "$suite"
status=0
# section NAME CMD...: runs CMD, says how long it took, remembers a failure
section() {
  local name=\$1 t0=\$SECONDS rc=0
  shift
  echo "== \$name"
  "\$@" || rc=\$?
  echo "== \$name: exit status \$rc after \$((SECONDS - t0))s"
  [ \$rc = 0 ] || status=1
}
if [ "${FAULT_ONLY:-0}" != 1 ]; then
  section "rdma transport tests on \$RXE_DEV" ./rdma.test -test.timeout 5m
  RDMAPIPE_E2E_TRANSPORT=rdma RDMAPIPE_E2E_HOST=\$RXE_IP RDMAPIPE_BIN="$suite" RDMAPIPE_E2E_BIG_MIB=64 \\
    section "end-to-end suite over --transport rdma to \$RXE_IP" ./e2e.test -test.timeout 8m -test.v
fi
# the two-host wire; its variables (WIRE_A, WIRE_B, WIRE_SCRIPT) go to the fault tests
if wire=\$(bash ./wire.sh up); then
  export \$wire
  echo "== wire: \$wire"
  RDMAPIPE_BIN="$suite" RDMAPIPE_E2E_WORK="$suite/fault" \\
    section "fault tests on the wire, rdma and tcp" ./e2e.test -test.timeout 6m -test.v -test.run '${FAULT_RUN:-^TestFault}'
  echo "== fault results (seconds from the fault to the exit):"
  cat "$suite/fault/fault-results.txt" 2>/dev/null
else
  echo "== wire.sh up failed"
  status=1
fi
# last, since it removes every RDMA device: --check on a host without one
for dev in \$(rdma -j link show | grep -o '"ifname":"[^"]*"' | cut -d'"' -f4); do rdma link delete "\$dev"; done
RDMAPIPE_BIN="$suite" RDMAPIPE_E2E_HOST=\$RXE_IP \\
  section "--check without RDMA devices" ./e2e.test -test.timeout 2m -test.v -test.run '^TestCheckNoDevice\$'
exit \$status
GUEST
chmod +x "$suite/run.sh"
VM_TIMEOUT=${VM_TIMEOUT:-900} test/softroce/vm-run.sh "$suite/run.sh"
