#!/usr/bin/env bash
# test-cli.sh - the anedvd CLI end to end, over the real processes.
#
#   test-cli.sh BIN_DIR DATA_DIR GEN_MODEL
#
# run reproduces the stories260K reference story; verify passes on every
# fixture model and fails on a deliberately broken pipeline; a SIGKILL of
# the ane-worker in the middle of a greedy run changes no token; SIGINT
# leaves no child, no shared memory and no runtime directory; a kernel cache
# entry still being written at the end is waited for; --trace is
# valid JSON; bad usage exits 2 naming the flag. Prints "N passed, N failed".
set -u
BIN=$1
DATA=$2
GEN=$3
A=$BIN/anedvd
D=$BIN/anedvd-dev # the developer tools
T=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-test-cli.XXXXXX")
# a private runtime base: other instances on the machine are not touched
export XDG_RUNTIME_DIR=$T
trap 'if [ -n "${ANEDVD_KEEP_TMP:-}" ]; then echo "kept $T (ANEDVD_KEEP_TMP)" >&2; else rm -rf "$T"; fi' EXIT
pass=0
fail=0
ok() { pass=$((pass + 1)); }
# the verdict goes to the stderr the script started with: a check run with
# 2>/dev/null (its command's own noise) must not hide its FAIL line
exec 3>&2
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&3; }
last=$SECONDS
check() { # check "what" command...
	local what=$1
	shift
	if "$@"; then ok; else bad "$what"; fi
	# a slow step is worth seeing (the commands before the check included)
	[ $((SECONDS - last)) -lt 10 ] || echo "note: '$what' took $((SECONDS - last)) s" >&2
	last=$SECONDS
}

STORIES=$DATA/stories260K/stories260K.gguf
IDS=1,403,407,261,378
# the reference ids after "Once upon a time" (tests/data/stories260K/SOURCES.md)
REF="432 383 286 261 376 298 315 421 395 317 426 338 401 396 267 337 410 408 419 292 411 322 265 282 295 433 426 385 328 432 358 394 261 370 432 352 266 268 388 426 338 391 266 267 337 335 312 432 398 312 286 267 414 270 333 415 426 13 438 310"

json_ids() { python3 -c 'import json,sys; print(" ".join(str(i) for i in json.load(open(sys.argv[1]))["ids"]))' "$1"; }

# leftovers of instance $1: runtime dir, shared memory, processes whose parent it was
no_leftovers() {
	local pid=$1
	[ ! -e "$T/anedvd-$pid" ] || { echo "runtime dir left" >&2; return 1; }
	! ls /dev/shm 2>/dev/null | grep -q "^anedvd-$pid-" || { echo "shm left" >&2; return 1; }
	local k
	for k in $2; do
		if kill -0 "$k" 2>/dev/null; then echo "child $k still alive" >&2; return 1; fi
	done
	return 0
}

# --- run: the reference story -----------------------------------------------------------
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 > "$T/run.txt" 2> "$T/run.err"
check "run exits 0" [ $? -eq 0 ]
check "run prints the reference story" grep -q "there was a little girl named Lily. She loved to play outside in the park. One day, she saw a big, red ball." "$T/run.txt"
check "run prints the decode rate" grep -q "^decode: .* tok/s" "$T/run.txt"
check "run prints the per-token split" grep -q "^per-token split (emu[^)]*): qkv .* ms, .*IPC .* attention .* sampling .* other" "$T/run.txt"
check "run says it uses emu" grep -q "using the emu backend" "$T/run.err"

$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json > "$T/run.json" 2>/dev/null
check "run --json ids are the reference" [ "$(json_ids "$T/run.json")" = "$REF" ]
# llama.cpp's short flags stand for the long ones: the same tokens, the same seed's
$A run -m "$STORIES" --prompt-ids $IDS --no-chat -n 60 -t 1 -c 512 --json > "$T/short.json" 2>/dev/null
check "run -m -n -t -c: the reference ids" [ "$(json_ids "$T/short.json")" = "$REF" ]
$A run -m "$STORIES" -p "Once upon a time" --no-chat -n 16 --temp 1 -s 7 --json > "$T/short-s.json" 2>/dev/null
$A run --model "$STORIES" --prompt "Once upon a time" --no-chat --max-tokens 16 --temp 1 --seed 7 --json \
	> "$T/long-s.json" 2>/dev/null
