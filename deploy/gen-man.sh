#!/bin/sh
# gen-man.sh - the manual pages, written from the programs' own --help.
#
#   deploy/gen-man.sh ANEDVD OUT_DIR
#
# Runs `ANEDVD --help` and `ANEDVD <command> --help` for every command that
# help lists, and writes OUT_DIR/anedvd.1 and OUT_DIR/anedvd-<command>.1
# (gzip -9n'd to .1.gz when gzip is there), so a page says what --help says
# and cannot drift from it. The build runs it after linking anedvd.
#
# The help layout it reads (cli/anedvd.c, the commands' *_usage):
#   "anedvd VERSION - WHAT"        the first line of the main help
#   "usage: ..."                   and lines indented 4 or more after it: SYNOPSIS
#   "name:" at column 0            a section (commands:, environment:) whose
#                                  entries sit at column 2, their text below, deeper
#   "  -x, --flag ARG   text"      an option (OPTIONS), continued by deeper lines
#   "  text" before any option     DESCRIPTION
#   other column-0 text            a paragraph of the current section
# Exit status: 0 written, 1 a help did not run.
set -eu
bin=${1:-}
out=${2:-}
if [ -z "$bin" ] || [ -z "$out" ]; then
	echo "usage: gen-man.sh ANEDVD OUT_DIR" >&2
	exit 2
fi
mkdir -p "$out"
rm -f "$out"/*.1 "$out"/*.1.gz "$out"/help-*.txt
version=$("$bin" --version) || { echo "gen-man.sh: $bin --version failed" >&2; exit 1; }
"$bin" --help >"$out/help-anedvd.txt" || { echo "gen-man.sh: $bin --help failed" >&2; exit 1; }

# page < help text > roff; from the environment: PAGE (its name), WHAT (the
# NAME line's text, for a command), SEE (the pages named under SEE ALSO)
page() {
	awk '
	function esc(s,    r, c, i) {
		r = ""
		for (i = 1; i <= length(s); i++) {
			c = substr(s, i, 1)
			if (c == "\\") c = "\\e"
			else if (c == "-") c = "\\-"
			r = r c
		}
		if (r ~ /^[.\047]/) r = "\\&" r
		return r
	}
	# a tag: flags (and a list entry'"'"'s first word) bold, placeholders italic
	function tag(s,    n, w, i, r, tail, x) {
		n = split(s, w, " ")
		r = ""
		for (i = 1; i <= n; i++) {
			tail = ""
			if (w[i] ~ /,$/) { tail = ","; w[i] = substr(w[i], 1, length(w[i]) - 1) }
			if (w[i] ~ /^-/ || (i == 1 && list)) x = "\\fB" esc(w[i]) "\\fR"
			else if (w[i] ~ /^[A-Z][A-Z0-9_]*$/) x = "\\fI" esc(w[i]) "\\fR"
			else x = esc(w[i])
			r = r (i > 1 ? " " : "") x tail
		}
		return r
	}
	function indent(s) { match(s, /^ */); return RLENGTH }
	function section(t) { print ".SH " t; sect = t; para = 0; intp = 0 }
	BEGIN {
		name = ENVIRON["PAGE"]
		printf ".TH %s 1 \"\" \"%s\" \"anedvd manual\"\n", esc(toupper(name)), esc(ENVIRON["VERSION"])
		print ".nh"   # flags and paths are not hyphenated
		print ".ad l" # nor spread to the right margin
		section("NAME")
		state = "top"
	}
	NR == 1 && name == "anedvd" && /^anedvd [^ ]+ - / {
		sub(/^anedvd [^ ]+ - /, "")
		print "anedvd \\- " esc($0)
		next
	}
	NR == 1 { print esc(name) " \\- " esc(ENVIRON["WHAT"]) }
	/^usage: / {
		section("SYNOPSIS")
		sub(/^usage: /, "")
		print ".nf"
		print esc($0)
		state = "usage"
		next
	}
	state == "usage" && indent($0) >= 4 { sub(/^ +/, ""); print "    " esc($0); next }
	state == "usage" { print ".fi"; state = "body" }
	/^$/ { para = 1; next }
	/^[a-z][a-z ]*:$/ { sub(/:$/, ""); section(toupper($0)); list = 1; next }
	indent($0) == 0 {
		if (!text0 || para) print ".PP"
		para = 0
		intp = 0
		print esc($0)
		text0 = 1
		next
	}
	{ text0 = 0 }
	list && indent($0) == 2 { print ".TP"; sub(/^ +/, ""); print tag($0); intp = 1; next }
	indent($0) == 2 && /^  -/ {
		if (sect != "OPTIONS") section("OPTIONS")
		sub(/^  /, "")
		t = $0
		rest = ""
		if (match(t, /  +/)) { rest = substr(t, RSTART + RLENGTH); t = substr(t, 1, RSTART - 1) }
		print ".TP"
		print tag(t)
		if (rest != "") print esc(rest)
		para = 0
		intp = 1
		next
	}
	indent($0) == 2 {
		if (sect != "DESCRIPTION" && sect != "OPTIONS") section("DESCRIPTION")
		if (intp || para) print ".PP"
		para = 0
		intp = 0
		sub(/^ +/, "")
		print esc($0)
		next
	}
	{ sub(/^ +/, ""); print esc($0) }
	END {
		if (state == "usage") print ".fi"
		n = split(ENVIRON["SEE"], see, " ")
		if (n) section("SEE ALSO")
		for (i = 1; i <= n; i++) print ".BR " esc(see[i]) " (1)" (i < n ? "," : "")
	}'
}

commands=$(awk '/^commands:$/ { on = 1; next } on && /^[^ ]/ { exit } on && /^  [a-z]/ { print $1 }' "$out/help-anedvd.txt")
[ -n "$commands" ] || { echo "gen-man.sh: no commands in $bin --help" >&2; exit 1; }
export VERSION="$version"
see=""
for c in $commands; do
	see="$see anedvd-$c"
done
export PAGE WHAT SEE
PAGE=anedvd WHAT= SEE=$see
page <"$out/help-anedvd.txt" >"$out/anedvd.1"
for c in $commands; do
	# the command's line of the main help, and the lines below it: what it does
	what=$(awk -v c="$c" '
		/^commands:$/ { on = 1; next }
		on && /^[^ ]/ { exit }
		on && $1 == c && /^  [a-z]/ { mine = 1; next }
		on && mine && /^        / { sub(/^ +/, ""); printf "%s%s", sep, $0; sep = " "; next }
		mine { exit }' "$out/help-anedvd.txt")
	# the commands print their help on stderr or stdout, exit 0
	if ! "$bin" "$c" --help >"$out/help-$c.txt" 2>&1; then
		echo "gen-man.sh: $bin $c --help failed" >&2
		exit 1
	fi
	PAGE=anedvd-$c WHAT=$what SEE=anedvd
	page <"$out/help-$c.txt" >"$out/anedvd-$c.1"
done
rm -f "$out"/help-*.txt
if command -v gzip >/dev/null 2>&1; then
	gzip -9nf "$out"/*.1
fi
