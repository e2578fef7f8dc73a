#!/usr/bin/env bash
# fuzz.sh runs every Go fuzz target (func FuzzXxx) of the module, or of the
# packages given as arguments, for FUZZTIME each (default 10s). Targets are
# found with `go test -list`, so new ones are picked up without editing this
# script. An input that fails is saved by Go under the package's
# testdata/fuzz/FuzzXxx/; commit it so that `go test` replays it.
#
#   scripts/fuzz.sh                      # every package
#   FUZZTIME=1m scripts/fuzz.sh ./pipe/...
set -euo pipefail
cd "$(dirname "$0")/.."

GO=${GO:-go}
FUZZTIME=${FUZZTIME:-10s}
[ $# -gt 0 ] || set -- ./...

failed=()
for pkg in $("$GO" list "$@"); do
	list=$("$GO" test -list '^Fuzz' "$pkg")
	for name in $(printf '%s\n' "$list" | grep '^Fuzz' || true); do
		echo "== $pkg $name ($FUZZTIME)"
		if ! "$GO" test -run '^$' -fuzz "^${name}\$" -fuzztime "$FUZZTIME" "$pkg"; then
			failed+=("$pkg $name")
		fi
	done
done

if [ ${#failed[@]} -gt 0 ]; then
	echo "fuzz: failed: ${failed[*]}" >&2
	exit 1
fi
echo "fuzz: every target passed"
