#!/bin/sh
# check-includes.sh SRCDIR - the worker folders keep to their own rooms.
#
# A worker folder (ane-worker, cpu-worker, tokenizer-svc, frontend) may
# include its own headers, common/'s, shim/'s and the generated protocol's
# (*.pb-c.h); a header of another worker folder or of cli/ is refused:
# what two workers share is a contract and lives in common/ (the kernel
# plan and the surface layout) or proto/. cli/ composes the workers and
# may include them all.
#
# What needs two workers' libraries at once is composed in cli/ and handed
# in by the process: the emu backend's kernels (kb_local, cli/kb-local.c)
# and the grammars' vocabulary from the tokenizer (vocab_local,
# cli/vocab-local.c), both through cpu_worker_opts.
#
# ALLOW lists the crossings that are still there, one a line (none: ''),
# each with its reason; the list only shrinks: an entry that no longer
# occurs fails too, so that whoever removes a crossing removes its entry.
# Prints every violation and exits 1; exit 0 when the tree keeps the rule.
set -u
src=${1:?usage: check-includes.sh SRCDIR}
cd "$src" || exit 2

workers="ane-worker cpu-worker tokenizer-svc frontend"
others="ane-worker cpu-worker tokenizer-svc frontend cli"

# "file -> header", as printed below, each with a "# why:" after it; none
# are left
ALLOW=''

found=$(mktemp) || exit 2
trap 'rm -f "$found"' EXIT

for w in $workers; do
	find "$w" -type f \( -name '*.c' -o -name '*.h' \) | sort | while read -r f; do
		dir=$(dirname "$f")
		sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f" | while read -r h; do
			# the file's own folder, anywhere in its worker's folder (include/,
			# service/), then common/ and shim/
			[ -f "$dir/$h" ] && continue
			base=$(basename "$h")
			[ -n "$(find "$w" -type f -name "$base" | head -n 1)" ] && continue
			[ -f "common/$h" ] && continue
			[ -f "shim/$h" ] && continue
			case "$h" in *.pb-c.h) continue ;; esac
			for o in $others; do
				[ "$o" = "$w" ] && continue
				hit=$(find "$o" -type f -name "$base" | sort | head -n 1)
				if [ -n "$hit" ]; then
					echo "$f -> $hit"
					break
				fi
			done
		done
	done
done | sort -u > "$found"

rc=0
while read -r line; do
	[ -n "$line" ] || continue
	if ! printf '%s\n' "$ALLOW" | grep -qxF "$line"; then
		echo "check-includes: $line: a worker folder includes another worker's (or cli/'s) header" >&2
		rc=1
	fi
done < "$found"
# (an empty ALLOW is no entry, not one empty line)
printf '%s\n' "$ALLOW" | while read -r line; do
	[ -n "$line" ] || continue
	if ! grep -qxF "$line" "$found"; then
		echo "check-includes: '$line' no longer occurs: remove it from ALLOW in tests/check-includes.sh" >&2
		exit 1
	fi
done || rc=1
n=$(wc -l < "$found")
if [ "$rc" -eq 0 ] && [ "$n" -eq 0 ]; then
	echo "check-includes: ok (no crossings)"
elif [ "$rc" -eq 0 ]; then
	echo "check-includes: ok ($n allowed crossings left, none new)"
fi
exit "$rc"
