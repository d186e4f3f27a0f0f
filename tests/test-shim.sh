#!/usr/bin/env bash
# test-shim.sh - checks of the ane backend and of the deployment that need
# no Mac.
#
#   test-shim.sh syntax SRC_DIR CLANG [PROTO_INCLUDE_DIR]
#       shim/ane-shim.m compiles (-fsyntax-only, ARC) against
#       shim/stand-in/; ane-worker/backend-ane.c and the ANEDVD_ANE paths of
#       build.c (and main-ane-worker.c, given the generated proto headers)
#       compile with -DANEDVD_ANE, so do `info`'s ane report (cmd-cpu.c) and
#       the tools' --backend ane path; a shim with an uncast objc_msgSend or a
#       wrong argument type does not
#   test-shim.sh worker ANE_WORKER
#       --backend ane on a build without it exits 2 with a clear message
#   test-shim.sh deploy SRC_DIR BUILD_DIR
#       cmake --install into a temporary prefix gives the five programs;
#       deploy/install.sh installs, writes a unit that systemd-analyze
#       verify accepts (or, without it, a key check), and uninstalls; a
#       broken unit is refused; the launchd plist is well formed
# Prints "N passed, N failed"; exit 1 on any failure.
set -u
mode=${1:-}
shift || true
pass=0
fail=0
ok() { pass=$((pass + 1)); }
not() { ! "$@"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
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
		-I "$S/shim" -I "$S/ane-worker" -I "$S/common")
	check "backend-ane.c with -DANEDVD_ANE" "${C[@]}" "$S/ane-worker/backend-ane.c"
	check "backend-ane.c without ANEDVD_ANE" "${C[@]}" -UANEDVD_ANE "$S/ane-worker/backend-ane.c"
	check "build.c with -DANEDVD_ANE" "${C[@]}" "$S/ane-worker/build.c"
	if [ -n "$PROTO" ] && [ -f "$PROTO/ane.pb-c.h" ]; then
		check "main-ane-worker.c with -DANEDVD_ANE" "${C[@]}" -I "$PROTO" "$S/ane-worker/main-ane-worker.c"
	else
		bad "no generated proto headers in '$PROTO': main-ane-worker.c not checked"
	fi
	check "ane-shim-util.c" "${C[@]}" "$S/shim/ane-shim-util.c"
	# `info`'s report of the framework, its classes and a probe kernel, and
	# the diagnostic commands' --backend ane path
	if [ -n "$PROTO" ] && [ -f "$PROTO/ane.pb-c.h" ]; then
		CLI=("${C[@]}" -DANEDVD_VERSION='"0"' -DAD_HAVE_TOKENIZER=1 -I "$S/cpu-worker" -I "$S/tokenizer-svc"
			-I "$S/tokenizer-svc/service" -I "$S/frontend" -I "$PROTO")
		check "cmd-cpu.c (info) with -DANEDVD_ANE" "${CLI[@]}" "$S/cpu-worker/cmd-cpu.c"
		check "cmd-tools.c (--backend) with -DANEDVD_ANE" "${CLI[@]}" "$S/frontend/cmd-tools.c"
		check "kb-local.c with -DANEDVD_ANE" "${CLI[@]}" "$S/cpu-worker/kb-local.c"
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

