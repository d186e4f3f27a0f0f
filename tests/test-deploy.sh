#!/usr/bin/env bash
# test-deploy.sh - the installation: cmake --install, deploy/install.sh and
# the Debian package, from the files as installed.
#
#   test-deploy.sh install SRC_DIR BUILD_DIR
#       cmake --install into a temporary prefix gives the five programs (and
#       their libanedvd.so and anedvd-dev in lib/anedvd), the manual pages, the bundled model, the
#       unit and the settings with the prefix's paths; deploy/install.sh installs, writes a unit that
#       systemd-analyze verify accepts, keeps edited settings and
#       uninstalls; a broken unit is refused; the launchd plist is well formed
#   test-deploy.sh package SRC_DIR BUILD_DIR
#       cpack -G DEB builds the .deb (refused for a -march=native or
#       sanitizer build); its control data (dependencies from the linked
#       libraries, conffiles, maintainer scripts); dpkg -x into a scratch root
#       (nothing is installed on this system); from there: anedvd --version,
#       anedvd-dev off the PATH in /usr/lib/anedvd (probe runs, anedvd bench
#       points at it; no page or --help entry of a developer tool),
#       anedvd run on the bundled model with no --model (the reference story),
#       anedvd serve answering the WebUI page and an API call, man -l of every
#       page (each says every flag its command's --help says), systemd-analyze
#       verify and security of the unit pointed at the scratch root, the
#       postinst making the service user (with stand-in commands), the
#       programs built for the portable baseline and picking the CPU's best
#       kernels at run time
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
# the verdict goes to the stderr the script started with: a check run with
# 2>/dev/null (its command's own noise) must not hide its FAIL line
exec 3>&2
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&3; }
check() { # check "what" command...
	local what=$1
	shift
	if "$@"; then ok; else bad "$what"; fi
}
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-test-deploy.XXXXXX")
SERVE_PID=
cleanup() {
	[ -n "$SERVE_PID" ] && kill -9 "$SERVE_PID" 2>/dev/null
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
	check "cmake --install puts anedvd-dev in lib/anedvd, off the PATH" \
		sh -c "[ -x '$T/p/lib/anedvd/anedvd-dev' ] && [ ! -e '$T/p/bin/anedvd-dev' ]"
	# the programs' library beside them, found from bin/ by their run path
	# (no LD_LIBRARY_PATH, no ld.so.conf entry)
	check "cmake --install puts libanedvd.so in lib/anedvd" [ -f "$T/p/lib/anedvd/libanedvd.so" ]
	check "the installed programs find it from their own place" \
		sh -c "env -u LD_LIBRARY_PATH ldd '$T/p/bin/anedvd-cpu-worker' | grep -q '=> $T/p/bin/../lib/anedvd/libanedvd.so'"
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
	check "--uninstall removes lib/anedvd (anedvd-dev)" [ ! -e "$T/q/lib/anedvd" ]
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

# --- package ------------------------------------------------------------------------
# the flags of a help text: every --flag it names
flags() { grep -o -- '--[a-z0-9][a-z0-9-]*' | sort -u; }
# man_has_flags PAGE HELP_FILE: the rendered page names every flag of the help
man_has_flags() {
	local missing
	missing=$(comm -23 <(flags <"$2") <(MANWIDTH=200 man -l "$1" 2>/dev/null | flags))
	[ -z "$missing" ] || { echo "$1 lacks: $missing" >&2; return 1; }
}
# man_clean PAGE: man renders it with no warning
man_clean() {
	local err
	err=$(MANWIDTH=100 man --warnings -l "$1" 2>&1 >/dev/null)
	[ -z "$err" ] || { echo "$1: $err" >&2; return 1; }
}
# the CPU's best kernel path as /proc/cpuinfo tells it (what ad_cpu_level finds)
cpu_best() {
	local f
	f=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
	case $f in *" avx512f "*) case $f in *" avx512dq "*) case $f in *" avx512bw "*) case $f in *" avx512vl "*)
		echo "AVX-512"; return ;; esac ;; esac ;; esac ;; esac
	case $f in *" avx2 "*) case $f in *" fma "*) case $f in *" f16c "*) echo "AVX2/FMA/F16C"; return ;; esac ;; esac ;; esac
	echo "plain C"
}

