#!/usr/bin/env bash
# Each side's own ceiling, independent of any network (`make bench-ceiling`; also a
# host-only section of `make bench`): BenchmarkCeiling (pipe/ceiling_bench_test.go),
# the sender and the receiver unkeyed, keyed and encrypted, with memcpy and cat as
# references, at GOMAXPROCS 1, 2, ... up to the cores present, COUNT times each. Prints a
# markdown section on stdout: GB/s (medians), the ratio of all cores to one core, keyed
# and encrypted against unkeyed at all cores, GB per CPU-second (the benchmark's
# GB/cpu-s: bytes over the process's user+system time, at one core and at all cores), the
# cores a run kept busy (GB/s over GB/cpu-s: on a shared machine, what it got), and issue
# 18's and issue 34's targets on those ratios with pass/miss (with the same ratio per CPU-second beside);
# issue 34's ratios are paired per round (each unkeyed side runs right before its reference). The raw benchmark output goes to stderr (and to $CEILING_RAW if set). See
# bench/README.md, "Each side's own ceiling".
#
#   bench/ceiling.sh                       # COUNT=3 BENCHTIME=1s CPUS=1,...,nproc PIN=0
#   COUNT=5 BENCHTIME=2s bench/ceiling.sh
#   CPUS=1,4,8 PIN=1 bench/ceiling.sh      # GOMAXPROCS p on CPUs 0..p-1 only (taskset)
#
# "One core" is the first value of CPUS, "all cores" the last. The test binary is built
# once; then COUNT rounds, each running every GOMAXPROCS value in turn (-test.cpu p), so
# that a busy phase of a shared machine hits all of them alike. GOMAXPROCS bounds the
# goroutines running Go code, not the threads blocked in system calls: without PIN a
# pread(2) or write(2) runs beside them, on another core if there is one.
#
# env:
#   COUNT       rounds (default 3); every figure is the median of its COUNT runs
#   BENCHTIME   -test.benchtime of each run (default 1s)
#   CPUS        GOMAXPROCS values, comma-separated (default 1,2,...,nproc)
#   PIN         1: run GOMAXPROCS p under taskset -c 0-(p-1) (default 0)
#   CEILING_RAW also write the raw benchmark output there
#   GO          the go command that builds the test binary (default go)
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
COUNT=${COUNT:-3}
BENCHTIME=${BENCHTIME:-1s}
CPUS=${CPUS:-$(seq -s, 1 "$(nproc)")}
PIN=${PIN:-0}
[[ $COUNT =~ ^[1-9][0-9]*$ ]] || { echo "ceiling: COUNT must be a positive number" >&2; exit 2; }
[[ $CPUS =~ ^[1-9][0-9]*(,[1-9][0-9]*)*$ ]] || { echo "ceiling: CPUS must be a list such as 1,2" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
raw=$tmp/raw
: > "$raw"

load=$(cut -d' ' -f1-3 /proc/loadavg)
model=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
commit=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
"$GO" test -c -o "$tmp/pipe.test" ./pipe
IFS=, read -r -a procs <<< "$CPUS"
echo "ceiling: $COUNT round(s) of GOMAXPROCS $CPUS, $BENCHTIME per row" >&2
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
if [ -n "${CEILING_RAW:-}" ]; then cp "$raw" "$CEILING_RAW"; fi
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

awk -v cpus="$CPUS" -v pin="$PIN" -v count="$COUNT" -v benchtime="$BENCHTIME" -v load="$load" -v load_end="$load_end" \
	-v model="$model" -v cores="$(nproc)" -v commit="$commit" '
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
	mbs = gbc = 0
	for (i = 2; i <= NF; i++) {
		if ($i == "MB/s")
			mbs = $(i - 1)
		if ($i == "GB/cpu-s")
			gbc = $(i - 1)
	}
	if (mbs > 0)
		runs[name, procs] = runs[name, procs] " " mbs
	if (gbc > 0) {
		cpu[name, procs] = cpu[name, procs] " " gbc
		busy[name, procs] = busy[name, procs] " " mbs / 1000 / gbc
	}
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

# the median over rounds of a[k] / b[k], the k-th figures of two lists in
# round order ("" if either is missing): each subject runs right before its
# reference, so a ratio compares one moment of a shared machine
function paired(a, b,    x, y, n, i, list) {
	n = split(a, x, " ")
	if (split(b, y, " ") < n)
		n = split(b, y, " ")
	list = ""
	for (i = 1; i <= n; i++)
		if (x[i] > 0 && y[i] > 0)
			list = list " " x[i] / y[i]
	return list == "" ? "" : sprintf("%.2f", median(list))
}

function gbs(mbs) { return mbs < 0 ? "-" : sprintf("%.2f", mbs / 1000) }

# ratio a / b, rounded as printed ("" if either is missing)
function ratio(a, b) { return a > 0 && b > 0 ? sprintf("%.2f", a / b) : "" }

function shown(r) { return r == "" ? "-" : r "x" }

# a target cell: the ratio, then pass or miss against min, then the same ratio per
# CPU-second
function verdict(r, min, rc) {
	if (r == "")
		return "not measured"
	return r "x " (r + 0 >= min ? "pass" : "**miss**") (rc == "" ? "" : " (CPU: " rc "x)")
}

function one(x) { return x < 0 ? "-" : sprintf("%.2f", x) }

END {
	np = split(cpus, p, ",")
	nrows = split("sender/unkeyed sender/keyed sender/encrypted receiver/unkeyed receiver/keyed receiver/encrypted memcpy cat", rows, " ")
	label["sender/unkeyed"] = "sender, unkeyed (XXH3)"
	label["sender/keyed"] = "sender, keyed (GMAC)"
	label["sender/encrypted"] = "sender, encrypted (AES-256-GCM)"
	label["receiver/unkeyed"] = "receiver, unkeyed (XXH3)"
	label["receiver/keyed"] = "receiver, keyed (GMAC)"
	label["receiver/encrypted"] = "receiver, encrypted (AES-256-GCM)"
	label["memcpy"] = "memcpy (GOMAXPROCS loops)"
	label["cat"] = "`cat < file > /dev/null`"
	for (r = 1; r <= nrows; r++)
		for (k = 1; k <= np; k++) {
			m[rows[r], k] = median(runs[rows[r], p[k]])
			c[rows[r], k] = median(cpu[rows[r], p[k]])
			u[rows[r], k] = median(busy[rows[r], p[k]])
		}

	print "## Each side'"'"'s own ceiling (no network)"
	print ""
	print "`bench/ceiling.sh` (`BenchmarkCeiling`), commit " commit ": median of " count " run(s) of " benchtime " each, GB/s = 10^9 bytes/s; " cores " cores (" model ")" (pin == 1 ? ", GOMAXPROCS p pinned to p CPUs" : "") "; load average " load " at the start, " load_end " at the end. One core = GOMAXPROCS " p[1] ", all cores = GOMAXPROCS " p[np] "."
	print ""
	head = "| GB/s |"
	line = "| --- |"
	for (k = 1; k <= np; k++) {
		head = head " GOMAXPROCS " p[k] " |"
		line = line " ---: |"
	}
	print head " " p[np] " / " p[1] " | / unkeyed at " p[np] " | GB per CPU-s at " p[1] " / " p[np] " | cores busy at " p[1] " / " p[np] " |"
	print line " ---: | ---: | ---: | ---: |"
	for (r = 1; r <= nrows; r++) {
		row = rows[r]
		out = "| " label[row] " |"
		for (k = 1; k <= np; k++)
			out = out " " gbs(m[row, k]) " |"
		vs = "-"
		if (row ~ /\/(keyed|encrypted)$/) {
			side = row
			sub(/\/.*/, "", side)
			vs = shown(ratio(m[row, np], m[side "/unkeyed", np]))
		}
		print out " " shown(ratio(m[row, np], m[row, 1])) " | " vs " | " one(c[row, 1]) " / " one(c[row, np]) " | " one(u[row, 1]) " / " one(u[row, np]) " |"
	}
	print ""
	print "Targets (issue 18), all cores against one core and against unkeyed:"
	print ""
	print "| target | sender | receiver |"
	print "| --- | ---: | ---: |"
	if (np < 2) {
		print "| keyed, all cores / one core >= 1.6x | not measured (one GOMAXPROCS value) | not measured |"
		print "| encrypted, all cores / one core >= 1.6x | not measured (one GOMAXPROCS value) | not measured |"
	} else {
		print "| keyed, all cores / one core >= 1.6x | " verdict(ratio(m["sender/keyed", np], m["sender/keyed", 1]), 1.6) " | " verdict(ratio(m["receiver/keyed", np], m["receiver/keyed", 1]), 1.6) " |"
		print "| encrypted, all cores / one core >= 1.6x | " verdict(ratio(m["sender/encrypted", np], m["sender/encrypted", 1]), 1.6) " | " verdict(ratio(m["receiver/encrypted", np], m["receiver/encrypted", 1]), 1.6) " |"
	}
	for (t = 1; t <= 2; t++) {
		mode = t == 1 ? "keyed" : "encrypted"
		min = t == 1 ? 0.8 : 0.6
		out = "| " mode " / unkeyed at all cores >= " min "x |"
		for (sd = 1; sd <= 2; sd++) {
			side = sd == 1 ? "sender" : "receiver"
			out = out " " verdict(ratio(m[side "/" mode, np], m[side "/unkeyed", np]), min, ratio(c[side "/" mode, np], c[side "/unkeyed", np])) " |"
		}
		print out
	}
	print ""
	print "Targets (issue 34), each side unkeyed at one core against its reference at one core, which runs right after it in every round: the median of the " count " rounds'"'"' ratios (the ratio of the medians above beside it):"
	print ""
	print "| target | paired per round | ratio of medians |"
	print "| --- | ---: | ---: |"
	print "| receiver, unkeyed / memcpy at one core >= 0.9x | " verdict(paired(runs["receiver/unkeyed", p[1]], runs["memcpy", p[1]]), 0.9, paired(cpu["receiver/unkeyed", p[1]], cpu["memcpy", p[1]])) " | " shown(ratio(m["receiver/unkeyed", 1], m["memcpy", 1])) " |"
	print "| sender, unkeyed / cat at one core >= 0.85x | " verdict(paired(runs["sender/unkeyed", p[1]], runs["cat", p[1]]), 0.85, paired(cpu["sender/unkeyed", p[1]], cpu["cat", p[1]])) " | " shown(ratio(m["sender/unkeyed", 1], m["cat", 1])) " |"
}' "$raw"
