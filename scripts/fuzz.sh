#!/usr/bin/env bash
# fuzz.sh runs every Fuzz target in the module for a short time each
# (default 5s), so parsers and wire decoders meet fresh random input on every
# test run, not only their seed corpus.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime=${1:-5s}
status=0
# A log of its own, so runs from two checkouts never read each other's.
log=$(mktemp -t strait-fuzz.XXXXXX)
trap 'rm -f "$log"' EXIT
while IFS= read -r file; do
	pkg=$(dirname "$file")
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
		echo "fuzz: $pkg $target ($fuzztime)"
		if ! go test -run '^$' -fuzz "^${target}\$" -fuzztime "$fuzztime" -fuzzminimizetime 100x "$pkg" >"$log" 2>&1; then
			# Go's fuzzer can report "context deadline exceeded" when the time
			# budget ends while it minimizes a new input: that is the budget,
			# not a bug. A real failure always writes its input to testdata.
			if grep -q "context deadline exceeded" "$log" && ! grep -q "Failing input written to" "$log"; then
				echo "fuzz: $pkg $target: time budget ended during minimization (not a failure)"
				continue
			fi
			cat "$log"
			status=1
		fi
	done
done < <(grep -rlE '^func Fuzz' --include='*_test.go' . | sort)
exit $status
