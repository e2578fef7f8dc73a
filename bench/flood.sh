#!/usr/bin/env bash
# flood.sh: what a connect flood costs a keyed rdmarecv -k over TCP, and
# whether a real sender, which holds the key, still gets through. Opens
# FLOOD (default 1000) connections (half silent, half with a proposal and
# then silent), streams SIZE (default 256 MiB) through while they are held,
# and prints the receiver's peak RSS and the sender's time, against the
# same stream with no flood.
set -euo pipefail
cd "$(dirname "$0")/.."
FLOOD=${FLOOD:-1000}
SIZE=${SIZE:-256M}
PORT=${PORT:-18951}
bin=$(mktemp -d)
trap 'rm -rf "$bin"; kill $(jobs -p) 2>/dev/null || true' EXIT
go build -o "$bin/" ./cmd/rdmasend ./cmd/rdmarecv ./bench/flood
ulimit -n 8192
head -c 32 /dev/urandom | base64 > "$bin/key"
chmod 600 "$bin/key"

run() { # $1: flood or none
	"$bin/rdmarecv" --transport tcp -k -v --key-file "$bin/key" --port "$PORT" --bind 127.0.0.1 > /dev/null 2> "$bin/recv.log" &
	local rpid=$!
	until grep -q "listening on" "$bin/recv.log"; do sleep 0.05; done
	local hold
	if [ "$1" = flood ]; then
		mkfifo "$bin/hold"
		"$bin/flood" -addr "127.0.0.1:$PORT" -n "$FLOOD" < "$bin/hold" > "$bin/flood.log" &
		exec 9> "$bin/hold"
		until grep -q "connections open" "$bin/flood.log"; do sleep 0.05; done
		cat "$bin/flood.log"
	fi
	local t0 t1
	t0=$(date +%s.%N)
	head -c "$SIZE" /dev/zero | "$bin/rdmasend" --transport tcp --key-file "$bin/key" --wait 120s --port "$PORT" 127.0.0.1
	t1=$(date +%s.%N)
	local hwm
	hwm=$(awk '/VmHWM/ {print $2, $3}' "/proc/$rpid/status")
	echo "$1: sender took $(echo "$t1 - $t0" | bc) s; receiver peak RSS $hwm"
	if [ "$1" = flood ]; then exec 9>&-; rm -f "$bin/hold"; fi
	kill "$rpid"; wait "$rpid" 2>/dev/null || true
}
run none
run flood