if [ "$mode" = package ]; then
	for tool in cpack dpkg-deb dpkg man systemd-analyze python3 curl; do
		command -v "$tool" >/dev/null 2>&1 ||
			bad "$tool not found: install what deploy/install-deps.sh --test installs"
	done
	[ "$fail" = 0 ] || done_
	VERSION=$("$B/bin/anedvd" --version | sed 's/^anedvd //')

	# the package build is the portable one
	check "cpack refuses an ANEDVD_NATIVE build" \
		not cmake -DCPACK_ANEDVD_NATIVE=ON -P "$S/deploy/cpack-check.cmake" 2>/dev/null
	check "cpack refuses a sanitizer build" \
		not cmake -DCPACK_ANEDVD_SANITIZE=ON -P "$S/deploy/cpack-check.cmake" 2>/dev/null
	check "cpack takes a portable build" cmake -DCPACK_ANEDVD_NATIVE=OFF -P "$S/deploy/cpack-check.cmake"
	check "this build is not ANEDVD_NATIVE" grep -q '^ANEDVD_NATIVE:BOOL=OFF$' "$B/CMakeCache.txt"
	if [ "$(uname -m)" = x86_64 ]; then
		LEVEL=$(sed -n 's/^ANEDVD_X86_LEVEL:STRING=//p' "$B/CMakeCache.txt")
		check "the build's baseline is x86-64-v3 ($LEVEL)" [ "$LEVEL" = x86-64-v3 ]
		# every file of the programs is compiled for the baseline, none for this CPU
		check "every compile has -march=$LEVEL and none -march=native" python3 - "$B/compile_commands.json" "$S" "$LEVEL" <<'PY'
import json, os, sys
cmds, src, level = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3]
mine = [c for c in cmds if os.path.realpath(c["file"]).startswith(os.path.realpath(src) + "/")
        and "/tests/" not in c["file"]]
bad = [c["file"] for c in mine if f"-march={level}" not in c["command"] or "-march=native" in c["command"]]
for f in bad:
    print("not at the baseline:", f, file=sys.stderr)
