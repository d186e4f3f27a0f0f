#!/bin/sh
# failure-digest.sh [LOG]: after a failed ctest run, the lines that say why,
# per failed test (failed checks, sanitizer reports, crashes), so that the
# end of a long log names the cause. LOG: ctest's LastTest.log (default:
# Testing/Temporary/LastTest.log under the current directory).
log=${1:-Testing/Temporary/LastTest.log}
[ -r "$log" ] || { echo "failure-digest: no $log" >&2; exit 0; }
echo "== why the failed tests failed (from $log)"
awk '
/^[0-9]+\/[0-9]+ Testing: / { name = $3; n = 0; next }
/^FAIL[ :]|^not ok|^  serve.err: |ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|^SUMMARY: |Assertion .* failed|Segmentation fault|^Error|AssertionError|Error: |Timeout|timed out/ {
	if (n < 40) keep[n++] = $0
	next
}
/^Test Failed\.|^Test time.*Timeout|^Test: .*Timeout/ || /^Test Failed/ {
	printf "-- %s\n", name
	for (i = 0; i < n; i++) print "   " keep[i]
	if (n == 0) print "   (no line of the usual kinds: see the full output above)"
	n = 0
}
' "$log"
