#!/usr/bin/env bash
# test-deploy.sh - the installation: cmake --install and deploy/install.sh,
# from the files as installed.
#
#   test-deploy.sh install SRC_DIR BUILD_DIR
#       cmake --install into a temporary prefix gives the five programs, the
#       manual pages, the bundled model, the unit and the settings with the
#       prefix's paths; deploy/install.sh installs, writes a unit that
#       systemd-analyze verify accepts, keeps edited settings and
#       uninstalls; a broken unit is refused; the launchd plist is well formed
# Every check that could pass vacuously is shown to fail on a broken input.
# Prints "N passed, N failed"; exit 1 on any failure.
set -u
mode=${1:-}
S=${2:-}
B=${3:-}
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
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-test-deploy.XXXXXX")
cleanup() {
	if [ -n "${ANEDVD_KEEP_TMP:-}" ]; then echo "kept $T (ANEDVD_KEEP_TMP)" >&2; else rm -rf "$T"; fi
}
trap cleanup EXIT
# a private runtime base and kernel cache: nothing of the machine's is touched
export XDG_RUNTIME_DIR=$T
export ANEDVD_CACHE_DIR=$T/kcache
done_() {
	echo "$pass passed, $fail failed"
	[ "$fail" = 0 ]
	exit $?
}
PROGS="anedvd anedvd-frontend anedvd-tokenizer anedvd-ane-worker anedvd-cpu-worker"