sys.exit(1 if bad or len(mine) < 20 else 0)
PY
	fi

	# build the .deb
	nice -n 10 cpack -G DEB -B "$T/cpack" --config "$B/CPackConfig.cmake" >"$T/cpack.log" 2>&1
	check "cpack -G DEB (see $T/cpack.log)" [ $? = 0 ]
	DEB=$(ls "$T/cpack"/anedvd_*.deb 2>/dev/null | head -1)
	ARCH=$(dpkg --print-architecture)
	check "one .deb, named for the version and architecture" [ "$DEB" = "$T/cpack/anedvd_${VERSION}_$ARCH.deb" ]
	[ -f "$DEB" ] || done_
	dpkg-deb -f "$DEB" >"$T/control"
	check "control: Package anedvd" grep -q '^Package: anedvd$' "$T/control"
	check "control: Version $VERSION" grep -q "^Version: $VERSION$" "$T/control"
	check "control: Architecture $ARCH" grep -q "^Architecture: $ARCH$" "$T/control"
	DEPS=$(sed -n 's/^Depends: //p' "$T/control")
	for d in adduser libc6 libnng1 libprotobuf-c1 libcjson1 libpcre2-32-0 libh2o-evloop; do
		check "control: Depends on $d (from the linked libraries: $DEPS)" grep -q "^Depends:.*\b$d" "$T/control"
	done
	mkdir -p "$T/ctl"
	dpkg-deb -e "$DEB" "$T/ctl"
	check "conffiles: the settings" [ "$(cat "$T/ctl/conffiles")" = /etc/anedvd/anedvd.conf ]
	for s in postinst prerm postrm; do
		check "$s is in the package, executable" [ -x "$T/ctl/$s" ]
		check "$s parses" sh -n "$T/ctl/$s"
	done
	check "every file belongs to root" not bash -c "dpkg-deb -c '$DEB' | awk '\$2 != \"root/root\"' | grep -q ."

	# into a scratch root: nothing on this system changes
	R=$T/root
	dpkg -x "$DEB" "$R"
	check "dpkg -x" [ $? = 0 ]
	for p in $PROGS; do
		check "the package has /usr/bin/$p" [ -x "$R/usr/bin/$p" ]
	done
	# the developer tools: in the package, off the PATH, and working from there
	check "the package has /usr/lib/anedvd/libanedvd.so" [ -f "$R/usr/lib/anedvd/libanedvd.so" ]
	check "the package has /usr/lib/anedvd/anedvd-dev, not in /usr/bin" \
		sh -c "[ -x '$R/usr/lib/anedvd/anedvd-dev' ] && [ ! -e '$R/usr/bin/anedvd-dev' ]"
	check "the packaged anedvd-dev probe: CORRECT" \
		sh -c "'$R/usr/lib/anedvd/anedvd-dev' probe --size 64 --iters 2 | grep -q 'CORRECT'"
	"$R/usr/bin/anedvd" bench >/dev/null 2>"$T/bench.err"
	check "the packaged anedvd bench: exit 2" [ $? = 2 ]
	check "the packaged anedvd bench names the installed anedvd-dev" \
		grep -q "in anedvd-dev: run '$(readlink -f "$R")/usr/lib/anedvd/anedvd-dev bench'" "$T/bench.err"
	check "the package has the bundled model" cmp -s "$R/usr/share/anedvd/models/stories260K.gguf" \
		"$S/tests/data/stories260K/stories260K.gguf"
	check "the package has the copyright" grep -q "License: MIT" "$R/usr/share/doc/anedvd/copyright"
	check "the settings are root's alone" [ "$(stat -c %a "$R/etc/anedvd/anedvd.conf")" = 600 ]
	check "the settings name the packaged model" \
		grep -q '^ANEDVD_MODEL=/usr/share/anedvd/models/stories260K.gguf$' "$R/etc/anedvd/anedvd.conf"
	A=$R/usr/bin/anedvd
	check "anedvd --version" [ "$("$A" --version)" = "anedvd $VERSION" ]
	# the installed programs, not the build's: the children are found beside anedvd
	"$A" run --prompt "Once upon a time" --no-chat --max-tokens 40 >"$T/run.out" 2>"$T/run.err"
	check "anedvd run with no --model exits 0 (see $T/run.err)" [ $? = 0 ]
	check "run takes the bundled model from the root" \
		grep -q "no --model: the bundled stories260K.gguf ($R/usr/share/anedvd/models/stories260K.gguf)" "$T/run.err"
	check "run tells the reference story" \
		grep -q "there was a little girl named Lily. She loved to play outside in the park." "$T/run.out"
	mv "$R/usr/share/anedvd/models" "$R/usr/share/anedvd/models.away"
	"$A" run --prompt "Once upon a time" --max-tokens 4 >/dev/null 2>"$T/nomodel.err"
	check "without the bundled model, run exits 2" [ $? = 2 ]
	check "and says --model is required" grep -q -- "--model is required (no bundled model in $R/usr/bin/" "$T/nomodel.err"
	mv "$R/usr/share/anedvd/models.away" "$R/usr/share/anedvd/models"
	"$A" info >"$T/info.out" 2>&1
	BEST=$(cpu_best)
	check "the installed programs pick the CPU's best kernels at run time ($BEST)" \
		grep -q "kernels picked at run time: $BEST)" "$T/info.out"
	ANEDVD_SIMD=ref "$A" info >"$T/info-ref.out" 2>&1
	check "ANEDVD_SIMD caps them, and info says so" grep -q "kernels picked at run time: plain C (capped" "$T/info-ref.out"

	# the server and its WebUI, from the root
	PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
	"$A" serve --port "$PORT" >"$T/serve.out" 2>"$T/serve.err" &
	SERVE_PID=$!
	up=0
	for _ in $(seq 1 300); do
		grep -q "listening" "$T/serve.err" && { up=1; break; }
		kill -0 "$SERVE_PID" 2>/dev/null || break
		sleep 0.05
	done
	check "anedvd serve with no --model comes up (see $T/serve.err)" [ $up = 1 ]
	curl -s -m 10 -D "$T/ui.head" "http://127.0.0.1:$PORT/" >"$T/ui.html"
	check "GET / is the WebUI page" grep -q "<title>anedvd</title>" "$T/ui.html"
	check "the WebUI page is the embedded web/index.html" cmp -s "$T/ui.html" "$S/web/index.html"
	check "served as HTML" grep -qi '^content-type: text/html' "$T/ui.head"
	curl -s -m 30 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
		-d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0}' >"$T/completion.json"
	check "the API answers from the bundled model" grep -q "there was a little girl" "$T/completion.json"
	curl -s -m 10 "http://127.0.0.1:$PORT/v1/models" >"$T/models.json"
	check "the model is named stories260K" grep -q '"id":"stories260K"' "$T/models.json"
	kill -TERM "$SERVE_PID"
	wait "$SERVE_PID"
	check "serve exits 0 on SIGTERM" [ $? = 0 ]
	SERVE_PID=

	# the manual pages, as installed
	M=$R/usr/share/man/man1
	check "anedvd.1" [ -f "$M/anedvd.1.gz" ]
	"$A" --help >"$T/help.txt"
	CMDS=$(awk '/^commands:$/ { on = 1; next } on && /^[^ ]/ { exit } on && /^  [a-z]/ { print $1 }' "$T/help.txt")
	check "anedvd --help lists commands" [ -n "$CMDS" ]
	check "anedvd --help lists no developer tool" not grep -qE '^  (bench|probe|width|attnbench|kernels|layers|check) ' "$T/help.txt"
	check "no manual page of a developer tool" not bash -c "ls '$M' | grep -qE '^anedvd-(dev|bench|probe|width|attnbench|kernels|layers|check)[.]'"
	check "man anedvd renders cleanly" man_clean "$M/anedvd.1.gz"
	check "man anedvd has every flag and name of anedvd --help" man_has_flags "$M/anedvd.1.gz" "$T/help.txt"
	MANWIDTH=200 man -l "$M/anedvd.1.gz" >"$T/anedvd.man" 2>/dev/null
	for c in $CMDS; do
		check "man anedvd lists $c" grep -q "^ *$c " "$T/anedvd.man"
		page=$M/anedvd-$c.1.gz
		check "anedvd-$c.1" [ -f "$page" ]
		[ -f "$page" ] || continue
		"$A" "$c" --help >"$T/help-$c.txt" 2>&1
		check "man anedvd-$c renders cleanly" man_clean "$page"
		check "man anedvd-$c has every flag of anedvd $c --help" man_has_flags "$page" "$T/help-$c.txt"
		check "man anedvd-$c: NAME line for whatis" \
			bash -c "MANWIDTH=200 man -l '$page' 2>/dev/null | grep -q '^ *anedvd-$c - '"
	done
	check "no manual page of a command --help does not list" \
		[ "$(ls "$M" | wc -l)" = "$(($(echo "$CMDS" | wc -w) + 1))" ]
	# the flag check has teeth: a page that lost an option is caught (--top-k:
	# named nowhere else on the page, as --seed is in the short flags' line)
	zcat "$M/anedvd-run.1.gz" | sed '/^\\fB\\-\\-top\\-k\\fR/,+1d' | gzip >"$T/lost.1.gz"
	check "the mutation took" not cmp -s <(zcat "$M/anedvd-run.1.gz") <(zcat "$T/lost.1.gz")
	check "a page that lost --top-k fails the flag check" not man_has_flags "$T/lost.1.gz" "$T/help-run.txt" 2>/dev/null
	zcat "$M/anedvd-run.1.gz" | sed '5a .XX not a macro' >"$T/broken.1"
	check "a page with a roff error fails the clean check" not man_clean "$T/broken.1" 2>/dev/null

	# the unit, pointed at the scratch root (systemd-analyze checks the
	# programs it names exist and its Documentation page is in MANPATH)
	U0=$R/usr/lib/systemd/system/anedvd.service
	check "the unit is in /usr/lib/systemd/system" [ -f "$U0" ]
	check "the unit runs /usr/bin/anedvd serve" grep -q '^ExecStart=/usr/bin/anedvd serve ' "$U0"
	check "the unit reads /etc/anedvd/anedvd.conf" grep -q '^EnvironmentFile=/etc/anedvd/anedvd.conf$' "$U0"
	check "the unit runs as the user anedvd" grep -q '^User=anedvd$' "$U0"
	mkdir -p "$T/units"
	U=$T/units/anedvd.service
	sed -e "s|=/usr/bin/|=$R/usr/bin/|g" -e "s|=/etc/anedvd/|=$R/etc/anedvd/|g" -e "s|=/usr/share/|=$R/usr/share/|g" \
		"$U0" >"$U"
	check "systemd-analyze verify accepts the unit" unit_verify "$U" "$R/usr/share/man"
	check "systemd-analyze security: exposure 2.5 or less" \
		systemd-analyze security --offline=yes --threshold=25 "$U" >"$T/security.txt" 2>&1
	sed 's/^User=anedvd/Usr=anedvd/' "$U" >"$T/units/typo.service"
	check "a misspelt key is refused" not unit_verify "$T/units/typo.service" "$R/usr/share/man" 2>/dev/null
	sed "s|^ExecStart=$R/usr/bin/anedvd|ExecStart=$R/usr/bin/anedvd-gone|" "$U" >"$T/units/nobin.service"
	check "a missing program is refused" not unit_verify "$T/units/nobin.service" "$R/usr/share/man" 2>/dev/null
	grep -v -e '^ProtectSystem' -e '^PrivateDevices' -e '^NoNewPrivileges' -e '^SystemCallFilter' \
		-e '^CapabilityBoundingSet' -e '^ProtectKernel' -e '^RestrictNamespaces' "$U" >"$T/units/weak.service"
	check "a unit without its hardening fails the security check" \
		not systemd-analyze security --offline=yes --threshold=25 "$T/units/weak.service" >/dev/null 2>&1

	# the postinst, with stand-ins for the commands it runs (nothing of this
	# system's users changes)
	mkdir -p "$T/stub"
	for c in adduser useradd systemctl; do
		printf '#!/bin/sh\necho "%s $*" >>"%s/calls"\n' "$c" "$T" >"$T/stub/$c"
	done
	printf '#!/bin/sh\nexit 2\n' >"$T/stub/getent" # no such user
	chmod +x "$T/stub"/*
	PATH=$T/stub:$PATH sh "$T/ctl/postinst" configure
	check "postinst configure exits 0" [ $? = 0 ]
	check "postinst makes the system user anedvd" \
		grep -q -- "^adduser --system --group .*--home /var/lib/anedvd .*anedvd$" "$T/calls"
	rm -f "$T/calls"
	printf '#!/bin/sh\necho "anedvd:x:999:999::/var/lib/anedvd:/usr/sbin/nologin"\n' >"$T/stub/getent"
	PATH=$T/stub:$PATH sh "$T/ctl/postinst" configure
	check "postinst leaves an existing user alone" not grep -q adduser "$T/calls" 2>/dev/null
	rm -f "$T/calls" "$T/stub/getent"
	printf '#!/bin/sh\nexit 2\n' >"$T/stub/getent"
	PATH=$T/stub:$PATH sh "$T/ctl/postinst" abort-upgrade
	check "postinst does nothing but on configure" [ ! -e "$T/calls" ]
	done_
fi

echo "usage: test-deploy.sh install|package SRC_DIR BUILD_DIR" >&2
exit 2
