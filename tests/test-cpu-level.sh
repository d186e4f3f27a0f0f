#!/usr/bin/env bash
# test-cpu-level.sh - the CPU check every program makes first (common/cpu-level.h).
#
#   test-cpu-level.sh BIN_DIR "CHECK_OBJECTS" "VEX_OBJECTS"
#
# - the check's object (cpu-level.c.o) holds no VEX- or EVEX-encoded
#   instruction (objdump; the scan finds each kind in VEX_OBJECTS, built
#   for that purpose, so it is not vacuous);
# - the check is the first constructor (.init_array) of libanedvd.so,
#   whose constructors the loader runs before the program's: each of the
#   six programs links it (DT_NEEDED) and holds none of its functions (the
#   check's included);
# - with features hidden (ANEDVD_CPU_HIDE, the test hook) each program
#   prints what the CPU lacks and how to build for it, prints nothing on
#   stdout and exits 1; without it each starts as before.
# Prints "N passed, N failed"; exit 1 on any failure.
set -u
BIN=$1
CHECK_OBJS=$2
VEX_OBJS=$3
PROGS="anedvd anedvd-dev anedvd-frontend anedvd-tokenizer anedvd-ane-worker anedvd-cpu-worker"
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-test-cpu-level.XXXXXX")
trap 'rm -rf "$T"' EXIT
pass=0
fail=0
check() { # check "what" command...
	local what=$1
	shift
	if "$@"; then pass=$((pass + 1)); else fail=$((fail + 1)); echo "FAIL: $what" >&2; fi
}
not() { ! "$@"; }

# vex OBJECT: list the VEX/EVEX-encoded instructions of OBJECT (exit 0 when none)
vex() {
	objdump -d "$1" >"$T/dis" || return 2
	python3 -c '
import re, sys
found = []
for line in sys.stdin:
    m = re.match(r"\s*[0-9a-f]+:\t([0-9a-f ]+?)\s*\t(.*)$", line)
    if not m:
        continue  # a label, a header, or the second line of a long instruction
    b = m.group(1).split()
    i = 0
    # legacy prefixes, then REX: neither may precede VEX, but skip them anyway
    while i < len(b) and (b[i] in ("26", "2e", "36", "3e", "64", "65", "66", "67", "f0", "f2", "f3")
                          or b[i][0] == "4"):
        i += 1
    # in 64-bit mode c4/c5 always start VEX and 62 EVEX (LES, LDS, BOUND are gone)
    if i < len(b) and b[i] in ("c4", "c5", "62"):
        found.append(("EVEX " if b[i] == "62" else "VEX ") + m.group(2).strip())
for f in found:
    print(f)
sys.exit(1 if found else 0)' <"$T/dis"
}

chk=
for o in $CHECK_OBJS; do case $o in *cpu-level.c.o) chk=$o ;; esac; done
check "the check's object is built ($CHECK_OBJS)" [ -f "$chk" ]
vex "$chk" >"$T/chk.txt"
rc=$?
check "cpu-level.c.o has no VEX/EVEX instruction (objdump ran): $(head -3 "$T/chk.txt" | tr '\n' ';')" [ $rc = 0 ]
# the scan has teeth
for o in $VEX_OBJS; do vex "$o"; done >"$T/vex.txt"
check "the scan finds VEX (vfmadd) in the AVX2 sample" grep -q "^VEX vfmadd" "$T/vex.txt"
check "the scan finds VEX (pdep, no 'v') in the BMI2 sample" grep -q "^VEX pdep" "$T/vex.txt"
check "the scan finds EVEX in the AVX-512 sample" grep -q "^EVEX " "$T/vex.txt"

# first_ctor PROGRAM: the name of the first function of .init_array (the
# sanitizers' own module constructors (GCC's _sub_I_00099_*, priority 99), which come
# first in their builds, aside)
first_ctor() {
	python3 - "$1" <<'PY'
import re, subprocess, sys
prog = sys.argv[1]
syms = {}
for line in subprocess.run(["nm", prog], capture_output=True, text=True).stdout.splitlines():
    p = line.split()
    if len(p) == 3 and p[1] in "tT":
        syms[int(p[0], 16)] = p[2]
words = ""
for line in subprocess.run(["objdump", "-s", "-j", ".init_array", prog], capture_output=True,
                           text=True).stdout.splitlines():
    m = re.match(r"\s[0-9a-f]+ ((?:[0-9a-f]{8} ?){1,4})", line)
    if m:
        words += m.group(1).replace(" ", "")
ptrs = [int.from_bytes(bytes.fromhex(words[i:i + 16]), "little") for i in range(0, len(words), 16)]
names = [syms.get(a, hex(a)) for a in ptrs]
names = [n for n in names if not re.match(r"(asan|ubsan|sancov)\.|.*module_ctor|_sub_I_00099_", n)]
print(names[0] if names else "none")
PY
}

LIB=$BIN/../lib/anedvd/libanedvd.so
check "libanedvd.so is built" [ -f "$LIB" ]
check "libanedvd.so: the CPU check is the first constructor ($(first_ctor "$LIB"))" \
	[ "$(first_ctor "$LIB")" = cpu_level_gate ]
# the library's functions, which a program should take from it, not hold
nm -D --defined-only "$LIB" | awk '$2 == "T" { print $3 }' | sort >"$T/lib.syms"
check "libanedvd.so exports its functions ($(wc -l <"$T/lib.syms"))" [ "$(wc -l <"$T/lib.syms")" -gt 500 ]
for p in $PROGS; do
	P=$BIN/$p
	check "$p is built" [ -x "$P" ]
	[ -x "$P" ] || continue
	check "$p links libanedvd.so" sh -c "readelf -d '$P' | grep -q 'NEEDED.*\[libanedvd\.so\]'"
	nm --defined-only "$P" | awk '$2 == "T" { print $3 }' | sort | comm -12 - "$T/lib.syms" >"$T/dup"
	check "$p holds none of the library's functions: $(head -5 "$T/dup" | tr '\n' ' ')" [ ! -s "$T/dup" ]
	ANEDVD_CPU_HIDE=avx2,f16c "$P" --help >"$T/out" 2>"$T/err"
	rc=$?
	check "$p on a CPU without AVX2 and F16C: exit 1 (got $rc)" [ $rc = 1 ]
	check "$p names what the CPU lacks" grep -q "^$p: this CPU lacks AVX2, F16C, which this build of anedvd needs" "$T/err"
	check "$p says how to build for it" grep -q -- "-DANEDVD_X86_LEVEL=x86-64$" "$T/err"
	check "$p: nothing else ran (no stdout, two lines of stderr)" \
		sh -c "[ ! -s '$T/out' ] && [ \$(wc -l < '$T/err') = 2 ]"
	"$P" --help >"$T/out" 2>"$T/err"
	check "$p --help on this CPU: no word of the check" not grep -q "this CPU lacks" "$T/err"
	ANEDVD_CPU_HIDE=avx512f,avx512bw "$P" --help >/dev/null 2>"$T/err"
	check "$p: a feature the build does not use, hidden, stops nothing" not grep -q "this CPU lacks" "$T/err"
done
"$BIN/anedvd" --version >"$T/v" 2>&1
check "anedvd --version on this CPU" grep -q "^anedvd [0-9]" "$T/v"

echo "$pass passed, $fail failed"
[ "$fail" = 0 ]