# --- deploy -------------------------------------------------------------------------
# key check of a unit when systemd-analyze is missing (and always, for the
# keys this unit must have): known sections and keys, required settings
unit_keys() {
	python3 - "$1" <<'PY'
import sys, re
known = {
 "Unit": {"Description", "After", "Wants", "Requires", "Documentation", "Before"},
 "Service": {"Type", "Environment", "EnvironmentFile", "RuntimeDirectory", "RuntimeDirectoryMode", "StateDirectory", "ExecStart",
  "Restart", "RestartSec", "KillMode", "TimeoutStopSec", "DynamicUser", "NoNewPrivileges",
  "CapabilityBoundingSet", "AmbientCapabilities", "ProtectSystem", "ProtectHome", "PrivateTmp",
  "PrivateDevices", "ProtectKernelTunables", "ProtectKernelModules", "ProtectKernelLogs",
  "ProtectControlGroups", "ProtectClock", "ProtectHostname", "RestrictAddressFamilies",
  "RestrictNamespaces", "RestrictRealtime", "RestrictSUIDSGID", "LockPersonality",
  "MemoryDenyWriteExecute", "SystemCallArchitectures", "SystemCallFilter", "UMask"},
 "Install": {"WantedBy"},
}
sec, seen, bad = None, {}, []
for n, line in enumerate(open(sys.argv[1]), 1):
    line = line.strip()
    if not line or line[0] in "#;":
        continue
    m = re.fullmatch(r"\[(\w+)\]", line)
    if m:
        sec = m.group(1)
        if sec not in known:
            bad.append(f"{n}: unknown section [{sec}]")
        continue
    if "=" not in line or sec is None:
        bad.append(f"{n}: not a key=value line in a section: {line}")
        continue
    k, v = line.split("=", 1)
    if sec in known and k not in known[sec]:
        bad.append(f"{n}: unknown key {k} in [{sec}]")
    seen.setdefault((sec, k), []).append(v)
def one(sec, k):
    v = seen.get((sec, k))
    return v[-1] if v else None
if one("Service", "Restart") != "on-failure":
    bad.append("Restart=on-failure missing")
es = one("Service", "ExecStart") or ""
if not re.match(r"/\S*/anedvd serve ", es):
    bad.append("ExecStart is not an absolute `anedvd serve`")
if not one("Service", "EnvironmentFile"):
    bad.append("no EnvironmentFile")
for k in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "DynamicUser"):
    if not one("Service", k):
        bad.append(f"hardening key {k} missing")
if not one("Install", "WantedBy"):
    bad.append("no WantedBy")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# systemd-analyze verify, with its warnings counted as failures
unit_verify() {
	if ! command -v systemd-analyze >/dev/null 2>&1; then
		echo "systemd-analyze not found: key check only" >&2
		unit_keys "$1"
		return
	fi
	local out rc
	out=$(systemd-analyze verify "$1" 2>&1)
	rc=$?
	# dependencies of a unit outside the system's unit path are not our concern
	out=$(printf '%s\n' "$out" | grep -v -e 'network-online.target' -e '^$' || true)
	[ -n "$out" ] && printf '%s\n' "$out" >&2
	[ "$rc" = 0 ] && [ -z "$out" ] && unit_keys "$1"
}

