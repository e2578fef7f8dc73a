#!/usr/bin/env bash
# Runs the RDMA suites in one SoftRoCE VM boot: the rdma transport's own tests,
# then the end-to-end suite (test/e2e) with --transport rdma against rxe0.
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

cat > "$suite/run.sh" <<GUEST
#!/bin/bash
# Runs inside the VM: RXE_IP is the address of rxe0's network interface.
set -u
cd "$suite"
status=0
echo "== rdma transport tests on \$RXE_DEV"
./rdma.test -test.timeout 5m || status=1
echo "== end-to-end suite over --transport rdma to \$RXE_IP"
RDMAPIPE_E2E_TRANSPORT=rdma RDMAPIPE_E2E_HOST=\$RXE_IP RDMAPIPE_BIN="$suite" RDMAPIPE_E2E_BIG_MIB=64 \\
  ./e2e.test -test.timeout 8m -test.v || status=1
exit \$status
GUEST
chmod +x "$suite/run.sh"
VM_TIMEOUT=${VM_TIMEOUT:-900} test/softroce/vm-run.sh "$suite/run.sh"
