#!/usr/bin/env bash
# delay.sh - `make test-delay`: streams of 32 MiB across the two-host rxe wire (wire.sh)
# with a fixed netem delay on both veths (DELAY_MS, default 5, 20 and 50 ms each way),
# DELAY_RUNS times per delay (default 20), in one SoftRoCE VM boot. Reports, per delay, how
# many streams completed exactly (every byte written, both sides exit 0) and fails if any
# did not. The test is TestDelay in test/e2e/delay_test.go; make test-rdma runs it too,
# once per delay.
#
# env: DELAY_RUNS (20), DELAY_MS (5,20,50), DELAY_TRANSPORTS (rdma; or rdma,tcp),
#      DELAY_BIN (a dir with rdmasend and rdmarecv to measure instead of this checkout's,
#      e.g. an older build), VM_TIMEOUT (default from the number of runs)
set -euo pipefail
cd "$(dirname "$0")/../.."
export RXE_WORK=${RXE_WORK:-$PWD/.cache/softroce}
dir=$RXE_WORK/delay
rm -rf "$dir"
mkdir -p "$dir"
go build -o "$dir/" ./cmd/rdmasend ./cmd/rdmarecv
go test -c -o "$dir/e2e.test" ./test/e2e
export RDMAPIPE_DELAY_RUNS=${DELAY_RUNS:-20} RDMAPIPE_DELAY_MS=${DELAY_MS:-5,20,50}
export RDMAPIPE_DELAY_TRANSPORTS=${DELAY_TRANSPORTS:-rdma}
# the input stays in the guest's /tmp (RAM): reading it through 9p would slow the streams
export RDMAPIPE_BIN=${DELAY_BIN:-$dir} RDMAPIPE_DELAY_RESULTS=$dir/delay-results.txt
ndelays=$(tr ',' '\n' <<<"$RDMAPIPE_DELAY_MS" | wc -l)
ntr=$(tr ',' '\n' <<<"$RDMAPIPE_DELAY_TRANSPORTS" | wc -l)
# a stream takes ~5-15 s in the VM; a failed one at most its bounds (delay_test.go)
rc=0
VM_WIRE=1 VM_TIMEOUT=${VM_TIMEOUT:-$((300 + RDMAPIPE_DELAY_RUNS * ndelays * ntr * 30))} \
  VM_ENV="RDMAPIPE_DELAY_RUNS RDMAPIPE_DELAY_MS RDMAPIPE_DELAY_TRANSPORTS RDMAPIPE_BIN RDMAPIPE_DELAY_RESULTS" \
  test/softroce/vm-run.sh "$dir/e2e.test" -test.run '^TestDelay$' -test.v -test.timeout 0 || rc=$?
echo "== make test-delay ($RDMAPIPE_BIN):"
cat "$dir/delay-results.txt" 2>/dev/null || echo "(no results)"
exit $rc