if [ "$mode" = deploy ]; then
	S=$1
	B=$2
	PROGS="anedvd anedvd-frontend anedvd-tokenizer anedvd-ane-worker anedvd-cpu-worker"
	cmake --install "$B" --prefix "$T/p" >"$T/install.log" 2>&1
	check "cmake --install" [ $? = 0 ]
	for p in $PROGS; do
		check "cmake --install gives $p" [ -x "$T/p/bin/$p" ]
	done
	check "the installed anedvd runs" "$T/p/bin/anedvd" --version
	check "the unit goes to share/" [ -f "$T/p/share/anedvd/systemd/anedvd.service" ]
	check "the plist goes to share/" [ -f "$T/p/share/anedvd/launchd/com.anedvd.serve.plist" ]

	# the unit as shipped: keys; as installed: systemd's own check
	check "the shipped unit's keys" unit_keys "$S/deploy/systemd/anedvd.service"
	I=$S/deploy/install.sh
	sh "$I" --build "$B" --prefix "$T/q" --sysconfdir "$T/etc" --unit-dir "$T/units" >"$T/i.log" 2>&1
	check "install.sh (see $T/i.log)" [ $? = 0 ]
	for p in $PROGS; do
		check "install.sh gives $p" [ -x "$T/q/bin/$p" ]
	done
	check "install.sh writes the settings" [ -f "$T/etc/anedvd/anedvd.conf" ]
	U=$T/units/anedvd.service
	check "install.sh writes the unit" [ -f "$U" ]
	check "the unit runs the installed anedvd" grep -q "^ExecStart=$T/q/bin/anedvd serve " "$U"
	check "the unit reads the installed settings" grep -q "^EnvironmentFile=$T/etc/anedvd/anedvd.conf$" "$U"
	check "no /usr/local left in the unit" not grep -q /usr/local "$U"
	check "systemd-analyze verify accepts the installed unit" unit_verify "$U"
	# the check has teeth
	sed 's/^Restart=on-failure/Restrt=on-failure/' "$U" >"$T/units/typo.service"
	check "a misspelt key is refused" not unit_verify "$T/units/typo.service" 2>/dev/null
	sed "s|^ExecStart=$T/q/bin/anedvd|ExecStart=$T/q/bin/anedvd-missing|" "$U" >"$T/units/nobin.service"
	check "a missing program is refused" not unit_verify "$T/units/nobin.service" 2>/dev/null
	grep -v '^Restart=' "$U" >"$T/units/norestart.service"
	check "a unit without Restart=on-failure is refused" not unit_keys "$T/units/norestart.service" 2>/dev/null

	# the settings survive a second install and an uninstall
	echo "ANEDVD_MODEL=/models/mine.gguf" >>"$T/etc/anedvd/anedvd.conf"
	sh "$I" --build "$B" --prefix "$T/q" --sysconfdir "$T/etc" --unit-dir "$T/units" >"$T/i2.log" 2>&1
	check "a second install.sh" [ $? = 0 ]
	check "keeps the settings" grep -q mine.gguf "$T/etc/anedvd/anedvd.conf"
	sh "$I" --uninstall --prefix "$T/q" --sysconfdir "$T/etc" --unit-dir "$T/units" >"$T/u.log" 2>&1
	check "install.sh --uninstall" [ $? = 0 ]
	for p in $PROGS; do
		check "--uninstall removes $p" [ ! -e "$T/q/bin/$p" ]
	done
	check "--uninstall removes the unit" [ ! -e "$U" ]
	check "--uninstall removes share/anedvd" [ ! -e "$T/q/share/anedvd" ]
	check "--uninstall keeps the settings" grep -q mine.gguf "$T/etc/anedvd/anedvd.conf"
	sh "$I" --uninstall --purge --prefix "$T/q" --sysconfdir "$T/etc" --unit-dir "$T/units" >/dev/null 2>&1
	check "--purge removes the settings" [ ! -e "$T/etc/anedvd/anedvd.conf" ]
	sh "$I" --bogus >/dev/null 2>&1
	check "install.sh: a bad option exits 2" [ $? = 2 ]
	sh "$I" --build "$T/nowhere" --prefix "$T/r" --unit-dir "$T/units" >/dev/null 2>&1
	check "install.sh: a missing build directory exits 1" [ $? = 1 ]

	# the launchd job: well-formed, and what launchd needs
	P=$S/deploy/launchd/com.anedvd.serve.plist
	check "the plist parses and has the job's keys" python3 - "$P" <<'PY'
import plistlib, sys
d = plistlib.load(open(sys.argv[1], "rb"))
assert d["Label"] == "com.anedvd.serve"
args = d["ProgramArguments"]
assert args[:2] == ["/bin/sh", "-c"] and "exec /usr/local/bin/anedvd serve" in args[2], args
assert ". /usr/local/etc/anedvd/anedvd.conf" in args[2]
assert d["KeepAlive"] == {"SuccessfulExit": False}
assert d["RunAtLoad"] is True
assert d["EnvironmentVariables"]["ANEDVD_BIN_DIR"] == "/usr/local/bin"
PY
	if command -v plutil >/dev/null 2>&1; then
		check "plutil -lint" plutil -lint "$P"
	fi
	# the job's shell line runs: a stand-in anedvd prints its arguments
	mkdir -p "$T/fake/bin" "$T/fake/etc/anedvd"
	printf '#!/bin/sh\necho "$@"\n' >"$T/fake/bin/anedvd"
	chmod +x "$T/fake/bin/anedvd"
	printf 'ANEDVD_MODEL=/m/x.gguf\nANEDVD_PORT=9000\nANEDVD_ARGS="--max-seq 64"\n' >"$T/fake/etc/anedvd/anedvd.conf"
	line=$(python3 -c 'import plistlib,sys; print(plistlib.load(open(sys.argv[1],"rb"))["ProgramArguments"][2])' "$P" |
		sed "s|/usr/local/|$T/fake/|g")
	got=$(env -i PATH=/usr/bin:/bin /bin/sh -c "$line" 2>&1)
	check "the launchd line runs anedvd serve ($got)" [ "$got" = "serve --model /m/x.gguf --host 127.0.0.1 --port 9000 --max-seq 64" ]
	done_
fi

echo "usage: test-shim.sh syntax|worker|deploy ..." >&2
exit 2
