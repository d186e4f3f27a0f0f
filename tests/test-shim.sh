#!/usr/bin/env bash
# test-shim.sh - checks of the ane backend that need no Mac.
#
#   test-shim.sh syntax SRC_DIR CLANG [PROTO_INCLUDE_DIR]
#       shim/ane-shim.m compiles (-fsyntax-only, ARC) against
#       shim/stand-in/; ane-worker/backend-ane.c and the ANEDVD_ANE paths of
#       build.c (and the worker's service.c and main-ane-worker.c, given
#       the generated proto headers)
#       compile with -DANEDVD_ANE, so do `info`'s ane report (cmd-cpu.c) and
#       the tools' --backend ane path; a shim with an uncast objc_msgSend or a
#       wrong argument type does not
#   test-shim.sh worker ANE_WORKER
#       --backend ane on a build without it exits 2 with a clear message
# Prints "N passed, N failed"; exit 1 on any failure.
set -u
mode=${1:-}
shift || true
pass=0
fail=0
ok() { pass=$((pass + 1)); }
not() { ! "$@"; }
# the verdict goes to the stderr the script started with: a check run with
# 2>/dev/null (its command's own noise) must not hide its FAIL line
exec 3>&2
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&3; }
check() { # check "what" command...
	local what=$1
	shift
	if "$@"; then ok; else bad "$what"; fi
}
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-test-shim.XXXXXX")
trap 'if [ -n "${ANEDVD_KEEP_TMP:-}" ]; then echo "kept $T (ANEDVD_KEEP_TMP)" >&2; else rm -rf "$T"; fi' EXIT
done_() {
	echo "$pass passed, $fail failed"
	[ "$fail" = 0 ]
	exit $?
}

# --- syntax -------------------------------------------------------------------------
if [ "$mode" = syntax ]; then
	S=$1
	CC=$2
	PROTO=${3:-}
	if [ -z "$CC" ] || ! command -v "$CC" >/dev/null 2>&1; then
		bad "clang not found ('$CC'): the shim cannot be syntax-checked; install clang (deploy/install-deps.sh --test)"
		done_
	fi
	# -fobjc-runtime: off Apple platforms clang's default runtime has no ARC
	OBJC=("$CC" -fsyntax-only -fobjc-arc -fobjc-runtime=macosx-13.0 -x objective-c -Wall -Wextra -Werror
		-I "$S/shim/stand-in" -I "$S/shim")
	check "ane-shim.m against the stand-in headers" "${OBJC[@]}" "$S/shim/ane-shim.m"
	C=("$CC" -fsyntax-only -std=gnu11 -Wall -Wextra -Wshadow -Wno-unused-parameter -Werror -DANEDVD_ANE
		-I "$S/shim" -I "$S/ane-worker" -I "$S/ane-worker/include" -I "$S/common")
	check "backend-ane.c with -DANEDVD_ANE" "${C[@]}" "$S/ane-worker/backend-ane.c"
	check "backend-ane.c without ANEDVD_ANE" "${C[@]}" -UANEDVD_ANE "$S/ane-worker/backend-ane.c"
	check "build.c with -DANEDVD_ANE" "${C[@]}" "$S/ane-worker/build.c"
	if [ -n "$PROTO" ] && [ -f "$PROTO/ane.pb-c.h" ]; then
		for f in service.c main-ane-worker.c; do
			check "$f with -DANEDVD_ANE" "${C[@]}" -I "$PROTO" -I "$S/proto" "$S/ane-worker/$f"
		done
	else
		bad "no generated proto headers in '$PROTO': service.c and main-ane-worker.c not checked"
	fi
	check "ane-shim-util.c" "${C[@]}" "$S/shim/ane-shim-util.c"
	# `info`'s report of the framework, its classes and a probe kernel, and
	# the diagnostic commands' --backend ane path
	if [ -n "$PROTO" ] && [ -f "$PROTO/ane.pb-c.h" ]; then
		CLI=("${C[@]}" -DANEDVD_VERSION='"0"' -DAD_HAVE_TOKENIZER=1 -I "$S/cpu-worker/include" -I "$S/cpu-worker" -I "$S/tokenizer-svc/include" -I "$S/tokenizer-svc"
			-I "$S/tokenizer-svc/service" -I "$S/frontend" -I "$S/cli" -I "$S/proto" -I "$PROTO")
		check "cmd-cpu.c (info) with -DANEDVD_ANE" "${CLI[@]}" "$S/cli/cmd-cpu.c"
		check "cmd-tools.c (--backend) with -DANEDVD_ANE" "${CLI[@]}" "$S/cli/cmd-tools.c"
		check "kb-local.c with -DANEDVD_ANE" "${CLI[@]}" "$S/cli/kb-local.c"
	fi
	# the check has teeth: an uncast objc_msgSend, a wrong argument type
	sed 's|((msg_id_fn)objc_msgSend)(model, @selector(hexStringIdentifier))|objc_msgSend(model, @selector(hexStringIdentifier))|' \
		"$S/shim/ane-shim.m" >"$T/uncast.m"
	check "the mutation took" not cmp -s "$S/shim/ane-shim.m" "$T/uncast.m"
	check "an uncast objc_msgSend is refused" not "${OBJC[@]}" -I "$S/shim" "$T/uncast.m" 2>/dev/null
	sed 's|IOSurfaceGetAllocSize(s) < need|IOSurfaceGetAllocSize(k) < need|' "$S/shim/ane-shim.m" >"$T/badarg.m"
	check "the second mutation took" not cmp -s "$S/shim/ane-shim.m" "$T/badarg.m"
	check "a wrong argument type is refused" not "${OBJC[@]}" -I "$S/shim" "$T/badarg.m" 2>/dev/null
	done_
fi

# --- worker -------------------------------------------------------------------------
if [ "$mode" = worker ]; then
	W=$1
	"$W" --backend ane >"$T/out" 2>"$T/err"
	rc=$?
	check "--backend ane exits 2 (got $rc)" [ "$rc" = 2 ]
	check "--backend ane says why" grep -q "the ane backend needs macOS on Apple silicon; this build has emu only" "$T/err"
	"$W" --backend ane --model /nonexistent.gguf --listen ipc://"$T"/s >"$T/out" 2>"$T/err"
	rc=$?
	check "--backend ane with a model exits 2 (got $rc)" [ "$rc" = 2 ]
	check "and says why" grep -q "needs macOS" "$T/err"
	"$W" --backend metal --model /nonexistent.gguf --listen ipc://"$T"/s >"$T/out" 2>"$T/err"
	rc=$?
	check "an unknown backend exits 2 (got $rc)" [ "$rc" = 2 ]
	check "and names it" grep -q "'metal'" "$T/err"
	done_
fi

echo "usage: test-shim.sh syntax|worker ..." >&2
exit 2
