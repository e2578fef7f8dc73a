#!/usr/bin/env bash
# Each side's own ceiling, independent of any network: BenchmarkCeiling
# (pipe/ceiling_bench_test.go) at GOMAXPROCS 1, 2, ... up to the cores
# present, COUNT times each, printed as a markdown table of GB/s (medians)
# with the ratio of all cores to one core. The raw benchmark output goes
# to stderr. See bench/README.md, "Each side's own ceiling".
#
#   bench/ceiling.sh                       # COUNT=3 BENCHTIME=1s CPUS=1,...,nproc PIN=0
#   COUNT=5 BENCHTIME=2s bench/ceiling.sh
#   CPUS=1,4,8 PIN=1 bench/ceiling.sh      # GOMAXPROCS p on CPUs 0..p-1 only (taskset)
#
# The test binary is built once; then COUNT rounds, each running every
# GOMAXPROCS value in turn (-test.cpu p), so that a busy phase of a shared
# machine hits all of them alike. GOMAXPROCS bounds the goroutines running
# Go code, not the threads blocked in system calls: without PIN a pread(2)
# or write(2) runs beside them, on another core if there is one.
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
COUNT=${COUNT:-3}
BENCHTIME=${BENCHTIME:-1s}
CPUS=${CPUS:-$(seq -s, 1 "$(nproc)")}
PIN=${PIN:-0}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
raw=$tmp/raw

load=$(cut -d' ' -f1-3 /proc/loadavg)
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
"$GO" test -c -o "$tmp/pipe.test" ./pipe
IFS=, read -r -a procs <<< "$CPUS"
for ((round = 1; round <= COUNT; round++)); do
	for p in "${procs[@]}"; do
		pin=()
		if [ "$PIN" = 1 ]; then
			pin=(taskset -c "0-$((p - 1))")
		fi
		echo "round $round/$COUNT, GOMAXPROCS $p${pin:+ (${pin[*]})}" >&2
		(cd pipe && "${pin[@]}" "$tmp/pipe.test" -test.run '^$' -test.bench '^BenchmarkCeiling$' \
			-test.cpu "$p" -test.count 1 -test.benchtime "$BENCHTIME") | tee -a "$raw" >&2
	done
done

awk -v cpus="$CPUS" -v pin="$PIN" -v count="$COUNT" -v benchtime="$BENCHTIME" -v load="$load" -v model="$model" -v cores="$(nproc)" '
# Lines such as
#   BenchmarkCeiling/sender/keyed-2   12   95086293 ns/op   2823.07 MB/s
# (no -N suffix at GOMAXPROCS 1).
$1 ~ /^BenchmarkCeiling\// {
	name = $1
	sub(/^BenchmarkCeiling\//, "", name)
	procs = 1
	if (match(name, /-[0-9]+$/)) {
		procs = substr(name, RSTART + 1)
		name = substr(name, 1, RSTART - 1)
	}
	for (i = 2; i <= NF; i++)
		if ($i == "MB/s")
			runs[name, procs] = runs[name, procs] " " $(i - 1)
}

function median(list,    v, n, i, j, t) {
	n = split(list, v, " ")
	if (n == 0)
		return -1
	for (i = 2; i <= n; i++)
		for (j = i; j > 1 && v[j - 1] + 0 > v[j] + 0; j--) {
			t = v[j]; v[j] = v[j - 1]; v[j - 1] = t
		}
	return n % 2 ? v[(n + 1) / 2] : (v[n / 2] + v[n / 2 + 1]) / 2
}

function gbs(mbs) { return mbs < 0 ? "-" : sprintf("%.2f", mbs / 1000) }

END {
	np = split(cpus, p, ",")
	nrows = split("sender/unkeyed sender/keyed receiver/unkeyed receiver/keyed memcpy cat", rows, " ")
	label["sender/unkeyed"] = "sender, unkeyed"
	label["sender/keyed"] = "sender, keyed"
	label["receiver/unkeyed"] = "receiver, unkeyed"
	label["receiver/keyed"] = "receiver, keyed"
	label["memcpy"] = "memcpy (GOMAXPROCS loops)"
	label["cat"] = "`cat < file > /dev/null`"
	head = "| GB/s |"
	line = "| --- |"
	for (k = 1; k <= np; k++) {
		head = head " GOMAXPROCS " p[k] " |"
		line = line " ---: |"
	}
	head = head " " p[np] " / " p[1] " |"
	line = line " ---: |"
	print "Each side'"'"'s own ceiling (`bench/ceiling.sh`): median of " count " run(s) of " benchtime " each, GB/s = 10^9 bytes/s; " cores " cores (" model ")" (pin == 1 ? ", GOMAXPROCS p pinned to p CPUs" : "") ", load average " load " at the start"
	print ""
	print head
	print line
	for (r = 1; r <= nrows; r++) {
		out = "| " label[rows[r]] " |"
		for (k = 1; k <= np; k++) {
			m[k] = median(runs[rows[r], p[k]])
			out = out " " gbs(m[k]) " |"
		}
		ratio = m[1] > 0 && m[np] > 0 ? sprintf("%.2fx", m[np] / m[1]) : "-"
		print out " " ratio " |"
	}
}' "$raw"
