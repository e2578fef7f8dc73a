#!/usr/bin/env bash
# bench/needs.sh - what a host needs at line rate (issue 47; `make bench-needs`): each side's
# CPU per byte in each mode, from BenchmarkCeiling (pipe/ceiling_bench_test.go: the sender
# from a page-cached file, the receiver into /dev/null, unkeyed, keyed and encrypted) and
# BenchmarkEnds (pipe/ends_bench_test.go: the sender from a pipe, the receiver into a file
# with O_DIRECT, into a file through the page cache, into a pipe, unkeyed; a relay), at
# GOMAXPROCS = the cores present, COUNT rounds. Prints a markdown table: GB per
# CPU-second (median of the rounds) and the cores one side needs for 100, 200 and 400
# Gb/s. A keyed or encrypted stream from or to a pipe or file is derived (marked ~): the
# row's unkeyed cost per byte plus what the key adds to the /dev/null receiver's or the
# file sender's.
# CPU-seconds do not depend on the machine's load as wall time does; cores above the
# host's count mean the host cannot keep up alone. The cores are what the work would take
# spread over them perfectly: a pipe is read, or written, by one thread at a time, so a
# stream from or to a pipe goes no faster than one core's row whatever the cores. The
# relay rows are a receiver into /dev/null that sends the stream on to a fake next
# receiver (BenchmarkEnds relay/*), its receiving and its sending in one process's CPU:
# zero-copy from its receive buffers as over RDMA, or copied into its send buffers as over
# TCP and whenever it is encrypted.
#
#   bench/needs.sh                 # COUNT=3 BENCHTIME=1s
# env: COUNT (rounds, default 3), BENCHTIME (-test.benchtime, default 1s), GO (default go)
set -euo pipefail
cd "$(dirname "$0")/.."
GO=${GO:-go}
COUNT=${COUNT:-3}
BENCHTIME=${BENCHTIME:-1s}
[[ $COUNT =~ ^[1-9][0-9]*$ ]] || { echo "needs: COUNT must be a positive number" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$GO" test -c -o "$tmp/pipe.test" ./pipe
load=$(cut -d' ' -f1-3 /proc/loadavg)
(cd pipe && "$tmp/pipe.test" -test.run '^$' -test.bench '^Benchmark(Ceiling|Ends)$' -test.cpu "$(nproc)" \
	-test.count "$COUNT" -test.benchtime "$BENCHTIME") | tee "$tmp/raw" >&2
awk -v cores="$(nproc)" -v count="$COUNT" -v load="$load" -v load_end="$(cut -d' ' -f1-3 /proc/loadavg)" \
	-v commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown)" '
$1 ~ /^Benchmark(Ceiling|Ends)\// {
	name = $1
	sub(/^Benchmark(Ceiling|Ends)\//, "", name)
	sub(/-[0-9]+$/, "", name)
	for (i = 2; i <= NF; i++)
		if ($i == "GB/cpu-s")
			v[name] = v[name] " " $(i - 1)
}
function median(list,    x, n, i, j, t) {
	n = split(list, x, " ")
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && x[j - 1] + 0 > x[j] + 0; j--) {
			t = x[j]; x[j] = x[j - 1]; x[j - 1] = t
		}
	return n == 0 ? 0 : n % 2 ? x[(n + 1) / 2] : (x[n / 2] + x[n / 2 + 1]) / 2
}
function cell(gbc, gbps) { return (gbc > 0 ? sprintf("%.1f", gbps / 8 / gbc) : "-") }
function row(label, gbc, derived) {
	printf "| %s | %s%s | %s | %s | %s |\n", label, (derived ? "~" : ""), (gbc > 0 ? sprintf("%.2f", gbc) : "-"), cell(gbc, 100), cell(gbc, 200), cell(gbc, 400)
}
# with returns the GB per CPU-s of an I/O row whose unkeyed rate is io, with the
# extra CPU-s per GB that a key adds where key and base are measured
function with(io, key, base) { return io > 0 && key > 0 && base > 0 ? 1 / (1 / io + 1 / key - 1 / base) : 0 }
END {
	for (k in v)
		m[k] = median(v[k])
	printf "## What a host needs at line rate\n\n"
	printf "%d round(s) at GOMAXPROCS %d (the cores present), commit %s, load %s -> %s. GB per CPU-second of one side (bytes over its process'"'"'s user+system time), and the cores it needs for a stream at each rate, spread perfectly (a pipe is one thread: no faster than one core'"'"'s rate); ~: derived (see bench/needs.sh).\n\n", count, cores, commit, load, load_end
	printf "| side, input or output | GB per CPU-s | cores at 100 Gb/s | 200 Gb/s | 400 Gb/s |\n|---|---:|---:|---:|---:|\n"
	split("unkeyed keyed encrypted", modes, " ")
	for (i = 1; i <= 3; i++) {
		mo = modes[i]
		row("sender, a page-cached file (pread), " mo, m["sender/" mo], 0)
		row("sender, a pipe, " mo, i == 1 ? m["sender/pipe"] : with(m["sender/pipe"], m["sender/" mo], m["sender/unkeyed"]), i > 1)
	}
	for (i = 1; i <= 3; i++) {
		mo = modes[i]
		row("receiver, /dev/null, " mo, m["receiver/" mo], 0)
		row("receiver, a file with O_DIRECT, " mo, i == 1 ? m["receiver/file"] : with(m["receiver/file"], m["receiver/" mo], m["receiver/unkeyed"]), i > 1)
		row("receiver, a file through the page cache, " mo, i == 1 ? m["receiver/file-cached"] : with(m["receiver/file-cached"], m["receiver/" mo], m["receiver/unkeyed"]), i > 1)
		row("receiver, a pipe, " mo, i == 1 ? m["receiver/pipe"] : with(m["receiver/pipe"], m["receiver/" mo], m["receiver/unkeyed"]), i > 1)
	}
	row("relay into /dev/null, zero-copy (RDMA), unkeyed", m["relay/unkeyed"], 0)
	row("relay into /dev/null, zero-copy (RDMA), keyed", m["relay/keyed"], 0)
	row("relay into /dev/null, one copy (TCP), unkeyed", m["relay/copy"], 0)
	row("relay into /dev/null, one copy, encrypted", m["relay/encrypted"], 0)
}' "$tmp/raw"
