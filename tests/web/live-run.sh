#!/bin/sh
# live-run.sh - the browser tests against the real system: starts
# `anedvd serve` on stories260K on a free port (private runtime dir), runs
# web.test.mjs (the cases that need no scripted mock) and live.test.mjs
# with ANEDVD_WEB_URL pointing at it, then stops the server with SIGINT and
# checks it exits 0. A second server runs with --api-key (a key made up for
# the run), for the WebUI's key handling against the real 401s
# (ANEDVD_WEB_KEY_URL, ANEDVD_WEB_KEY).
#
#   live-run.sh ANEDVD_BIN MODEL [node --test arguments...]
set -eu
bin=$1
model=$2
shift 2
here=$(cd "$(dirname "$0")" && pwd)
rt=$(mktemp -d "${TMPDIR:-/tmp}/anedvd-web-live.XXXXXX")
pid=""
kpid=""
cleanup() {
	[ -n "$pid" ] && kill -9 "$pid" 2>/dev/null || true
	[ -n "$kpid" ] && kill -9 "$kpid" 2>/dev/null || true
	if [ -n "${ANEDVD_KEEP_TMP:-}" ]; then echo "kept $rt (ANEDVD_KEEP_TMP)" >&2; else rm -rf "$rt"; fi
}
trap cleanup EXIT INT TERM
port=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
# 300 us in every kernel (~200 tok/s on stories260K): the tests stop and
# watch replies mid-stream, and the pipeline otherwise finishes one in tens
# of milliseconds; at 150 us a loaded machine's slow click could still land
# after the last token. Both servers (the key test waits for Stop to show)
delay=${ANEDVD_DEBUG_DELAY_US:-300}
ANEDVD_DEBUG_DELAY_US=$delay XDG_RUNTIME_DIR=$rt "$bin" serve --model "$model" --port "$port" >"$rt/serve.log" 2>&1 &
pid=$!
url=http://127.0.0.1:$port
kport=$(node -e "const s=require('net').createServer().listen(0,'127.0.0.1',()=>{console.log(s.address().port);s.close()})")
key=sk-live-$(od -An -N6 -tx1 /dev/urandom | tr -d ' \n')
mkdir -m 700 "$rt/k"
ANEDVD_DEBUG_DELAY_US=$delay ANEDVD_API_KEY=$key XDG_RUNTIME_DIR=$rt/k "$bin" serve --model "$model" --port "$kport" >"$rt/serve-key.log" 2>&1 &
kpid=$!
kurl=http://127.0.0.1:$kport
for u in "$url" "$kurl"; do
	i=0
	until node -e "fetch('$u/health').then(r=>r.json()).then(h=>process.exit(h.engine==='up'&&h.tokenizer==='up'?0:1)).catch(()=>process.exit(1))"; do
		i=$((i + 1))
		if [ $i -ge 200 ] || ! kill -0 "$pid" 2>/dev/null || ! kill -0 "$kpid" 2>/dev/null; then
			echo "live-run: anedvd serve did not come up" >&2
			cat "$rt/serve.log" "$rt/serve-key.log" >&2
			exit 1
		fi
		sleep 0.1
	done
done
rc=0
# one file at a time: live.test.mjs reads the server's running count
ANEDVD_WEB_URL=$url ANEDVD_WEB_KEY_URL=$kurl ANEDVD_WEB_KEY=$key sh "$here/run.sh" --test-concurrency=1 "$@" \
	"$here/live.test.mjs" || rc=$?
for p in $pid $kpid; do
	kill -INT "$p"
	src=0
	wait "$p" || src=$?
	if [ $src -ne 0 ]; then
		echo "live-run: anedvd serve (pid $p) exited $src on SIGINT" >&2
		cat "$rt/serve.log" "$rt/serve-key.log" >&2
		rc=1
	fi
done
pid=""
kpid=""
exit $rc
