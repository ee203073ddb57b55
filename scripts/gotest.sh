#!/usr/bin/env bash
# Runs `go test` with the given arguments and, when it fails, repeats the
# lines that say which tests failed or hung at the very end of the output.
# A package that hits -timeout prints its running tests first and then every
# goroutine's stack, so a log cut to its tail would otherwise show only
# stacks and never the test's name.
set -uo pipefail
log=$(mktemp)
trap 'rm -f "$log"' EXIT
go test "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
	echo
	echo "== go test failed (exit $rc); what failed, again:"
	grep -E -A4 '^( *--- FAIL|FAIL|panic: |	*running tests:)' "$log" | grep -v -E '^goroutine |^$' | head -n 80
fi
exit "$rc"
