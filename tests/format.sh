#!/bin/sh
# format.sh - the tree's C, header and Objective-C files against .clang-format.
#
#   tests/format.sh check    print what clang-format would change (a diff) and
#                            the share of lines; exit 1 if anything would change
#   tests/format.sh apply    reformat those files in place
#
# The files: every tracked *.c, *.h and *.m except generated ones (a "Do not
# edit" in their first five lines: the Unicode tables, the pre-tokenizer
# names). The formatter: $CLANG_FORMAT, else clang-format-14 (Debian's, which
# .clang-format was chosen against), else clang-format; another version may
# format some lines differently. Exit 2 when there is no clang-format.
set -u
mode=${1:-}
case $mode in check | apply) ;; *) echo "usage: tests/format.sh check|apply" >&2; exit 2 ;; esac
cd "$(dirname "$0")/.." || exit 2
cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
	for c in clang-format-14 clang-format; do
		command -v "$c" >/dev/null 2>&1 && { cf=$c; break; }
	done
fi
[ -n "$cf" ] || { echo "format.sh: no clang-format: install the Debian package 'clang-format'" >&2; exit 2; }
case $("$cf" --version) in *" 14."*) ;; *) echo "format.sh: note: $("$cf" --version), not 14: some lines may differ" >&2 ;; esac
list=$(mktemp)
out=$(mktemp -d)
trap 'rm -rf "$list" "$out"' EXIT
git ls-files '*.c' '*.h' '*.m' | while IFS= read -r f; do
	head -5 "$f" | grep -q "Do not edit" || echo "$f"
done >"$list"
if [ "$mode" = apply ]; then
	xargs "$cf" -i --style=file <"$list"
	exit $?
fi
total=0
changed=0
status=0
while IFS= read -r f; do
	"$cf" --style=file --assume-filename="$f" <"$f" >"$out/x" || { echo "format.sh: $cf failed on $f" >&2; exit 2; }
	n=$(wc -l <"$f")
	total=$((total + n))
	if ! cmp -s "$f" "$out/x"; then
		diff -u --label "$f" --label "$f (clang-format)" "$f" "$out/x"
		c=$(diff "$f" "$out/x" | grep -c '^<')
		changed=$((changed + c))
		status=1
	fi
done <"$list"
echo "format.sh: $changed of $total lines ($(awk -v c=$changed -v t=$total 'BEGIN { printf "%.2f", t ? 100 * c / t : 0 }')%) in $(wc -l <"$list") files would change" >&2
exit $status
