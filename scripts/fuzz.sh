#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target (func FuzzXxx) of the module, or of the
# packages given as arguments, for FUZZTIME each (default 10s): the
# top-level `func FuzzXxx` of the packages' _test.go files, so new ones are
# picked up without editing this script (found with sed: `go test -list`
# would build every package's tests once more, without -race, only to name
# them). An input that fails is saved by Go under the package's
# testdata/fuzz/FuzzXxx/; commit it so that `go test` replays it.
#
# With KEEP=1 (make fuzz) the inputs a run found new coverage with are kept
# in testdata/fuzz/FuzzXxx/ too, so that short runs (make test) start from
# what long ones found: commit them.
#
#   scripts/fuzz.sh                      # every package
#   FUZZTIME=1m scripts/fuzz.sh ./pipe/...
#   FUZZTIME=10m KEEP=1 scripts/fuzz.sh  # make fuzz
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
cache=$("$GO" env GOCACHE)/fuzz
[ $# -gt 0 ] || set -- ./...

# inputs counts the saved inputs of a fuzz target (its testdata/fuzz dir).
inputs() { if [ -d "$1" ]; then find "$1" -type f | wc -l; else echo 0; fi; }

failed=()
while read -r pkg pkgdir; do
	names=$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' "$pkgdir"/*_test.go 2>/dev/null | sort -u || true)
	for name in $names; do
		echo "== $pkg $name ($FUZZTIME)"
		dir=$pkgdir/testdata/fuzz/$name
		before=$(inputs "$dir")
		log=$(mktemp)
		if "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg" 2>&1 | tee "$log"; then
			:
		elif [ "$(inputs "$dir")" = "$before" ] && grep -q '^    context deadline exceeded$' "$log"; then
			# Go 1.26's fuzz coordinator can report its own -fuzztime deadline
			# as a failure when a worker is mid-input (go.dev/issue/75804,
			# fixed in Go 1.27): no input failed and none was written.
			echo "fuzz: $name: the -fuzztime deadline race of go.dev/issue/75804, not a failing input"
		else
			failed+=("$pkg $name")
		fi
		rm -f "$log"
		# Go keeps what a run found under GOCACHE, named by content: copy
		# what testdata lacks.
		found=$cache/$pkg/$name
		if [ "${KEEP:-0}" = 1 ] && [ -d "$found" ]; then
			mkdir -p "$dir"
			cp -n "$found"/* "$dir"/ 2>/dev/null || true
			echo "fuzz: $name: $(inputs "$dir") inputs kept in testdata (was $before)"
		fi
	done
done < <("$GO" list -f '{{.ImportPath}} {{.Dir}}' "$@")

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: every target passed"