# --- the unit -------------------------------------------------------------------------
# key check of a unit (always, for the keys this unit must have; alone where
# systemd-analyze cannot run): known sections and keys, required settings
unit_keys() {
	python3 - "$1" <<'PY'
import sys, re
known = {
 "Unit": {"Description", "Documentation", "After", "Wants", "Requires", "Before"},
 "Service": {"Type", "User", "Group", "Environment", "EnvironmentFile", "RuntimeDirectory",
  "RuntimeDirectoryMode", "StateDirectory", "StateDirectoryMode", "CacheDirectory", "CacheDirectoryMode",
  "ExecStart", "Restart", "RestartSec", "KillMode", "TimeoutStopSec", "NoNewPrivileges",
  "CapabilityBoundingSet", "AmbientCapabilities", "ProtectSystem", "ProtectHome", "PrivateTmp",
  "PrivateDevices", "RemoveIPC", "ProtectProc", "ProtectKernelTunables", "ProtectKernelModules",
  "ProtectKernelLogs", "ProtectControlGroups", "ProtectClock", "ProtectHostname", "RestrictAddressFamilies",
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
if one("Service", "User") in (None, "", "root", "0"):
    bad.append("no User= other than root")
for k in ("NoNewPrivileges", "ProtectSystem", "PrivateTmp", "PrivateDevices"):
    if not one("Service", k):
        bad.append(f"hardening key {k} missing")
if not one("Install", "WantedBy"):
    bad.append("no WantedBy")
for b in bad:
    print(b, file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# systemd-analyze verify UNIT with the manual pages of MANPATH (the unit's
# Documentation=man: page must be there), any warning counted as a failure;
# then the key check
unit_verify() {
	if ! command -v systemd-analyze >/dev/null 2>&1; then
		if [ "$(uname -s)" = Linux ]; then
			echo "systemd-analyze not found: install the Debian package systemd (deploy/install-deps.sh --test)" >&2
			return 1
		fi
		unit_keys "$1"
		return
	fi
	local out rc
	out=$(MANPATH=$2 systemd-analyze verify "$1" 2>&1)
	rc=$?
	# dependencies of a unit outside the system's unit path are not our concern
	out=$(printf '%s\n' "$out" | grep -v -e 'network-online.target' -e '^$' || true)
	[ -n "$out" ] && printf '%s\n' "$out" >&2
	[ "$rc" = 0 ] && [ -z "$out" ] && unit_keys "$1"
}

# --- install ------------------------------------------------------------------------
if [ "$mode" = install ]; then
	cmake --install "$B" --prefix "$T/p" >"$T/install.log" 2>&1
	check "cmake --install" [ $? = 0 ]
	for p in $PROGS; do
		check "cmake --install gives $p" [ -x "$T/p/bin/$p" ]
	done
	check "the installed anedvd runs" "$T/p/bin/anedvd" --version
	check "the manual page goes to share/man" [ -f "$T/p/share/man/man1/anedvd.1.gz" ]
	check "the bundled model goes to share/anedvd/models" [ -f "$T/p/share/anedvd/models/stories260K.gguf" ]
	U=$T/p/lib/systemd/system/anedvd.service
	check "the unit goes to lib/systemd/system" [ -f "$U" ]
	check "the unit runs the prefix's anedvd" grep -q "^ExecStart=$T/p/bin/anedvd serve " "$U"
	check "the unit reads the prefix's settings" grep -q "^EnvironmentFile=$T/p/etc/anedvd/anedvd.conf$" "$U"
	check "no /usr/local path left in the unit" not grep -q "/usr/local/" "$U"
	check "the settings go to etc/anedvd" [ -f "$T/p/etc/anedvd/anedvd.conf" ]
	check "the settings name the prefix's model" grep -q "^ANEDVD_MODEL=$T/p/share/anedvd/models/stories260K.gguf$" \
		"$T/p/etc/anedvd/anedvd.conf"
	check "the settings are the owner's alone" [ "$(stat -c %a "$T/p/etc/anedvd/anedvd.conf")" = 600 ]
	check "the shipped unit's keys" unit_keys "$S/deploy/systemd/anedvd.service"
	# DESTDIR: everything under it, the paths inside without it
	DESTDIR=$T/dd cmake --install "$B" --prefix /opt/anedvd >"$T/dd.log" 2>&1
	check "cmake --install with DESTDIR" [ $? = 0 ]
	check "DESTDIR: the unit under it" [ -f "$T/dd/opt/anedvd/lib/systemd/system/anedvd.service" ]
	check "DESTDIR: the unit's paths without it" \
		grep -q "^ExecStart=/opt/anedvd/bin/anedvd serve " "$T/dd/opt/anedvd/lib/systemd/system/anedvd.service"
	check "DESTDIR: the settings under it" [ -f "$T/dd/opt/anedvd/etc/anedvd/anedvd.conf" ]

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
	check "no /usr/local left in the unit" not grep -q /usr/local/ "$U"
	check "install.sh says where systemd does not look" grep -q "systemctl link $U" "$T/i.log"
	check "systemd-analyze verify accepts the installed unit" unit_verify "$U" "$T/q/share/man"
	# the check has teeth
	sed 's/^Restart=on-failure/Restrt=on-failure/' "$U" >"$T/units/typo.service"
	check "a misspelt key is refused" not unit_verify "$T/units/typo.service" "$T/q/share/man" 2>/dev/null
	sed "s|^ExecStart=$T/q/bin/anedvd|ExecStart=$T/q/bin/anedvd-missing|" "$U" >"$T/units/nobin.service"
	check "a missing program is refused" not unit_verify "$T/units/nobin.service" "$T/q/share/man" 2>/dev/null
	check "a unit whose manual page is missing is refused" not unit_verify "$U" "$T/nowhere" 2>/dev/null
	grep -v '^Restart=' "$U" >"$T/units/norestart.service"
	check "a unit without Restart=on-failure is refused" not unit_keys "$T/units/norestart.service" 2>/dev/null
	grep -v '^User=' "$U" >"$T/units/root.service"
	check "a unit running as root is refused" not unit_keys "$T/units/root.service" 2>/dev/null

	# the settings survive a second install and an uninstall
	echo "ANEDVD_MODEL=/models/mine.gguf" >>"$T/etc/anedvd/anedvd.conf"
	sh "$I" --build "$B" --prefix "$T/q" --sysconfdir "$T/etc" --unit-dir "$T/units" >"$T/i2.log" 2>&1
	check "a second install.sh" [ $? = 0 ]
	check "keeps the settings" grep -q mine.gguf "$T/etc/anedvd/anedvd.conf"
	check "and says so" grep -q "kept the settings" "$T/i2.log"
	sh "$I" --uninstall --prefix "$T/q" --sysconfdir "$T/etc" --unit-dir "$T/units" >"$T/u.log" 2>&1
	check "install.sh --uninstall" [ $? = 0 ]
	for p in $PROGS; do
		check "--uninstall removes $p" [ ! -e "$T/q/bin/$p" ]
	done
	check "--uninstall removes the unit" [ ! -e "$U" ]
	check "--uninstall removes the manual pages" [ ! -e "$T/q/share/man/man1/anedvd.1.gz" ]
	check "--uninstall removes share/anedvd" [ ! -e "$T/q/share/anedvd" ]
	check "--uninstall keeps the settings" grep -q mine.gguf "$T/etc/anedvd/anedvd.conf"
	sh "$I" --uninstall --purge --prefix "$T/q" --sysconfdir "$T/etc" --unit-dir "$T/units" >/dev/null 2>&1
	check "--purge removes the settings" [ ! -e "$T/etc/anedvd/anedvd.conf" ]
	sh "$I" --build "$B" --prefix "$T/n" --sysconfdir "$T/etc2" --unit-dir "$T/units2" --no-service >/dev/null 2>&1
	check "install.sh --no-service" [ $? = 0 ]
	check "--no-service writes no unit" [ ! -e "$T/units2/anedvd.service" ]
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

echo "usage: test-deploy.sh install SRC_DIR BUILD_DIR" >&2
exit 2
