#!/usr/bin/env bash
# Local demo of the main job: a receiver on loopback writes the stream to
# sha256sum, a sender streams generated data to it, both print a summary,
# and the two checksums are compared. `make demo` runs it after building.
# SIZE (default 256M), PORT (default 18800), HOST (default 127.0.0.1) and
# TRANSPORT (default auto) can be set in the environment; `make demo-rdma`
# runs it in the SoftRoCE VM with HOST set to the rxe address.
set -euo pipefail
cd "$(dirname "$0")/.."
size=${SIZE:-256M}
port=${PORT:-18800}
host=${HOST:-127.0.0.1}
transport=${TRANSPORT:-auto}
work=$(mktemp -d)
trap 'rm -rf "$work"; kill $(jobs -p) 2>/dev/null || true' EXIT

echo "== rdmarecv on $host:$port, writing to sha256sum"
(bin/rdmarecv -v --transport "$transport" --bind "$host" --port "$port" | sha256sum > "$work/received") &
recv_pid=$!

echo "== rdmasend: $size of pseudo-random data"
head -c "$size" /dev/urandom > "$work/input"
sha256sum < "$work/input" > "$work/sent"
bin/rdmasend -v --transport "$transport" --wait 10s --port "$port" "$host" < "$work/input"
wait "$recv_pid"

echo "== sha256 sent:     $(cut -c1-64 "$work/sent")"
echo "== sha256 received: $(cut -c1-64 "$work/received")"
if cmp -s "$work/sent" "$work/received"; then
  echo "== OK: the stream arrived intact"
else
  echo "== MISMATCH" >&2
  exit 1
fi