S1=$(json_ids "$T/short-s.json")
S2=$(json_ids "$T/long-s.json")
check "run -p -s: the ids of --prompt --seed" [ -n "$S1" -a "$S1" = "$S2" ]
$A serve --model "$STORIES" -p 8080 > /dev/null 2> "$T/serve-p.err"
check "serve -p (no --prompt there): exit 2" [ $? -eq 2 ]
check "serve -p: the error names -p as given" grep -q "unknown argument '-p'" "$T/serve-p.err"
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --in-process > "$T/inproc.json" 2>/dev/null
check "run --in-process ids are the reference" [ "$(json_ids "$T/inproc.json")" = "$REF" ]
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --backend exact > "$T/exact.json" 2>/dev/null
check "run --backend exact ids are the reference" [ "$(json_ids "$T/exact.json")" = "$REF" ]
$A run --model "$STORIES" --prompt "Once upon a time" --no-chat --max-tokens 8 --ab > "$T/ab.txt" 2> "$T/ab.err"
check "run --ab ok" grep -q "argmax equal -> ok" "$T/ab.err"
ANEDVD_LOG=info $A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 10 --repeat 3 > "$T/rep.txt" 2> "$T/rep.err"
check "run --repeat prints the median" grep -q "^decode over 3 runs: median .* (min .*, max .*" "$T/rep.txt"
# a prefix cache only where a later job could read it
check "run --repeat 3 keeps a prefix cache" grep -q "cpu-worker info: prefix cache [0-9.]* MiB" "$T/rep.err"
ANEDVD_LOG=info $A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 4 > /dev/null 2> "$T/once.err"
check "run (one job) has no prefix cache" grep -q "cpu-worker info: prefix cache off" "$T/once.err"
ANEDVD_LOG=info $A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 4 --in-process > /dev/null 2> "$T/once.err"
check "run --in-process (one job) has no prefix cache" grep -q "prefix cache off" "$T/once.err"
# speculative decoding: the reference ids with it on, off, and in the
# probe; a prompt that repeats itself drafts and accepts, and --ngram-probe
# (which decodes without speculation) counts what a live run with the same
# fixed draft cost does
spec_field() { python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(j[sys.argv[2]][sys.argv[3]])' "$@"; }
check "run --json has the speculative counters" python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["speculative"]; assert s["on"] is True and {"steps","drafted","accepted","acceptance","by_n"} <= set(s)' "$T/run.json"
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --no-spec > "$T/nospec.json" 2>/dev/null
check "run --no-spec ids are the reference" [ "$(json_ids "$T/nospec.json")" = "$REF" ]
check "run --no-spec drafts nothing" [ "$(spec_field "$T/nospec.json" speculative drafted)" = 0 ]
# a decode call's IPC split by the data plane's clocks: the request's
# pickup and the reply's way back are both there and within the whole; in
# one process (exact) nothing crosses
ipc_split() { python3 -c 'import json,sys; t=json.load(open(sys.argv[1]))["timings"]; s=t["decode_ipc_per_call_us"]; per=1000*t["decode_per_token_ms"]["ipc"]/t["decode_round_trips_per_token"]; exec(sys.argv[2])' "$@"; }
check "run --json splits a decode call's IPC: pickup and reply within it" ipc_split "$T/nospec.json" 'assert s["pickup"] > 0 and s["reply"] > 0 and s["rest"] >= 0, s; assert s["pickup"] + s["reply"] <= s["all"] * 1.001 + 1e-6, s; assert abs(s["all"] - per) <= 1e-6 * max(1, per), (s, per)'
check "run --backend exact: no pickup or reply to split" ipc_split "$T/exact.json" 'assert s["pickup"] == 0 and s["reply"] == 0, s'
check "run prints the decode call's IPC split" grep -q "^IPC per decode call .* us: the ane-worker taking the request .* us, the reply reaching this side .* us" "$T/run.txt"
RIDS=$IDS,$(echo "$REF" | cut -d' ' -f1-30 | tr ' ' ,),$IDS
$A run --model "$STORIES" --prompt-ids "$RIDS" --no-chat --max-tokens 80 --json --draft-cost 0.1 > "$T/spec.json" 2>/dev/null
$A run --model "$STORIES" --prompt-ids "$RIDS" --no-chat --max-tokens 80 --json --draft-cost 0.1 --ngram-probe > "$T/probe.json" 2>/dev/null
check "a repeating prompt drafts and accepts" python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["speculative"]; assert 0 < s["accepted"] <= s["drafted"], s' "$T/spec.json"
# --in-process runs the cpu-worker's own service (one decode loop): the same
# drafts, the same ids
$A run --model "$STORIES" --prompt-ids "$RIDS" --no-chat --max-tokens 80 --json --draft-cost 0.1 --in-process > "$T/spec-ip.json" 2>/dev/null
check "--in-process: the same ids as the cpu-worker process" [ "$(json_ids "$T/spec-ip.json")" = "$(json_ids "$T/spec.json")" ]
check "--in-process drafts and accepts" python3 -c 'import json,sys; s=json.load(open(sys.argv[1]))["speculative"]; assert 0 < s["accepted"] <= s["drafted"], s' "$T/spec-ip.json"
check "--ngram-probe: the same ids as the live run" [ "$(json_ids "$T/probe.json")" = "$(json_ids "$T/spec.json")" ]
check "--ngram-probe drafts nothing itself" [ "$(spec_field "$T/probe.json" speculative drafted)" = 0 ]
check "--ngram-probe counts what the live run did" python3 -c '
import json,sys
live=json.load(open(sys.argv[1]))["speculative"]; pr=json.load(open(sys.argv[2]))["ngram_probe"]
for k in ("steps","drafted","accepted","by_n"): assert live[k]==pr[k], (k, live[k], pr[k])
assert pr["decode_calls"] == pr["plain_decode_calls"] - pr["accepted"], pr' "$T/spec.json" "$T/probe.json"
$A run --model "$STORIES" --prompt-ids "$RIDS" --no-chat --max-tokens 30 --ngram-probe > "$T/probe.txt" 2>/dev/null
check "--ngram-probe prints its counts" grep -q "^ngram probe: [0-9]* decode calls instead of 29" "$T/probe.txt"
check "run prints the speculative line" grep -q "^speculative: no draft" "$T/probe.txt"
$D kernels --model "$STORIES" --cols 4 --iters 3 > "$T/cols.txt" 2>/dev/null
check "kernels --cols 4 prints the widths 1 to 4" sh -c "grep -q '^columns (5 rounds' '$T/cols.txt' && grep -qE '^ +4 +[0-9.]+ \[' '$T/cols.txt'"
# a decode call holds the emu's pool hot; ANEDVD_POOL_HOT=0 does not, a
# value other than 0 or 1 warns: the tokens are the same either way
ANEDVD_POOL_HOT=0 $A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --cache-dir "$T/kc-hot" > "$T/hot0.json" 2>/dev/null
ANEDVD_POOL_HOT=yes $A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --cache-dir "$T/kc-hot" > "$T/hot2.json" 2> "$T/hot2.err"
check "ANEDVD_POOL_HOT=0: the reference ids" [ "$(json_ids "$T/hot0.json")" = "$REF" ]
check "ANEDVD_POOL_HOT=yes: the reference ids" [ "$(json_ids "$T/hot2.json")" = "$REF" ]
check "ANEDVD_POOL_HOT=yes warns" grep -q "ANEDVD_POOL_HOT=yes: expected 0 or 1" "$T/hot2.err"
# the kernel cache: a second start maps what the first compiled and gives
# the same tokens; --no-cache stores nothing; clear empties it; a directory
# that cannot be made costs one warning, not the run
json_cache() { python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["start"]["ane_worker"]["cache"])' "$1"; }
KC=$T/kcache
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --cache-dir "$KC" > "$T/kc1.json" 2>/dev/null
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --cache-dir "$KC" > "$T/kc2.json" 2>/dev/null
check "first start with an empty kernel cache: miss" [ "$(json_cache "$T/kc1.json")" = miss ]
check "second start: hit" [ "$(json_cache "$T/kc2.json")" = hit ]
check "a cache hit gives the reference ids" [ "$(json_ids "$T/kc2.json")" = "$REF" ]
check "anedvd cache lists the entry" sh -c "$A cache --dir '$KC' | grep -q '^1 entry'"
# the entry's build is the code that compiled the kernels: libanedvd.so's
# build id, not the small program's (a library built again misses)
LIB_ID=$(readelf -n "$BIN/../lib/anedvd/libanedvd.so" 2>/dev/null | sed -n 's/.*Build ID: //p')
EXE_ID=$(readelf -n "$BIN/anedvd-ane-worker" 2>/dev/null | sed -n 's/.*Build ID: //p')
check "the entry's key names libanedvd.so's build id ($LIB_ID), not the program's ($EXE_ID)" sh -c \
	"[ -n '$LIB_ID' ] && grep -aq 'gnu-$LIB_ID' '$KC'/*.kc && ! grep -aq 'gnu-$EXE_ID' '$KC'/*.kc"
# an entry another build wrote in another format: listed as such, not as damaged
mkdir -p "$T/kc-old" && printf 'ANEDVDKC\001\000\000\000' > "$T/kc-old/0123456789abcdef.kc" &&
	truncate -s 8192 "$T/kc-old/0123456789abcdef.kc"
check "anedvd cache names an entry of another format" sh -c \
	"$A cache --dir '$T/kc-old' | grep -q '0123456789abcdef.kc .*(format 1, this build reads [0-9]*: not used; the size bound or --clear removes it)'"
# a worker whose kernels come from the cache moves their weights off the
# file once it has been idle 200 ms; ANEDVD_CACHE_MOVE=0 leaves them there
mover() { # mover SETTING LOG: a worker on that entry for 1.5 s, then SIGTERM
	env "$1" ANEDVD_LOG=info "$BIN/anedvd-ane-worker" --model "$STORIES" --listen "ipc://$T/mv.sock" \
		--cache-dir "$KC" > /dev/null 2> "$2" &
	MP=$!
	sleep 1.5
	kill -TERM $MP
	wait $MP
}
mover ANEDVD_CACHE_MOVE=1 "$T/mv1.err"
st=$?
check "a worker on a cache hit moves the weights off the file while idle" sh -c \
	"grep -q 'kernels from the cache' '$T/mv1.err' && grep -q \"moved [0-9]* kernels' weights (0.5 MB) off the cache file\" '$T/mv1.err'"
check "a worker moving the weights exits 0 on SIGTERM (status $st)" [ $st -eq 0 ]
mover ANEDVD_CACHE_MOVE=0 "$T/mv0.err"
check "ANEDVD_CACHE_MOVE=0: the weights stay in the file" sh -c \
	"grep -q 'kernels from the cache' '$T/mv0.err' && ! grep -q 'off the cache file' '$T/mv0.err'"
# a worker that compiled writes its new entry once it is ready and idle,
# not beside the compile: here with no call at all, before any stop
"$BIN/anedvd-ane-worker" --model "$STORIES" --listen "ipc://$T/idle.sock" --cache-dir "$T/kc-idle" \
	> /dev/null 2> "$T/idle.err" &
IP=$!
for _ in $(seq 100); do $A cache --dir "$T/kc-idle" 2>/dev/null | grep -q '^1 entry' && break; sleep 0.1; done
check "a worker that compiled writes its entry while idle" sh -c "$A cache --dir '$T/kc-idle' | grep -q '^1 entry'"
check "... before it is stopped" kill -0 $IP
kill -TERM $IP
wait $IP
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --no-cache --cache-dir "$T/kc-none" > "$T/kc3.json" 2>/dev/null
check "--no-cache: the cache is off" [ "$(json_cache "$T/kc3.json")" = off ]
check "--no-cache stores nothing" [ ! -e "$T/kc-none" ]
check "--no-cache gives the reference ids" [ "$(json_ids "$T/kc3.json")" = "$REF" ]
check "anedvd cache --clear" sh -c "$A cache --dir '$KC' --clear | grep -q 'removed 1 file' && $A cache --dir '$KC' | grep -q '^0 entries'"
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --cache-dir "$T/kc1.json/sub" > "$T/kc4.json" 2> "$T/kc4.err"
check "an unwritable cache directory: one warning" [ "$(grep -c "kernel cache" "$T/kc4.err")" = 1 ]
check "an unwritable cache directory: the reference ids" [ "$(json_ids "$T/kc4.json")" = "$REF" ]
check "anedvd cache: bad option exits 2" sh -c "$A cache --bogus 2>/dev/null; [ \$? -eq 2 ]"
# a new entry still being written when the run ends (a slow disk: its commit
# held back 4.5 s) is waited for, with a line that says so, not killed with
# the ane-worker 3 s after SIGTERM; a ^C while waiting kills it at once and
# leaves no entry and no process
ANEDVD_DEBUG_STORE_DELAY_MS=4500 $A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 8 --json \
	--cache-dir "$T/kc-slow" > /dev/null 2> "$T/kc5.err"
check "a slow cache write: waited for, with a line" grep -q "^anedvd: waiting for ane-worker (pid [0-9]*) to exit: it is flushing its new kernel cache entry to disk (Ctrl-C: stop waiting)" "$T/kc5.err"
check "a slow cache write: not killed" sh -c "! grep -q 'ignored SIGTERM' '$T/kc5.err'"
check "a slow cache write: the entry is stored" sh -c "$A cache --dir '$T/kc-slow' | grep -q '^1 entry'"
ANEDVD_DEBUG_STORE_DELAY_MS=60000 $A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 8 --json \
	--cache-dir "$T/kc-int" > /dev/null 2> "$T/kc6.err" &
RP=$!
for _ in $(seq 100); do grep -q "^anedvd: waiting for ane-worker" "$T/kc6.err" && break; sleep 0.1; done
T0=$SECONDS
kill -INT $RP
wait $RP
check "a ^C while waiting for the cache write: the run ends at once" [ $((SECONDS - T0)) -le 2 ]
check "a ^C while waiting: it says it stopped waiting" grep -q "ane-worker (pid [0-9]*): not waiting any longer: killing it" "$T/kc6.err"
check "a ^C while waiting: no entry committed" sh -c "! ls '$T/kc-int'/*.kc > /dev/null 2>&1"
# (its own directory's: another suite may run the same test meanwhile)
check "a ^C while waiting: no process left" sh -c "! pgrep -f '$T/kc-[i]nt' > /dev/null"
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 20 --temp 0.8 --top-p 0.9 --seed 7 --json > "$T/s1.json" 2>/dev/null
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 20 --temp 0.8 --top-p 0.9 --seed 7 --json > "$T/s2.json" 2>/dev/null
check "a seeded sampled run repeats" [ "$(json_ids "$T/s1.json")" = "$(json_ids "$T/s2.json")" ]
check "a sampled run differs from greedy" [ "$(json_ids "$T/s1.json")" != "$(echo $REF | cut -d' ' -f1-20)" ]

# --- trace -----------------------------------------------------------------------------------
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 8 --trace "$T/trace2.json" > /dev/null 2>&1
check "--trace over the pipeline has every process's own events" python3 - "$T/trace2.json" <<'EOF'
import json, sys
ev = json.load(open(sys.argv[1]))
names = {e["pid"]: e["args"]["name"] for e in ev if e.get("ph") == "M"}
by = {}
for e in ev:
	if e.get("ph") == "X":
		by.setdefault(names.get(e["pid"]), set()).add(e["cat"])
assert len({e["pid"] for e in ev if e.get("ph") == "X"}) >= 4, names
assert {"anedvd", "anedvd-tokenizer", "anedvd-cpu-worker", "anedvd-ane-worker"} <= set(by), by
assert "engine" in by["anedvd"], by
assert "tokenizer" in by["anedvd-tokenizer"], by
assert {"step", "kernel-call", "attention", "sampling"} <= by["anedvd-cpu-worker"], by
assert by["anedvd-ane-worker"] == {"kernel"}, by
assert all(isinstance(e["ts"], int) and e["dur"] >= 0 for e in ev if e.get("ph") == "X")
# each call's parts as its args: the worker's steps, the pickup and the reply,
# within the call (its ts and dur are whole microseconds); over the data plane
# the pickup and the reply take some time
calls = [e for e in ev if e.get("cat") == "kernel-call"]
assert calls and all(set(e["args"]) == {"steps_us", "pickup_us", "reply_us"} for e in calls), calls[:2]
assert all(min(e["args"].values()) >= 0 and sum(e["args"].values()) <= e["dur"] + 2 for e in calls), calls[:2]
assert sum(e["args"]["pickup_us"] for e in calls) > 0 and sum(e["args"]["reply_us"] for e in calls) > 0
assert all(e["args"]["steps_us"] > 0 for e in calls), calls[:2]
EOF
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 8 --in-process --trace "$T/trace.json" > /dev/null 2>&1
check "--trace --in-process is JSON with kernel, sampling and tokenizer events from 3 processes" python3 - "$T/trace.json" <<'EOF'
import json, sys
ev = json.load(open(sys.argv[1]))
cats = {e.get("cat") for e in ev if e.get("ph") == "X"}
pids = {e["pid"] for e in ev if e.get("ph") == "X"}
names = {e["args"]["name"] for e in ev if e.get("ph") == "M"}
assert {"kernel-call", "kernel", "sampling", "tokenizer", "engine"} <= cats, cats
assert len(pids) == 3, pids
assert all(isinstance(e["ts"], int) and e["dur"] >= 0 for e in ev if e.get("ph") == "X")
assert "anedvd-ane-worker" in names, names
EOF

# --- verify -----------------------------------------------------------------------------------
for m in "$DATA"/models/*.gguf "$STORIES"; do
	$A verify --model "$m" --prompt-ids 1,2,3,4,5,6,7,8 > "$T/v.txt" 2>&1
	check "verify $(basename "$m") MATCH" [ $? -eq 0 ]
	grep -q "MATCH" "$T/v.txt" || cat "$T/v.txt" >&2
done
# the newer architectures and RoPE scalings, on their fixtures' own ids (llama_yarn's 85
# reach beyond its original context of 64)
for m in "$DATA"/models2/*.gguf; do
	ids=$(python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); print(",".join(map(str, j["prompt_ids"] + j["greedy_ids"])))' "${m%.gguf}.json")
	$A verify --model "$m" --prompt-ids "$ids" > "$T/v.txt" 2>&1
	check "verify models2/$(basename "$m") MATCH" [ $? -eq 0 ]
	grep -q "MATCH" "$T/v.txt" || cat "$T/v.txt" >&2
done
# a recurrent model through the whole pipeline: run's greedy ids are llama.cpp's
$A run --model "$DATA/models2/qwen35.gguf" --prompt-ids 1,403,407,261,378,432,383,286 --max-tokens 16 --temp 0 --json > "$T/q35.json" 2> "$T/q35.err"
check "run qwen35 exits 0" [ $? -eq 0 ]
check "run qwen35: greedy ids equal llama.cpp's" python3 - "$T/q35.json" "$DATA/models2/qwen35.json" <<'EOF'
import json, sys
# strict UTF-8: a token that ends inside a character is U+FFFD in "text"
j = json.load(open(sys.argv[1], encoding="utf-8", errors="strict"))
ref = json.load(open(sys.argv[2]))["greedy_ids"]
assert j["ids"] == ref, (j["ids"], ref)
assert "\ufffd" in j["text"], repr(j["text"]) # this model's tokens do end mid-character
EOF
# route: the expert histogram of a MoE model, through the CLI
$A route --model "$DATA/models2/lfm2moe.gguf" --prompt-ids 1,403,407 --json > "$T/r.txt" 2>&1
check "route lfm2moe exits 0" [ $? -eq 0 ]
check "route lists the MoE blocks 2-4 with 2 experts per token" python3 - "$T/r.txt" <<'EOF'
import json, sys
j = json.load(open(sys.argv[1]))
assert [l["layer"] for l in j["layers"]] == [2, 3, 4], j
assert all(sum(l["counts"]) == 6 for l in j["layers"]), j
EOF
$A route --model "$DATA/models2/lfm2.gguf" --prompt-ids 1 > "$T/r.txt" 2>&1
check "route refuses a dense model" [ $? -eq 1 ]
check "route names why" grep -q "has no routed experts" "$T/r.txt"
# an architecture anedvd does not implement is refused by name (it used to run as llama);
# --arch runs it as a named one, with a warning
python3 - "$DATA/models2/hunyuan_dense.gguf" "$T/unknown.gguf" <<'EOF2'
import sys
open(sys.argv[2], "wb").write(open(sys.argv[1], "rb").read().replace(b"hunyuan-dense", b"hunyuan-dzzzz"))
EOF2
$A run --model "$T/unknown.gguf" --prompt-ids 1,2,3 --max-tokens 2 > "$T/u.txt" 2>&1
check "an unknown architecture is refused" [ $? -eq 1 ]
check "the refusal names it and lists the known ones" grep -q "'hunyuan-dzzzz' is not implemented (anedvd implements: llama, .*hunyuan-dense" "$T/u.txt"
$A verify --model "$T/unknown.gguf" --prompt-ids 1,403,407,261,378,432,383,286 --arch hunyuan-dense > "$T/u.txt" 2>&1
check "--arch hunyuan-dense runs it: verify MATCH" [ $? -eq 0 ]
check "--arch warns" grep -q "run as hunyuan-dense (--arch)" "$T/u.txt"
$A run --model "$T/unknown.gguf" --prompt-ids 1 --arch gpt9 > /dev/null 2> "$T/u.err"
check "--arch takes only a known architecture (exit 2)" [ $? -eq 2 ]
check "--arch gpt9 is named" grep -q "arch takes one of llama, .* not 'gpt9'" "$T/u.err"
$A verify --model "$STORIES" > "$T/v.txt" 2>&1
check "verify with the default prompt (tokenizer process)" [ $? -eq 0 ]
$A verify --model "$DATA/models/llama.gguf" --prompt-ids 1,2,3,4,5,6,7,8,9,10 --pipeline-rope-hf > "$T/v.txt" 2>&1
check "verify fails on a broken pipeline" [ $? -eq 1 ]
check "verify says MISMATCH" grep -q "MISMATCH" "$T/v.txt"

# --- the kernel tools ---------------------------------------------------------------------
$A selftest > "$T/st.txt" 2>&1
check "selftest PASS" grep -q "PASS" "$T/st.txt"
$D check --model "$DATA/models/qwen2.gguf" > "$T/ck.txt" 2>&1
check "check exits 0" [ $? -eq 0 ]
check "check reports lm_head ok" grep -q "lm_head .* -> ok" "$T/ck.txt"
check "check prints the config" grep -q "^config: heads 4 / kv 2, head size 32 / 32" "$T/ck.txt"
check "check prints the RoPE convention" grep -q "^RoPE: neox (halves), 32 dims, base 1e+06" "$T/ck.txt"
check "check prints sample predictions" grep -q "^sample predictions after" "$T/ck.txt"
check "check: both top-5 lists" [ "$(grep -c -E '^  (emu|reference) ' "$T/ck.txt")" = 2 ]
check "check: the same next token" grep -q "argmax equal" "$T/ck.txt"
$D check --model "$STORIES" --backend emu --prompt-ids $IDS > "$T/ck2.txt" 2>&1
check "check --backend emu --prompt-ids" [ $? -eq 0 ]
check "check: norm RoPE for llama" grep -q "^RoPE: norm (adjacent pairs)" "$T/ck2.txt"
$D probe --size 128 > "$T/pr.txt" 2>&1
check "probe CORRECT" grep -q "CORRECT" "$T/pr.txt"
$D probe --size 64 --backend emu > "$T/pr2.txt" 2>&1
check "probe --backend emu" grep -q "probe 64x64 on emu" "$T/pr2.txt"
$D layers --model "$STORIES" --upto 2 --prompt-ids $IDS > "$T/ly.txt" 2>&1
check "layers prints both top-5 lists" [ "$(grep -c -E '^  (emu|reference) ' "$T/ly.txt")" = 2 ]
# --max-seq: the context both engines are built for; LongRoPE (original context 4)
# takes its short factors for a context of 3 and its long ones for 8
LR=$DATA/models2/phi3_longrope.gguf
$D layers --model "$LR" --upto 2 --prompt-ids 1,403 --max-seq 3 > "$T/ly3.txt" 2>&1
$D layers --model "$LR" --upto 2 --prompt-ids 1,403 --max-seq 8 > "$T/ly8.txt" 2>&1
check "layers --max-seq prints the context" grep -aq "context 8$" "$T/ly8.txt"
check "layers --max-seq picks LongRoPE's factors" \
	[ "$(grep -a '^  reference' "$T/ly3.txt")" != "$(grep -a '^  reference' "$T/ly8.txt")" ]
$D layers --model "$LR" --upto 2 --prompt-ids 1,403,407 --max-seq 3 > "$T/ly-bad.txt" 2>&1
check "layers --max-seq shorter than the prompt: exit 2" [ $? -eq 2 ]
# cpu --chat: the prompt through the model's chat template (stories260K has none:
# the plain transcript), then the reference engine
$A cpu --model "$STORIES" --prompt "Hi there" --chat --system "Be kind" --max-tokens 4 --json \
	> "$T/cpuchat.json" 2> "$T/cpuchat.err"
check "cpu --chat exits 0" [ $? -eq 0 ]
check "cpu --chat renders the turns" python3 -c '
import json, sys
d = json.load(open(sys.argv[1]))
assert d["prompt_text"] == "System: Be kind\nUser: Hi there\nAssistant:", d["prompt_text"]
assert len(d["generated_ids"]) == 4' "$T/cpuchat.json"
$A cpu --model "$STORIES" --prompt-ids 1,2 --chat > /dev/null 2>&1
check "cpu --chat with ids: exit 2" [ $? -eq 2 ]
$A cpu --model "$STORIES" --prompt "x" --system "y" > /dev/null 2>&1
check "cpu --system without --chat: exit 2" [ $? -eq 2 ]
# --- chat templates: the model's own, through the Jinja interpreter -------------------------
# gen-model's think fixture with Qwen3's template: tokenize --chat renders
# the judge's "tool_answer" conversation as Python's jinja2 does
JD=$DATA/jinja
"$GEN" think f16 0 "$T/think.gguf" --template "$JD/templates/Qwen-Qwen3-0.6B.jinja"
python3 - "$JD" "$T/conv.json" "$T/want.txt" <<'EOF2'
import json, sys
d = sys.argv[1]
c = json.load(open(d + "/contexts.json"))["tool_answer"]
json.dump({"messages": c["messages"], "tools": c["tools"]}, open(sys.argv[2], "w"))
want = [x for x in json.load(open(d + "/expected/Qwen-Qwen3-0.6B.json"))["cases"] if x["context"] == "tool_answer"][0]
open(sys.argv[3], "w").write(want["output"])
EOF2
$A tokenize --model "$T/think.gguf" --chat --prompt-only --file "$T/conv.json" > "$T/prompt.txt" 2> "$T/prompt.err"
check "tokenize --chat --prompt-only exits 0" [ $? -eq 0 ]
check "tokenize --chat renders tools and tool calls as jinja2 does" cmp -s "$T/prompt.txt" "$T/want.txt"
check "tokenize --chat says the model's template answered" grep -q "chat template: the model's own (Jinja)" "$T/prompt.err"
$A tokenize --model "$T/think.gguf" --chat --ids --file "$T/conv.json" > "$T/ids.txt" 2>/dev/null
$A tokenize -m "$T/think.gguf" --chat --ids --file "$T/conv.json" > "$T/ids-m.txt" 2>/dev/null
check "tokenize -m is --model" cmp -s "$T/ids.txt" "$T/ids-m.txt"
check "tokenize --chat encodes the prompt" [ "$(wc -w < "$T/ids.txt")" -gt 100 ]
$A tokenize --model "$T/think.gguf" --prompt-only x > /dev/null 2> "$T/po.err"
check "--prompt-only without --chat: exit 2" [ $? -eq 2 ]
# a template the interpreter cannot run: the built-in format, one log line saying why
printf '<|im_start|>{%% include "x" %%}' > "$T/bad.jinja"
"$GEN" think f16 0 "$T/bad.gguf" --template "$T/bad.jinja"
echo '[{"role": "user", "content": "Hi"}]' > "$T/hi.json"
$A tokenize --model "$T/bad.gguf" --chat --prompt-only --file "$T/hi.json" > "$T/fb.txt" 2> "$T/fb.err"
check "a template that cannot run falls back to its family" [ "$(cat "$T/fb.txt")" = "$(printf '<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n')" ]
check "the fallback is logged once, saying why" [ "$(grep -c "the 'include' tag); rendering with the built-in chatml format" "$T/fb.err")" = 1 ]
# a template that raises: the message, exit 1
"$GEN" think f16 0 "$T/gemma.gguf" --template "$JD/templates/google-gemma-2-2b-it.jinja"
echo '[{"role": "system", "content": "x"}, {"role": "user", "content": "Hi"}]' > "$T/sys.json"
$A tokenize --model "$T/gemma.gguf" --chat --file "$T/sys.json" > /dev/null 2> "$T/raise.err"
check "a template's raise_exception fails the command" [ $? -eq 1 ]
check "with the template's message" grep -q "chat template: System role not supported" "$T/raise.err"
# cpu --chat renders with the same function, and the scripted model thinks
$A cpu --model "$T/think.gguf" --prompt "Hi" --chat --max-tokens 12 > "$T/cputhink.txt" 2>&1
check "cpu --chat renders with the model's template" grep -q "^chat template (jinja): <|im_start|>user" "$T/cputhink.txt"
check "cpu --chat: the think fixture thinks, then answers" grep -q "<think>Let me think.</think>" "$T/cputhink.txt"

# verify --layers N: workers and reference alike cut to N layers
$A verify --model "$DATA/models/qwen2.gguf" --prompt-ids 1,403,407,261 --layers 1 > "$T/vl1.txt" 2>&1
check "verify --layers 1 MATCH" [ $? -eq 0 ]
check "verify --layers 1 runs one layer" grep -aq "(qwen2, 1 layers)" "$T/vl1.txt"
$A verify --model "$DATA/models/qwen2.gguf" --prompt-ids 1,403 --layers 3 > "$T/vl3.txt" 2>&1
check "verify --layers beyond the model fails" [ $? -ne 0 ]
check "verify --layers beyond the model says so" grep -aq "the model has 2 layers" "$T/vl3.txt"
$A serve --model "$STORIES" --temp 3 > /dev/null 2> "$T/serve-temp.err"
check "serve --temp 3: exit 2" [ $? -eq 2 ]
check "serve --temp 3: the error names the flag" grep -q -- "--temp" "$T/serve-temp.err"
$A serve --model "$STORIES" --top-k x > /dev/null 2>&1
check "serve --top-k x: exit 2" [ $? -eq 2 ]
$D kernels --model "$DATA/models/llama.gguf" --iters 3 > "$T/kn.txt" 2>&1
check "kernels prints a total" grep -q "TOTAL per token" "$T/kn.txt"
check "kernels prints the decode pass against the read" grep -Eq "^  pass / read: [0-9.]+x \[[0-9.]+, [0-9.]+\]$" "$T/kn.txt"
check "kernels' decode pass counts every kernel" grep -Eq "^decode pass: [0-9]+ kernels, [0-9.]+ MB of weights" "$T/kn.txt"
check "kernels says how much is on 2 MiB pages" grep -Eq "^  on 2 MiB pages: [0-9.]+ MB of this process" "$T/kn.txt"
check "kernels says how far one column prefetches" grep -Eq "^  one column prefetched (1024|6144|8192) bytes ahead \(fp16 weights;" "$T/kn.txt"
ANEDVD_PREFETCH_AHEAD=2048 $D kernels --model "$DATA/models/llama.gguf" --iters 1 > "$T/kn2.txt" 2>&1
check "kernels: ANEDVD_PREFETCH_AHEAD=2048 taken" grep -q "^  one column prefetched 2048 bytes ahead" "$T/kn2.txt"
$D kernels --model "$DATA/models/llama.gguf" --iters 1 --weights int8 > "$T/kn3.txt" 2>&1
check "kernels --weights int8: the narrow weights' distance" grep -Eq "^  one column prefetched (6144|8192) bytes ahead \(int8 or lut4 weights;" "$T/kn3.txt"
ANEDVD_PREFETCH_NTA=1 $D kernels --model "$DATA/models/llama.gguf" --iters 1 > "$T/kn4.txt" 2>&1
check "kernels: ANEDVD_PREFETCH_NTA=1 taken" grep -Eq "^  one column prefetched [0-9]+ bytes ahead \(fp16 weights; non-temporal;" "$T/kn4.txt"
ANEDVD_PREFETCH_NTA=0 $D kernels --model "$DATA/models/llama.gguf" --iters 1 --weights int8 > "$T/kn5.txt" 2>&1
check "kernels: ANEDVD_PREFETCH_NTA=0 taken" grep -Eq "^  one column prefetched [0-9]+ bytes ahead \(int8 or lut4 weights; into L2;" "$T/kn5.txt"
check "kernels splits the pass by kind" grep -Eq "^  by kind, GB/s in the kernels' own time: qkv [0-9.]+ MB [0-9.]+ \[.*; o .*; lm_head .* around the kernels [0-9.-]+ ms" "$T/kn.txt"
$D attnbench --ctx 64 --iters 3 > "$T/ab.txt" 2>&1
check "attnbench prints the stages" grep -q "softmax" "$T/ab.txt"

# --- crash: SIGKILL the ane-worker during a greedy run -------------------------------------
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --debug-delay-ms 5 \
	> "$T/crash.json" 2> "$T/crash.err" &
P=$!
W=""
for _ in $(seq 1 200); do
	W=$(awk '$1=="ane-worker"{print $2}' "$T/anedvd-$P/status" 2>/dev/null)
	[ -n "$W" ] && [ "$W" != 0 ] && break
	sleep 0.05
done
sleep 0.4 # into the decode loop
check "the ane-worker's pid is in the status file" [ -n "$W" ]
kill -9 "$W" 2>/dev/null
wait $P
check "the run survives the crash" [ $? -eq 0 ]
check "the crashed run gives the uninterrupted tokens" [ "$(json_ids "$T/crash.json" 2>/dev/null)" = "$REF" ]
check "one restart reported" python3 -c 'import json,sys; assert json.load(open(sys.argv[1]))["ane_worker_restarts"] == 1' "$T/crash.json"
check "the restart was logged" grep -q "ane-worker (pid $W) was killed by signal 9" "$T/crash.err"

# the same with the decode loop in the CLI (kb_remote in this process)
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --debug-delay-ms 5 --in-process \
	> "$T/crash2.json" 2> "$T/crash2.err" &
P=$!
W=""
for _ in $(seq 1 200); do
	W=$(awk '$1=="ane-worker"{print $2}' "$T/anedvd-$P/status" 2>/dev/null)
	[ -n "$W" ] && [ "$W" != 0 ] && break
	sleep 0.05
done
sleep 0.4
kill -9 "$W" 2>/dev/null
wait $P
check "--in-process: the crashed run gives the uninterrupted tokens" [ "$(json_ids "$T/crash2.json" 2>/dev/null)" = "$REF" ]

# --- crash: SIGKILL the cpu-worker during a run, greedy and seeded: the job goes on on the
# restarted worker (prompt + the tokens so far, the sampler's draws) and gives the same ids
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --temp 0.9 --seed 11 --json \
	> "$T/seeded.json" 2> /dev/null
for mode in greedy seeded; do
	if [ $mode = greedy ]; then S=""; WANT="$REF"; else S="--temp 0.9 --seed 11"; WANT=$(json_ids "$T/seeded.json"); fi
	ANEDVD_LOG=info $A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 60 --json --debug-delay-ms 5 $S \
		> "$T/cpu-crash.json" 2> "$T/cpu-crash.err" &
	P=$!
	C=""
	for _ in $(seq 1 600); do
		C=$(awk '$1=="cpu-worker"{print $2}' "$T/anedvd-$P/status" 2>/dev/null)
		# the job has started (the cpu-worker logs it at info), however slow the start
		[ -n "$C" ] && [ "$C" != 0 ] && grep -q "anedvd-cpu-worker info: job .*: prompt" "$T/cpu-crash.err" && break
		sleep 0.05
	done
	sleep 0.2 # into the decode loop: 60 tokens at 5 ms a kernel call take seconds
	kill -9 "$C" 2>/dev/null
	wait $P
	check "$mode: the run survives a cpu-worker crash" [ $? -eq 0 ]
	check "$mode: the crashed run gives the uninterrupted tokens" [ "$(json_ids "$T/cpu-crash.json" 2>/dev/null)" = "$WANT" ]
	check "$mode: one cpu-worker restart, the job resumed once" python3 -c 'import json,sys; j = json.load(open(sys.argv[1])); assert j["cpu_worker_restarts"] == 1 and j["resumed"] == 1, j' "$T/cpu-crash.json"
done
check "a seeded run is not the greedy one" [ "$(json_ids "$T/seeded.json")" != "$REF" ]

# --- SIGINT: nothing left behind ---------------------------------------------------------
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 100000 --max-seq 100000 --debug-delay-ms 20 \
	> /dev/null 2> "$T/int.err" &
P=$!
KIDS=""
for _ in $(seq 1 200); do
	KIDS=$(awk '{print $2}' "$T/anedvd-$P/status" 2>/dev/null | tr '\n' ' ')
	[ "$(echo $KIDS | wc -w)" = 3 ] && break
	sleep 0.05
done
sleep 0.5
kill -INT $P
wait $P
check "SIGINT: exit 130" [ $? -eq 130 ]
check "SIGINT: no child, no shm, no runtime dir" no_leftovers $P "$KIDS"

# --- SIGKILL of the CLI: the children follow it; the next start removes the rest -----------
$A run --model "$STORIES" --prompt-ids $IDS --no-chat --max-tokens 100000 --max-seq 100000 --debug-delay-ms 20 \
	> /dev/null 2>&1 &
P=$!
KIDS=""
for _ in $(seq 1 200); do
	KIDS=$(awk '{print $2}' "$T/anedvd-$P/status" 2>/dev/null | tr '\n' ' ')
	[ "$(echo $KIDS | wc -w)" = 3 ] && break
	sleep 0.05
done
sleep 0.5
kill -9 $P
wait $P 2>/dev/null
gone=0
for _ in $(seq 1 100); do
	alive=0
	for k in $KIDS; do kill -0 "$k" 2>/dev/null && alive=1; done
	[ $alive = 0 ] && { gone=1; break; }
	sleep 0.05
done
check "SIGKILL of the CLI: its children exit too" [ $gone = 1 ]
$A info > /dev/null 2>&1 # any command; the supervisor is what cleans
$A run --model "$STORIES" --prompt-ids 1 --max-tokens 1 --backend exact > /dev/null 2>&1
check "the next start removes the killed instance's runtime dir and shm" no_leftovers $P ""

if [ -x "$BIN/anedvd-cpu-worker" ] && [ -x "$BIN/anedvd-frontend" ]; then
	$A serve --model "$STORIES" --cache-mem 12Q > /dev/null 2> "$T/cm.err"
	check "serve: a bad --cache-mem is a usage error naming the flag" [ $? -eq 2 ]
	check "serve: the --cache-mem error names the flag" grep -q -- "--cache-mem" "$T/cm.err"
	PORT=$((20000 + RANDOM % 20000))
	# its kernels from the cache, their weights moved off the file while idle
	$A run --model "$STORIES" --prompt-ids 1 --max-tokens 1 --cache-dir "$T/kc-serve" > /dev/null 2>&1
	ANEDVD_LOG=info $A serve --model "$STORIES" --port $PORT --cache-mem 8M --cache-dir "$T/kc-serve" \
		> /dev/null 2> "$T/serve.err" &
	P=$!
	up=0
	for _ in $(seq 1 600); do
		if grep -q "anedvd server listening" "$T/serve.err"; then up=1; break; fi
		sleep 0.05
	done
	check "serve comes up" [ $up = 1 ]
	KIDS=$(awk '{print $2}' "$T/anedvd-$P/status" 2>/dev/null | tr '\n' ' ')
	check "serve runs four children" [ "$(echo $KIDS | wc -w)" = 4 ]
	complete() {
		curl -s -m 30 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
			-d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0}' | grep -q "there was a little girl"
	}
	check "serve answers a completion" complete
	# each process's threads named by their roles, as ps -L and perf show them
	if [ -d /proc/self/task ]; then
		named() { # named PID NAME: a thread of PID is called NAME
			cat /proc/"$1"/task/*/comm 2>/dev/null | grep -qx "$2"
		}
		AW=$(awk '$1=="ane-worker"{print $2}' "$T/anedvd-$P/status")
		CW=$(awk '$1=="cpu-worker"{print $2}' "$T/anedvd-$P/status")
		FE=$(awk '$1=="frontend"{print $2}' "$T/anedvd-$P/status")
		for n in "data plane" "emu pool 1" "rpc 1"; do
			check "serve: the ane-worker has a thread named '$n'" named "$AW" "$n"
		done
		for n in engine "rpc 1"; do
			check "serve: the cpu-worker has a thread named '$n'" named "$CW" "$n"
		done
		for n in "upstream 1" "health probe" lease; do
			check "serve: the frontend has a thread named '$n'" named "$FE" "$n"
		done
		for n in supervisor watchdog; do
			check "serve: the supervisor has a thread named '$n'" named "$P" "$n"
		done
	fi
	check "serve hands --cache-mem to the cpu-worker" grep -q "prefix cache 8.0 MiB" "$T/serve.err"
	for _ in $(seq 1 100); do grep -q "off the cache file" "$T/serve.err" && break; sleep 0.05; done
	check "serve moves the cached weights off the file while idle" grep -q "moved [0-9]* kernels' weights" "$T/serve.err"
	check "serve answers the same completion from the moved weights" complete
	# a crashed cpu-worker is restarted and the server answers again
	C=$(awk '$1=="cpu-worker"{print $2}' "$T/anedvd-$P/status")
	kill -9 "$C"
	for _ in $(seq 1 100); do
		[ "$(awk '$1=="cpu-worker"{print $3}' "$T/anedvd-$P/status")" = 1 ] && break
		sleep 0.05
	done
	check "serve restarts a killed cpu-worker" [ "$(awk '$1=="cpu-worker"{print $3}' "$T/anedvd-$P/status")" = 1 ]
	ok2=0
	for _ in $(seq 1 40); do
		if complete; then ok2=1; break; fi
		sleep 0.25
	done
	check "serve answers after the cpu-worker restart" [ $ok2 = 1 ]
	KIDS="$KIDS $(awk '{print $2}' "$T/anedvd-$P/status" | tr '\n' ' ')"
	kill -INT $P
	wait $P
	st=$?
	check "serve: exit 0 on SIGINT (status $st)" [ $st -eq 0 ]
	[ $st -eq 0 ] || tail -40 "$T/serve.err" | sed 's/^/  serve.err: /'
	check "serve: no child, no shm, no runtime dir" no_leftovers $P "$KIDS"

	# the tokenizer service on tcp:// instead of the runtime dir's ipc socket; and
	# the access flags reach the frontend (the key through its environment)
	PORT=$((20000 + RANDOM % 20000))
	TPORT=$((PORT + 1))
	ANEDVD_API_KEY=envkey $A serve --model "$STORIES" --port $PORT --tokenizer-url "tcp://127.0.0.1:$TPORT" \
		--api-key clikey1 --api-key clikey2 --cors-origin https://app.example > /dev/null 2> "$T/serve-tcp.err" &
	P=$!
	up=0
	for _ in $(seq 1 600); do
		if grep -q "anedvd server listening" "$T/serve-tcp.err"; then up=1; break; fi
		sleep 0.05
	done
	check "serve --tokenizer-url tcp:// comes up" [ $up = 1 ]
	TK=$(awk '$1=="tokenizer"{print $2}' "$T/anedvd-$P/status")
	check "the tokenizer listens on the tcp URL" grep -q "tcp://127.0.0.1:$TPORT" "/proc/$TK/cmdline"
	complete() {
		curl -s -m 30 "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' -H "x-api-key: $1" \
			-d '{"prompt":"Once upon a time","max_tokens":12,"temperature":0}' | grep -q "there was a little girl"
	}
	check "serve over a tcp tokenizer answers a completion (--api-key)" complete clikey2
	check "serve: ANEDVD_API_KEY works beside --api-key" complete envkey
	code() { curl -s -o /dev/null -w '%{http_code}' -m 10 "$@"; }
	check "serve --api-key: no key, 401" [ "$(code "http://127.0.0.1:$PORT/v1/models")" = 401 ]
	check "serve --api-key: a wrong key, 401" [ "$(code -H 'Authorization: Bearer clikey' "http://127.0.0.1:$PORT/v1/models")" = 401 ]
	check "serve --api-key: /health is open" [ "$(code "http://127.0.0.1:$PORT/health")" = 200 ]
	check "serve --cors-origin reaches the frontend" sh -c "curl -si -m 10 -H 'Origin: https://app.example' http://127.0.0.1:$PORT/health | grep -qi '^access-control-allow-origin: https://app.example'"
	check "serve: another origin, 403" [ "$(code -H 'Origin: https://evil.example' "http://127.0.0.1:$PORT/health")" = 403 ]
	FE=$(awk '$1=="frontend"{print $2}' "$T/anedvd-$P/status")
	check "serve: the key is not on the frontend's command line" sh -c "! grep -q clikey /proc/$FE/cmdline"
	KIDS=$(awk '{print $2}' "$T/anedvd-$P/status" | tr '\n' ' ')
	kill -INT $P
	wait $P
	check "serve --tokenizer-url: exit 0 on SIGINT" [ $? -eq 0 ]
	check "serve --tokenizer-url: no child, no shm, no runtime dir" no_leftovers $P "$KIDS"
else
	echo "note: anedvd-cpu-worker or anedvd-frontend not built: serve not tested" >&2
fi

# --- bad usage: exit 2 with the flag named -------------------------------------------------
usage2_of() { # usage2_of PROGRAM "pattern" args...
	local prog=$1 pat=$2
	shift 2
	"$prog" "$@" > /dev/null 2> "$T/u.err"
	local rc=$?
	[ $rc -eq 2 ] && grep -q -- "$pat" "$T/u.err" && return 0
	echo "exit $rc:" >&2
	cat "$T/u.err" >&2
	return 1
}
usage2() { usage2_of "$A" "$@"; }
usage2dev() { usage2_of "$D" "$@"; }
check "unknown command" usage2 "unknown command 'frobnicate'" frobnicate
check "no command" usage2 "usage: anedvd" 
check "run --max-tokens 12x" usage2 "--max-tokens" run --model "$STORIES" --prompt-ids 1 --max-tokens 12x
check "run --temp abc" usage2 "--temp" run --model "$STORIES" --prompt-ids 1 --temp abc
check "run --top-p 2" usage2 "--top-p" run --model "$STORIES" --prompt-ids 1 --top-p 2
check "run --chunk 0" usage2 "--chunk" run --model "$STORIES" --prompt-ids 1 --chunk 0
check "run --max-seq 1" usage2 "--max-seq" run --model "$STORIES" --prompt-ids 1 --max-seq 1
check "run --prompt-ids 1,,2" usage2 "--prompt-ids" run --model "$STORIES" --prompt-ids 1,,2
check "run --backend gpu" usage2 "--backend" run --model "$STORIES" --prompt-ids 1 --backend gpu
check "run --bogus" usage2 "unknown argument '--bogus'" run --model "$STORIES" --prompt-ids 1 --bogus
check "run --draft 65" usage2 "--draft" run --model "$STORIES" --prompt-ids 1 --draft 65
check "run --ngram-min above --ngram-max" usage2 "--ngram-min" run --model "$STORIES" --prompt-ids 1 --ngram-min 5 --ngram-max 3
check "run --draft-cost x" usage2 "--draft-cost" run --model "$STORIES" --prompt-ids 1 --draft-cost x
check "serve --ngram-max 0" usage2 "--ngram-max" serve --model "$STORIES" --ngram-max 0
check "chat --draft -1" usage2 "--draft" chat --model "$STORIES" --draft -1
# a chat session on stdin: the settings answered, a bad value named once, an
# unknown command named, a turn's summary line; the tokenizer's note that the
# model has no chat template comes before the first prompt, not inside it
printf '/temp\n/temp 0\n/topp 2\n/rep\n/bogus\nOnce upon a time\n/exit\n' |
	$A chat --model "$STORIES" --max-tokens 8 > "$T/chat.txt" 2>&1
rc=$?
check "chat: exits 0 on /exit" [ $rc -eq 0 ]
check "chat: /temp shows the temperature" grep -q "^you> temperature 0.7$" "$T/chat.txt"
check "chat: /temp 0 sets it" grep -q "^you> temperature 0 (greedy)$" "$T/chat.txt"
check "chat: /topp 2 is refused with the range" grep -q "/topp takes a number from 1e-06 to 1, not '2'" "$T/chat.txt"
check "chat: a bad value is not an unknown command" sh -c "! grep -q 'unknown command /topp' '$T/chat.txt'"
check "chat: /rep shows the penalty" grep -Eq "^you> repetition penalty [0-9.]+( \(off\))?$" "$T/chat.txt"
check "chat: /bogus is unknown" grep -q "^you> unknown command /bogus: /help lists the commands$" "$T/chat.txt"
check "chat: a turn's summary" grep -q "^\[8 tokens, .* tok/s, length, prompt" "$T/chat.txt"
check "chat: the template note before the first prompt" sh -c "awk '/has no chat template/ { w = NR } /^you>/ && !y { y = NR } END { exit !(w && w < y) }' '$T/chat.txt'"
check "kernels --cols 65 (the chunk is 64)" usage2dev "--cols" kernels --model "$STORIES" --cols 65
# a bad ANEDVD_SIMD stops the ane-worker with status 2: reported at once, not restarted for minutes
t0=$SECONDS
ANEDVD_SIMD=avx9 $A run --model "$STORIES" --prompt-ids $IDS --max-tokens 2 --no-chat > /dev/null 2> "$T/simd.err"
rc=$?
check "ANEDVD_SIMD=avx9: run fails" [ $rc -ne 0 ]
check "ANEDVD_SIMD=avx9: the setting named" grep -q "ANEDVD_SIMD=avx9: expected ref, avx2 or avx512" "$T/simd.err"
check "ANEDVD_SIMD=avx9: not restarted" sh -c "! grep -q 'restarting ane-worker' '$T/simd.err'"
check "ANEDVD_SIMD=avx9: within 20 s" [ $((SECONDS - t0)) -lt 20 ]
# the cpu-worker, waiting for that ane-worker, takes its SIGTERM though it
# has not started (it blocks the signal until then): not killed after 3 s
check "ANEDVD_SIMD=avx9: the cpu-worker stops when told" sh -c "! grep -q 'ignored SIGTERM' '$T/simd.err'"
# the one-column prefetch distance: bytes from 0 to 65536, or refused alike
ANEDVD_PREFETCH_AHEAD=4k $A run --model "$STORIES" --prompt-ids $IDS --max-tokens 2 --no-chat > /dev/null 2> "$T/pfa.err"
rc=$?
check "ANEDVD_PREFETCH_AHEAD=4k: run fails" [ $rc -ne 0 ]
check "ANEDVD_PREFETCH_AHEAD=4k: the setting named" grep -q "ANEDVD_PREFETCH_AHEAD=4k: expected bytes from 0 to 65536" "$T/pfa.err"
check "ANEDVD_PREFETCH_AHEAD=4k: not restarted, nothing killed" sh -c "! grep -q 'restarting ane-worker\|ignored SIGTERM' '$T/pfa.err'"
check "ANEDVD_PREFETCH_AHEAD=0: runs" sh -c "ANEDVD_PREFETCH_AHEAD=0 $A run --model '$STORIES' --prompt-ids $IDS --max-tokens 2 --no-chat > /dev/null"
ANEDVD_PREFETCH_NTA=yes $A run --model "$STORIES" --prompt-ids $IDS --max-tokens 2 --no-chat > /dev/null 2> "$T/pfn.err"
rc=$?
check "ANEDVD_PREFETCH_NTA=yes: run fails" [ $rc -ne 0 ]
check "ANEDVD_PREFETCH_NTA=yes: the setting named" grep -q "ANEDVD_PREFETCH_NTA=yes: expected 0 or 1" "$T/pfn.err"
check "run without a prompt" usage2 "exactly one of" run --model "$STORIES"
check "run --seed" usage2 "--seed" run --model "$STORIES" --prompt-ids 1 --seed -1
check "run id outside the vocabulary" usage2 "outside the vocabulary" run --model "$STORIES" --prompt-ids 1,99999 --backend exact
check "verify --chunk x" usage2 "--chunk" verify --model "$STORIES" --chunk x
check "probe --size -1" usage2dev "^anedvd-dev probe: --size takes an integer from 1 to" probe --size -1
check "check --weights int4 names anedvd-dev" usage2dev "^anedvd-dev check: --weights takes fp16, int8 or lut4" check --model "$STORIES" --weights int4
check "a user command's flag message names anedvd" usage2 "^anedvd run: --max-tokens takes an integer" run --model "$STORIES" --prompt-ids 1 --max-tokens 12x
check "attnbench --heads 3 --kv-heads 2" usage2dev "multiple" attnbench --heads 3 --kv-heads 2
check "layers without --upto" usage2dev "--upto" layers --model "$STORIES"
check "check --prompt with --prompt-ids" usage2dev "one of --prompt" check --model "$STORIES" --prompt x --prompt-ids 1
check "check --prompt-ids outside the vocabulary" usage2dev "outside the vocabulary" check --model "$STORIES" --prompt-ids 1,99999
# --backend on every kernel tool: emu or ane, ane only in a build that has it
for c in check layers kernels probe bench width; do
	m=(--model "$STORIES")
	case $c in probe | bench | width) m=() ;; esac
	check "$c --backend foo" usage2dev "unknown backend" $c "${m[@]}" --backend foo
	if [ "$(uname)" != Darwin ]; then
		check "$c --backend ane off macOS" usage2dev "needs macOS on Apple silicon" $c "${m[@]}" --backend ane
	fi
done
check "serve --port 70000" usage2 "--port" serve --model "$STORIES" --port 70000
check "serve --tokenizer-url http://" usage2 "--tokenizer-url" serve --model "$STORIES" --tokenizer-url http://x
check "chat --top-k x" usage2 "--top-k" chat --model "$STORIES" --top-k x
if [ "$(uname)" != Darwin ]; then
	$A run --model "$STORIES" --prompt-ids 1 --backend ane > /dev/null 2> "$T/u.err"
	check "--backend ane refused off macOS" [ $? -eq 1 ]
	check "--backend ane says why" grep -q "needs macOS" "$T/u.err"
fi
# --help is asked for: the usage on stdout (to page or grep), nothing on stderr;
# 'anedvd help CMD' is the same
for c in run chat verify serve selftest cpu route info cache tokenize; do
	"$A" $c --help > "$T/h.out" 2> "$T/h.err"
	check "$c --help exits 0 with usage" [ $? -eq 0 ]
	grep -q "usage: anedvd $c" "$T/h.out" || bad "$c --help prints its usage on stdout"
	[ -s "$T/h.err" ] && bad "$c --help writes to stderr: $(head -c 200 "$T/h.err")"
	"$A" help $c > "$T/h2.out" 2>/dev/null
	check "anedvd help $c is $c --help" cmp -s "$T/h.out" "$T/h2.out"
done
check "a misspelt command: the one meant" usage2 "unknown command 'rn': did you mean 'run'?" rn
check "anedvd help NOSUCH" usage2 "unknown command 'nosuch'" help nosuch
for c in check layers kernels probe bench width attnbench; do
	"$D" $c --help > /dev/null 2> "$T/h.err"
	check "anedvd-dev $c --help exits 0 with usage" [ $? -eq 0 ]
	grep -q "usage: anedvd-dev $c" "$T/h.err" || bad "anedvd-dev $c --help prints its usage"
done
# the developer tools are anedvd-dev's alone: anedvd --help lists none of them,
# and anedvd names the program that has each
"$A" --help > "$T/help.txt"
"$D" --help > "$T/devhelp.txt"
section() { awk -v s="$1" '$0 == s ":" { on = 1; next } on && /^[^ ]/ { exit } on && /^  [a-z]/ { print $1 }' "$2"; }
TOOLS=$(section tools "$T/devhelp.txt")
check "anedvd-dev --help lists the seven tools" [ "$(echo $TOOLS)" = "check layers kernels probe bench width attnbench" ]
check "anedvd --help lists the user's commands" \
	[ "$(section commands "$T/help.txt" | tr '\n' ' ')" = "run chat serve verify selftest cpu route info cache tokenize " ]
for c in $TOOLS; do
	check "anedvd --help does not list $c" sh -c "! grep -qE '^  $c( |\$)' '$T/help.txt'"
	check "anedvd $c: exit 2, pointing at anedvd-dev" usage2 "unknown command '$c': it is a developer tool, in anedvd-dev: run '$(readlink -f "$D") $c'" $c
done
check "anedvd-dev: an unknown tool" usage2dev "unknown tool 'frobnicate'" frobnicate
check "anedvd-dev has none of the user's commands" usage2dev "unknown tool 'run'" run --model "$STORIES"
check "anedvd-dev --version" [ "$("$D" --version)" = "anedvd-dev $("$A" --version | cut -d' ' -f2)" ]

# --- the generator: deterministic, loadable, verified --------------------------------------
"$GEN" tiny q8_0 5 "$T/g1.gguf" && "$GEN" tiny q8_0 5 "$T/g2.gguf"
check "gen-model is deterministic" cmp -s "$T/g1.gguf" "$T/g2.gguf"
"$GEN" tiny q8_0 6 "$T/g3.gguf"
differ() { ! cmp -s "$1" "$2"; }
check "gen-model: another seed, other bytes" differ "$T/g1.gguf" "$T/g3.gguf"
"$GEN" qwen2.5-0.5b f16 1 "$T/q.gguf" 2 # two layers of the real shapes
check "gen-model qwen2.5-0.5b shapes verify" "$A" verify --model "$T/q.gguf" --prompt-ids 1,2,3 > /dev/null 2>&1
"$GEN" bogus f16 1 "$T/x.gguf" 2> /dev/null
check "gen-model refuses an unknown preset" [ $? -eq 1 ]

echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
