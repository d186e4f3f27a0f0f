#!/usr/bin/env python3
# bench.py - anedvd and llama.cpp side by side on the same files. Run it
# through tests/perf/bench.sh, which documents the options; this file holds
# the work: writing the models, the alternating loop, the /proc sampler, the
# statistics and the tables.
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

# what the issue asks of each measure, by model shape ('*' = every shape).
# (measure, shape, weight type or '*') -> (text, test on the figure)
TARGETS = {
	("decode", "smollm2-135m", "f16"): (">= 0.9x peer", lambda r: r >= 0.9),
	("decode", "qwen2.5-0.5b", "f16"): (">= 1.0x peer", lambda r: r >= 1.0),
	("decode", "smollm2-135m", "q8_0"): (">= 0.9x peer (int8)", lambda r: r >= 0.9),
	("decode", "qwen2.5-0.5b", "q8_0"): (">= 0.9x peer (int8)", lambda r: r >= 0.9),
	("prefill", "smollm2-135m", "*"): (">= 1.0x peer", lambda r: r >= 1.0),
	("prefill", "qwen2.5-0.5b", "*"): (">= 1.0x peer", lambda r: r >= 1.0),
}

SHAPE_NAME = {"smollm2-135m": "SmolLM2-135M shape", "qwen2.5-0.5b": "Qwen2.5-0.5B shape",
              "stories260K": "stories260K"}


def log(*a):
	print(*a, file=sys.stderr, flush=True)


def median_range(v):
	v = [x for x in v if x is not None]
	if not v:
		return None
	return (statistics.median(v), min(v), max(v), len(v))


def fmt_num(x):
	if x is None:
		return "n/a"
	a = abs(x)
	if a >= 100:
		return f"{x:.0f}"
	if a >= 10:
		return f"{x:.1f}"
	if a >= 1:
		return f"{x:.2f}"
	return f"{x:.3f}"


def fmt_stat(v):
	s = median_range(v)
	if s is None:
		return "n/a"
	return f"{fmt_num(s[0])} ({fmt_num(s[1])}..{fmt_num(s[2])})"


# --- the process tree's memory, sampled from /proc -------------------------------------------

def _children_map():
	kids = {}
	for d in os.listdir("/proc"):
		if not d.isdigit():
			continue
		try:
			with open(f"/proc/{d}/stat", "rb") as f:
				s = f.read()
		except OSError:
			continue
		# the name may hold spaces and parentheses: the fields start after the last ')'
		rest = s[s.rfind(b")") + 2:].split()
		kids.setdefault(int(rest[1]), []).append(int(d))
	return kids


def _tree(root):
	kids = _children_map()
	out, todo = [], [root]
	while todo:
		p = todo.pop()
		out.append(p)
		todo.extend(kids.get(p, []))
	return out


def _status_kb(pid):
	rss = anon = 0
	try:
		with open(f"/proc/{pid}/status") as f:
			for line in f:
				if line.startswith("VmRSS:"):
					rss = int(line.split()[1])
				elif line.startswith("RssAnon:"):
					anon = int(line.split()[1])
	except OSError:
		pass
	return rss, anon


def _pss_kb(pid):
	"""The process's proportional set size: each resident page divided by
	the number of processes that map it."""
	try:
		with open(f"/proc/{pid}/smaps_rollup") as f:
			for line in f:
				if line.startswith("Pss:"):
					return int(line.split()[1])
	except OSError:
		pass
	return 0


class TreeMemory:
	"""Peak of the summed VmRSS (and of the summed RssAnon) of a process and
	all its descendants: every 50 ms the known processes' /proc/PID/status,
	the tree itself re-read every 50 ms (children start once, early). And
	the peak of the summed PSS, every 50 ms for the first second (short
	runs), then every 250 ms (smaps_rollup walks the page tables): the
	processes' memory together, each page counted once. For the first half
	second all of it every 5 ms: a stories260K run is over in 30-60 ms,
	and sampled every 50 ms its peak came out at 2.0-7.8 MiB from one run
	to the next, the workers often caught before they had loaded. A sum
	of VmRSS counts a page once per process that maps it: the shared
	surfaces between the workers twice, the shared libraries once per
	process. The sampler shares the two cores with what it measures: every
	10 ms (the earlier rate) it cost anedvd's SmolLM2 decode 10% (48 against
	54 tok/s, IPC 97 against 59 us a call) and llama.cpp's 8%; the peaks
	came out the same. So no timed run is sampled: each repeat runs both
	tools once more for their memory."""

	def __init__(self, pid):
		self.pid, self.peak_rss, self.peak_anon, self.peak_pss = pid, 0, 0, 0
		self._stop = threading.Event()
		self._t = threading.Thread(target=self._run, daemon=True)
		self._t.start()

	def _run(self):
		pids, last, last_pss, t_start = [self.pid], 0.0, 0.0, time.monotonic()
		while not self._stop.is_set():
			now = time.monotonic()
			step = 0.005 if now - t_start < 0.5 else 0.05
			if now - last > step:
				pids, last = _tree(self.pid), now
			rss = anon = 0
			for p in pids:
				r, a = _status_kb(p)
				rss, anon = rss + r, anon + a
			self.peak_rss = max(self.peak_rss, rss)
			self.peak_anon = max(self.peak_anon, anon)
			if now - last_pss > (step if now - t_start < 1.0 else 0.25):
				self.peak_pss = max(self.peak_pss, sum(_pss_kb(p) for p in pids))
				last_pss = now
			self._stop.wait(step)

	def stop(self):
		self._stop.set()
		self._t.join()
		return self.peak_rss / 1024.0, self.peak_anon / 1024.0, self.peak_pss / 1024.0  # MiB


CURRENT = []  # the process running now, for the signal handler


def _stop(code):
	def handler(*_):
		for p in CURRENT:
			if p.poll() is None:
				p.terminate()  # anedvd's children follow it (their parent-death signal)
		sys.exit(code)
	return handler


def run(cmd, env=None, first_token=False, timeout=900, sample=False):
	"""Runs cmd; with sample, sampling its tree's memory (rss, anon and pss
	are None without). With first_token, the time from the start to the
	first byte of the reply (anedvd run prints the prompt, a '---' line,
	then the reply as it streams)."""
	t0 = time.monotonic()
	p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
	CURRENT[:] = [p]
	mem = TreeMemory(p.pid) if sample else None
	err = []
	te = threading.Thread(target=lambda: err.append(p.stderr.read()), daemon=True)
	te.start()
	out, t_first = b"", None
	fd = p.stdout.fileno()
	while True:
		b = os.read(fd, 65536)
		if not b:
			break
		out += b
		if first_token and t_first is None:
			i = out.find(b"\n---\n")
			if i >= 0 and len(out) > i + 5:
				t_first = time.monotonic() - t0
	try:
		p.wait(timeout=timeout)
	except subprocess.TimeoutExpired:
		p.kill()
		p.wait()
	wall = time.monotonic() - t0
	te.join()
	rss, anon, pss = mem.stop() if mem else (None, None, None)
	return {"rc": p.returncode, "out": out.decode(errors="replace"), "err": b"".join(err).decode(errors="replace"),
	        "wall": wall, "first": t_first, "rss": rss, "anon": anon, "pss": pss}


def evict(path):
	"""Drops a file's pages from the page cache (a clean file: no root needed)."""
	fd = os.open(path, os.O_RDONLY)
	try:
		os.fsync(fd)
		os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
	finally:
		os.close(fd)


def env_int(name, default, least):
	"""An integer setting from the environment, at least `least`; a clear
	exit when it is not one."""
	v = os.environ.get(name, "") or str(default)
	try:
		x = int(v)
	except ValueError:
		x = None
	if x is None or x < least:
		raise SystemExit(f"bench.sh: {name}={v}: want an integer >= {least}")
	return x


def ids(n):
	return ",".join(["1"] + [str(300 + 7 * i % 200) for i in range(n - 1)])


class PeerFailed(Exception):
	"""llama-bench failed on a model: that model's comparison is skipped."""


# --- the machine ----------------------------------------------------------------------------

def machine():
	model = cores = "?"
	try:
		lc = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
		for line in lc.splitlines():
			k, _, v = line.partition(":")
			if k.strip() == "Model name":
				model = v.strip()
		cores = str(os.cpu_count())
	except OSError:
		pass
	flags = set()
	with open("/proc/cpuinfo") as f:
		for line in f:
			if line.startswith("flags"):
				flags = set(line.split(":")[1].split())
				break
	if "avx512f" in flags:
		ext = [x for x in ("avx512bw", "avx512vl", "avx512dq", "avx512_vnni", "avx512_bf16") if x in flags]
		avx = "AVX-512 (F " + " ".join(x.replace("avx512", "").replace("_", "").upper() for x in ext) + ")"
	elif "avx2" in flags:
		avx = "AVX2"
	else:
		avx = "no AVX2"
	mem = "?"
	with open("/proc/meminfo") as f:
		for line in f:
			if line.startswith("MemTotal:"):
				mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
	return f"{model}, {cores} CPUs, {avx}, {mem} RAM"


def llc():
	try:
		lc = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
		m = re.search(r"^L3 cache:\s*(.+)$", lc, re.M)
		return "L3 " + m.group(1).strip() if m else "size unknown"
	except OSError:
		return "size unknown"


def git_rev(src):
	try:
		r = subprocess.run(["git", "-C", src, "rev-parse", "--short=10", "HEAD"], capture_output=True, text=True)
		d = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=no"],
		                   capture_output=True, text=True)
		return r.stdout.strip() + ("+dirty" if d.stdout.strip() else "") if r.returncode == 0 else "?"
	except OSError:
		return "?"


def build_type(build):
	try:
		with open(os.path.join(build, "CMakeCache.txt")) as f:
			for line in f:
				if line.startswith("CMAKE_BUILD_TYPE:"):
					return line.split("=", 1)[1].strip() or "(none)"
	except OSError:
		pass
	return "?"


# --- one model -----------------------------------------------------------------------------

class Bench:
	def __init__(self, build, src):
		self.build, self.src = build, src
		self.A = os.path.join(build, "bin", "anedvd")
		self.D = os.path.join(build, "bin", "anedvd-dev")  # the developer tools
		self.gen = os.path.join(build, "tests", "gen-model")
		self.stream = os.path.join(build, "tests", "bench-stream")
		self.quick = os.environ.get("QUICK", "") not in ("", "0")
		self.fmt = os.environ.get("FORMAT", "text")
		self.n = env_int("REPEATS", 3 if self.quick else 5, 1)
		self.ngen = env_int("NGEN", 8 if self.quick else 64, 1)
		self.nprompt = 64
		# a long context too: prefill of DEPTH tokens, decode after them
		self.depth = env_int("DEPTH", 0, 0)
		self.kiters = 3 if self.quick else 10
		self.stream_mb = 64 if self.quick else 256
		self.peer = os.environ.get("LLAMA_BENCH") or None
		h = subprocess.run([self.A, "run", "--help"], capture_output=True, text=True)
		self.run_help = h.stdout + h.stderr
		h = subprocess.run([self.D, "kernels", "--help"], capture_output=True, text=True)
		self.kernels_help = h.stdout + h.stderr
		self.has_weights = "--weights" in self.run_help
		# llama-bench does not speculate: neither does the run set beside it
		# (tests/perf/bench-spec.sh measures speculation)
		self.no_spec = ["--no-spec"] if "--no-spec" in self.run_help else []
		self.k_has_weights = "--weights" in self.kernels_help
		m = re.search(r"(--[\w-]*cache[\w-]*)\s+(DIR|PATH|D)\b", self.run_help)
		self.cache_flag = m.group(1) if m else None
		# the cache may be the ane-worker's alone (its own --cache-dir, the environment)
		h = subprocess.run([os.path.join(build, "bin", "anedvd-ane-worker"), "--help"], capture_output=True, text=True)
		self.has_cache = bool(re.search(r"--[\w-]*cache", self.run_help + h.stdout + h.stderr))
		self.peer_help = ""
		if self.peer:
			h = subprocess.run([self.peer, "--help"], capture_output=True, text=True)
			self.peer_help = h.stdout + h.stderr
		self.peer_commit = None
		self.tmp = tempfile.mkdtemp(prefix="anedvd-bench.", dir=os.environ.get("TMPDIR") or None)
		# a kernel cache of the run's own (removed with the models), never the user's
		self.env = dict(os.environ, ANEDVD_LOG=os.environ.get("ANEDVD_LOG", "error"),
		                ANEDVD_CACHE_DIR=os.path.join(self.tmp, "cache"), XDG_CACHE_HOME=os.path.join(self.tmp, "xdg"))

	def weights_opt(self, wtype, helptext=None, force=None):
		"""The kernels' weights: force (a model named shape:wtype:weights), else
		anedvd's default on emu (int8 for a file stored in 8 bits or fewer)."""
		has = self.has_weights if helptext is None else ("--weights" in helptext)
		if not has:
			return [], "fp16 (no --weights)" if wtype in ("q8_0", "q4_0") else "fp16"
		w = force or ("int8" if wtype in ("q8_0", "q4_0") else "fp16")
		return ["--weights", w], w

	def cache_env(self, d):
		"""An empty kernel cache for a cold start: the build's own option when
		its help names one taking a directory, and the usual environment."""
		os.makedirs(d, exist_ok=True)
		env = dict(self.env, XDG_CACHE_HOME=d, ANEDVD_CACHE_DIR=d)
		return env, ([self.cache_flag, d] if self.cache_flag else [])

	def model(self, name):
		if name == "stories260K":
			return os.path.join(self.src, "tests", "data", "stories260K", "stories260K.gguf"), name, "f32"
		shape, _, wtype = name.partition(":")
		wtype = wtype.partition(":")[0]  # shape:wtype:weights names the kernels' weights too
		out = os.path.join(self.tmp, f"{shape}-{wtype}.gguf")
		if not os.path.exists(out):
			r = subprocess.run([self.gen, shape, wtype, "1", out], capture_output=True, text=True)
			if r.returncode:
				raise SystemExit(f"gen-model {shape} {wtype}: {r.stderr.strip()}")
		return out, shape, wtype

	# anedvd ------------------------------------------------------------------------------

	def a_run(self, f, wopt, sample=False, nprompt=None):
		cmd = [self.A, "run", "--model", f, "--prompt-ids", ids(nprompt or self.nprompt), "--no-chat", "--max-tokens",
		       str(self.ngen), "--json", "--backend", "emu"] + wopt + self.no_spec
		r = run(cmd, env=self.env, sample=sample)
		if r["rc"]:
			raise SystemExit(f"anedvd run failed ({r['rc']}): {r['err'][-4000:]}")
		t = json.loads(r["out"])["timings"]
		# IPC per round trip (a call may carry a layer's kernels); builds
		# without the count: per kernel
		calls = t.get("round_trips_per_token") or t.get("kernel_calls_per_token") or 0
		ipc = t.get("per_token_ms", {}).get("ipc")
		# the split is of the whole job (prefill too) per generated token, as run --json reports it
		pt = t.get("per_token_ms", {})
		kern = sum(pt.get(k, 0) for k in ("qkv", "o", "ffn", "lm_head")) if pt else None
		rest = sum(v for k, v in pt.items() if k not in ("qkv", "o", "ffn", "lm_head", "ipc")) if pt else None
		# the decode steps alone (builds that report them): the share is of a decode token
		dp = t.get("decode_per_token_ms", {})
		dtrips = t.get("decode_round_trips_per_token")
		dec = {"d_tot": sum(dp.values()) if dp else None, "d_kern": dp.get("kernels"), "d_ipc": dp.get("ipc"),
		       "d_rest": dp.get("attention", 0) + dp.get("other", 0) if dp else None,
		       "outside_dec": 100.0 * t["decode_outside_kernels_share"] if "decode_outside_kernels_share" in t else None,
		       "ipc_dec": 1000.0 * dp["ipc"] / dtrips if dp and dtrips else None}
		# builds that split a decode call's IPC (the data plane's clocks)
		sp = t.get("decode_ipc_per_call_us") or {}
		dec |= {"ipc_pick": sp.get("pickup"), "ipc_reply": sp.get("reply"), "ipc_rest": sp.get("rest")}
		return dec | {
			"d_attn": dp.get("attention") if dp else None,
			"t_tot": sum(pt.values()) if pt else None, "t_kern": kern, "t_ipc": ipc, "t_rest": rest,
			"decode": t.get("decode_tok_s"),
			"prefill": t.get("prefill_tok_s"),
			"calls": calls,
			"ipc": 1000.0 * ipc / calls if ipc is not None and calls else None,
			"outside": 100.0 * t["outside_kernels_share"] if "outside_kernels_share" in t else None,
			"rss": r["rss"], "anon": r["anon"], "pss": r["pss"],
		}

	def a_start(self, f, wopt, cachedir, cold):
		if cold:
			evict(f)
		env, copt = self.cache_env(cachedir)
		cmd = [self.A, "run", "--model", f, "--prompt-ids", ids(self.nprompt), "--no-chat", "--max-tokens", "1",
		       "--backend", "emu"] + wopt + copt
		r = run(cmd, env=env, first_token=True)
		if r["rc"]:
			raise SystemExit(f"anedvd run (start) failed ({r['rc']}): {r['err'][-4000:]}")
		return r["first"] if r["first"] is not None else r["wall"]

	def a_kernels(self, f, wtype, force=None):
		wopt = self.weights_opt(wtype, self.kernels_help, force)[0]
		r = subprocess.run([self.D, "kernels", "--model", f, "--iters", str(self.kiters)] + wopt,
		                   capture_output=True, text=True, env=self.env)
		if r.returncode:
			raise SystemExit(f"anedvd-dev kernels failed: {r.stderr[-500:]}")
		m = re.search(r"TOTAL per token:.*?([\d.]+) MB, ([\d.]+) GB/s", r.stdout)
		# the decode pass against the read of the same process (median of its rounds)
		pg = re.search(r"^  pass: .*?, ([\d.]+) GB/s", r.stdout, re.M)
		pr = re.search(r"^  streaming read: .*?, ([\d.]+) GB/s", r.stdout, re.M)
		pq = re.search(r"^  pass / read: ([\d.]+)x", r.stdout, re.M)
		f = lambda x: float(x.group(1)) if x else None
		return {"gbs": float(m.group(2)) if m else None, "kmb": float(m.group(1)) if m else None,
		        "pass": f(pg), "read": f(pr), "ratio": f(pq)}

	def stream_read(self):
		r = subprocess.run([self.stream, str(self.stream_mb), "5" if not self.quick else "3", "2"],
		                   capture_output=True, text=True)
		m = re.search(r"median ([\d.]+) GB/s", r.stdout)
		return float(m.group(1)) if m else None

	def dataplane(self):
		"""bench-dataplane's own figures (median and range of its runs), when built."""
		exe = os.path.join(self.build, "tests", "bench-dataplane")
		if not os.access(exe, os.X_OK):
			return None
		stories = os.path.join(self.src, "tests", "data", "stories260K", "stories260K.gguf")
		r = subprocess.run([exe, stories, "2000" if self.quick else "20000", str(self.n)], capture_output=True,
		                   text=True, env=self.env)
		rows = []
		for line in r.stdout.splitlines():
			m = re.match(r"\s+(\S.*?)\s+median\s+([\d.]+) us\s+range\s+([\d.]+) \.\.\s+([\d.]+)", line)
			if m:
				rows.append((m.group(1), float(m.group(2)), float(m.group(3)), float(m.group(4))))
		return rows if r.returncode == 0 else []

	# the peer ----------------------------------------------------------------------------

	def p_json(self, r):
		if r["rc"]:
			rc = r["rc"]
			how = f"killed by {signal.Signals(-rc).name}" if rc < 0 else f"exit status {rc}"
			tail = r["err"][-300:].strip()
			raise PeerFailed(f"llama-bench failed ({how})" + (f": {tail}" if tail else ""))
		j = json.loads(r["out"][r["out"].find("["):])
		if j and not self.peer_commit:
			self.peer_commit = j[0].get("build_commit")
		return j

	def p_run(self, f, sample=False):
		cmd = [self.peer, "-m", f, "-t", "2", "-p", str(self.nprompt), "-n", str(self.ngen), "-r", "1", "-o", "json"]
		r = run(cmd, sample=sample)
		dec = pre = None
		for e in self.p_json(r):
			if e.get("n_gen", 0) > 0 and e.get("n_prompt", 0) == 0:
				dec = e["avg_ts"]
			elif e.get("n_prompt", 0) > 0 and e.get("n_gen", 0) == 0:
				pre = e["avg_ts"]
		return {"decode": dec, "prefill": pre, "rss": r["rss"], "anon": r["anon"], "pss": r["pss"]}

	def p_depth(self, f):
		"""llama-bench at a long context: prefill of DEPTH tokens, and decode
		after DEPTH tokens in the cache (-d, llama-bench's own fill)."""
		out = {}
		for key, cmd in (("prefill", ["-p", str(self.depth), "-n", "0"]),
		                 ("decode", ["-p", "0", "-n", str(self.ngen), "-d", str(self.depth)])):
			r = run([self.peer, "-m", f, "-t", "2", "-r", "1", "-o", "json"] + cmd)
			e = [x for x in self.p_json(r) if x.get("n_prompt" if key == "prefill" else "n_gen", 0) > 0]
			out[key] = e[0]["avg_ts"] if e else None
		return out

	def p_start(self, f, cold):
		if cold:
			evict(f)
		cmd = [self.peer, "-m", f, "-t", "2", "-p", str(self.nprompt), "-n", "0", "-r", "1", "-o", "json"]
		if "--no-warmup" in self.peer_help:
			cmd.append("--no-warmup")
		r = run(cmd)
		self.p_json(r)
		return r["wall"]

	# the loop ----------------------------------------------------------------------------

	def bench_model(self, name):
		f, shape, wtype = self.model(name)
		force = name.split(":")[2] if name.count(":") >= 2 else None
		wopt, wdesc = self.weights_opt(wtype, force=force)
		log(f"bench: {name}: {self.n} alternating repeats")
		A = {k: [] for k in ("decode", "prefill", "ipc", "outside", "cold", "warm", "rss", "anon", "pss", "gbs", "stream", "pass", "pread", "pratio",
		                     "t_tot", "t_kern", "t_ipc", "t_rest", "d_tot", "d_kern", "d_ipc", "d_rest", "outside_dec",
		                     "ipc_dec", "ipc_pick", "ipc_reply", "ipc_rest")}
		A |= {"prefill_d": [], "decode_d": [], "attn_d": []}
		P = {k: [] for k in ("decode", "prefill", "cold", "warm", "rss", "anon", "pss", "prefill_d", "decode_d")}
		calls, kmb = None, None
		peer, peer_error = self.peer, None

		def p_try(fn, *a):
			nonlocal peer, peer_error
			try:
				return fn(*a)
			except PeerFailed as e:
				peer, peer_error = None, str(e)
				log(f"bench: {name}: {peer_error}; no comparison for this model")
				return None

		for i in range(self.n):
			# the timed runs go unwatched; the memory comes from a run of
			# each just after, its timings left out (see TreeMemory)
			a = self.a_run(f, wopt)
			for k in ("decode", "prefill", "ipc", "outside", "t_tot", "t_kern", "t_ipc", "t_rest",
			          "d_tot", "d_kern", "d_ipc", "d_rest", "outside_dec", "ipc_dec", "ipc_pick", "ipc_reply",
			          "ipc_rest"):
				if a.get(k) is not None:
					A[k].append(a[k])
			calls = a["calls"]
			if peer and (p := p_try(self.p_run, f)):
				for k in ("decode", "prefill"):
					P[k].append(p[k])
			a = self.a_run(f, wopt, sample=True)
			for k in ("rss", "anon", "pss"):
				A[k].append(a[k])
			if peer and (p := p_try(self.p_run, f, True)):
				for k in ("rss", "anon", "pss"):
					P[k].append(p[k])
			cache = os.path.join(self.tmp, f"cache-{os.path.basename(f)}-{i}")
			A["cold"].append(self.a_start(f, wopt, cache, True))
			if peer and (x := p_try(self.p_start, f, True)) is not None:
				P["cold"].append(x)
			A["warm"].append(self.a_start(f, wopt, cache, False))
			if peer and (x := p_try(self.p_start, f, False)) is not None:
				P["warm"].append(x)
			if self.depth:
				a = self.a_run(f, wopt, nprompt=self.depth)
				for k, ka in (("prefill_d", "prefill"), ("decode_d", "decode"), ("attn_d", "d_attn")):
					if a[ka] is not None:
						A[k].append(a[ka])
				if peer and "--n-depth" in self.peer_help and (p := p_try(self.p_depth, f)):
					P["prefill_d"].append(p["prefill"])
					P["decode_d"].append(p["decode"])
			k = self.a_kernels(f, wtype, force)
			kmb = k["kmb"]
			for a, b in (("gbs", "gbs"), ("pass", "pass"), ("pread", "read"), ("pratio", "ratio")):
				A[a].append(k[b])
			A["stream"].append(self.stream_read())
		if peer_error:  # a failure after some repeats: no half comparison
			P = {k: [] for k in P}
		return {"name": name, "file": f, "shape": shape, "wtype": wtype, "wdesc": wdesc, "A": A, "P": P,
		        "peer_error": peer_error,
		        "calls": calls, "kmb": kmb, "kv_kib": self.kv_kib(f), "fbytes": os.path.getsize(f)}

	def kv_kib(self, f):
		"""KiB of the pipeline's fp16 KV cache per position ('anedvd info'
		prints the fp32 cache's bytes per 1k positions), or None."""
		r = subprocess.run([self.A, "info", "--model", f], capture_output=True, text=True, env=self.env)
		m = re.search(r"fp32 KV cache / 1k tokens\s+([\d.]+) (KiB|MiB|GiB)", r.stdout)
		if not m:
			return None
		scale = {"KiB": 1.0, "MiB": 1024.0, "GiB": 1024.0 * 1024.0}[m.group(2)]
		return float(m.group(1)) * scale / 1024.0 / 2.0


# --- tables ---------------------------------------------------------------------------------

def paired_ratio(a, p):
	r = [x / y for x, y in zip(a, p) if x is not None and y]
	return r


def table(fmt, head, rows):
	if fmt == "md":
		lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
		lines += ["| " + " | ".join(r) + " |" for r in rows]
	else:
		w = [max(len(head[i]), *(len(r[i]) for r in rows)) for i in range(len(head))]
		lines = ["  " + "  ".join(h.ljust(w[i]) for i, h in enumerate(head)).rstrip()]
		lines += ["  " + "  ".join(c.ljust(w[i]) for i, c in enumerate(r)).rstrip() for r in rows]
	return "\n".join(lines)


def target(measure, shape, wtype, ratio):
	t = TARGETS.get((measure, shape, wtype)) or TARGETS.get((measure, shape, "*"))
	if not t:
		return "", None
	if ratio is None:
		return t[0], None
	return t[0], t[1](ratio)


BUSY = [False]  # the machine had other work at the start: verdicts get a '*'


def verdict(ok):
	return "" if ok is None else (" met" if ok else " MISSED") + ("*" if BUSY[0] else "")


def int8_note(b, m, measure):
	"""The Q8_0 decode targets are for int8 weights: none to judge without them."""
	return measure == "decode" and m["wtype"] == "q8_0" and not b.has_weights


def say(*a):
	print(*a, flush=True)


def report_model(b, m):
	fmt, peer = b.fmt, b.peer
	h = "## " if fmt == "md" else "== "
	if True:
		A, P = m["A"], m["P"]
		title = f"{SHAPE_NAME.get(m['shape'], m['shape'])}, {m['wtype'].upper()}" + (f", {m['wdesc']}" if m["name"].count(":") >= 2 else "")
		say(f"{h}{title}" + ("" if fmt == "md" else " =="))
		say("")
		say(f"{os.path.basename(m['file'])}: {m['fbytes'] / 1e6:.1f} MB; weights in the kernels: {m['wdesc']}"
		    f" ({fmt_num(m['kmb'])} MB per token); {fmt_num(m['calls'])} calls to the ane-worker per token (whole job);"
		    f" {b.nprompt}-token prompt, {b.ngen} tokens decoded")
		if m.get("peer_error"):
			say("")
			say(f"llama.cpp: not compared on this model: {m['peer_error']}")
		say("")
		head = ["measure", "anedvd", "llama.cpp", "anedvd/llama.cpp", "target"]
		rows = []

		def cmp_row(label, key, measure, higher=True):
			r = paired_ratio(A[key], P[key]) if peer else []
			rs = median_range(r)
			txt, ok = target(measure, m["shape"], m["wtype"], rs[0] if rs else None)
			if int8_note(b, m, measure):
				txt, ok = txt + " n/a: ran as fp16", None
			if not higher and not txt:
				txt = "(lower is better)"
			rows.append([label, fmt_stat(A[key]), fmt_stat(P[key]) if peer else "-",
			             (fmt_stat(r) + "x") if rs else "-", txt + verdict(ok)])

		cmp_row("decode tok/s", "decode", "decode")
		cmp_row(f"prefill tok/s ({b.nprompt}-token prompt)", "prefill", "prefill")
		if b.depth:
			cmp_row(f"prefill tok/s ({b.depth}-token prompt)", "prefill_d", "prefill_d")
			cmp_row(f"decode tok/s after a {b.depth}-token prompt", "decode_d", "decode_d")
			rows[-1][4] = "llama.cpp: llama-bench -d " + str(b.depth)
			rows.append([f"attention ms per decode token after a {b.depth}-token prompt", fmt_stat(A["attn_d"]), "-",
			             "-", ""])
		cmp_row("start to first token, cold s", "cold", "cold", higher=False)
		wt = ""
		if m["shape"] == "qwen2.5-0.5b":
			s = median_range(A["warm"])
			wt = "anedvd <= 1 s" + verdict(s[0] <= 1.0 if s else None)
		cmp_row("start to first token, warm s", "warm", "warm", higher=False)
		if wt:
			rows[-1][4] = wt
		cmp_row("peak RSS, all processes (sum of VmRSS), MiB", "rss", "rss", higher=False)
		rows[-1][4] = "a page two processes map counts twice"
		cmp_row("peak memory, all processes together (sum of PSS), MiB", "pss", "pss", higher=False)
		s = median_range(A["pss"])
		if m["kmb"] and s and m["shape"] in ("smollm2-135m", "qwen2.5-0.5b"):
			# the allowance: the fp16 KV rows of the run's positions
			kv = m["kv_kib"] * (b.nprompt + b.ngen) / 1024.0 if m.get("kv_kib") else 0.0
			lim = 1.2 * m["kmb"] * 1e6 / 2**20 + kv
			rows[-1][4] = (f"anedvd <= 1.2x kernel weights + KV = {lim - kv:.0f} + {kv:.1f} MiB" +
			               verdict(s[0] <= lim))
		cmp_row("peak private (RssAnon), MiB", "anon", "anon", higher=False)
		# the decode steps alone where the build reports them, else the whole job
		dec = bool(A["outside_dec"])
		ipc = A["ipc_dec"] if dec else A["ipc"]
		rows.append(["IPC per call to the ane-worker, us" + (", decode steps" if dec else ", whole job"),
		             fmt_stat(ipc), "-", "-", "empty call <= 10 us"])
		if A["ipc_pick"]:
			split = [median_range(A[k]) for k in ("ipc_pick", "ipc_reply", "ipc_rest")]
			rows.append(["IPC per decode call, us: pickup + reply + rest",
			             " + ".join(fmt_num(s[0]) if s else "n/a" for s in split), "-", "-",
			             "medians; pickup: posted -> the worker takes it; reply: written -> seen; rest: the worker's own steps"])
		out = A["outside_dec"] if dec else A["outside"]
		s = median_range(out)
		ot = ""
		if m["shape"] == "smollm2-135m":
			ot = "<= 8%" + verdict(s[0] <= 8 if s else None)
		rows.append(["decode time outside the kernels, %" + (", decode steps alone" if dec else ", whole job"),
		             fmt_stat(out), "-", "-", ot])
		if dec:
			rows.append(["time outside the kernels, %, whole job (prefill included)", fmt_stat(A["outside"]), "-",
			             "-", ""])
		for label, keys in ((("ms per decode token, decode steps alone: all = kernels + IPC + rest",
		                      ("d_tot", "d_kern", "d_ipc", "d_rest")),) if dec else ()) + (
		        ("ms per generated token, whole job: all = kernels + IPC + rest", ("t_tot", "t_kern", "t_ipc", "t_rest")),):
			split = [median_range(A[k]) for k in keys]
			rows.append([label, " = ".join([fmt_num(split[0][0]) if split[0] else "n/a",
			                                " + ".join(fmt_num(s[0]) if s else "n/a" for s in split[1:])]), "-", "-",
			             "medians; rest: attention, sampling, the CPU's own work"])
		# what decode streams: the weights of a token times tokens per second (a lower bound of
		# the bandwidth decode reaches, IPC and attention included); llama.cpp's from its file
		eff_a = [m["kmb"] / 1e3 * d for d in A["decode"] if d] if m["kmb"] else []
		eff_p = [m["fbytes"] / 1e9 * d for d in P["decode"] if d]
		rows.append(["decode weight GB/s (weight bytes per token x tok/s)", fmt_stat(eff_a),
		             fmt_stat(eff_p) if peer else "-", "-", "llama.cpp: the file's bytes"])
		rows.append(["emu weight GB/s (kernels, 1 column)", fmt_stat(A["gbs"]), "-", "-",
		             "each kernel repeated: one that fits the LLC runs from it"])
		rows.append(["emu weight GB/s, decode pass (every kernel once, 1 column)", fmt_stat(A["pass"]), "-", "-",
		             "what a decode step's kernels stream"])
		rows.append(["2-thread streaming read GB/s, same process", fmt_stat(A["pread"]), "-", "-",
		             "read in turn with the pass"])
		rows.append(["2-thread streaming read GB/s", fmt_stat(A["stream"]), "-", "-", "bench-stream"])
		r = [x for x in A["pratio"] if x]
		rs = median_range(r)
		# stories260K's weights (0.5 MB) stay in the caches: no DRAM roofline to hold it to
		big = m["shape"] in ("smollm2-135m", "qwen2.5-0.5b")
		rows.append(["emu decode pass / streaming read, same process", (fmt_stat(r) + "x") if rs else "n/a", "-",
		             "-", (">= 0.9x" + verdict(rs[0] >= 0.9 if rs else None)) if big else "(weights in cache)"])
		say(table(fmt, head, rows))
		say("")


def report_summary(b, res):
	fmt, peer = b.fmt, b.peer
	h = "## " if fmt == "md" else "== "
	# one line per model: the ratios the targets are about
	if peer:
		say(f"{h}Against llama.cpp" + ("" if fmt == "md" else " =="))
		say("")
		head = ["model", "weights", "decode ratio", "target", "best/best", "prefill-64 ratio", "target",
		        "best/best"]
		rows = []

		def best(m, k):  # the least disturbed run of each: what a busy machine still shows
			a = [x for x in m["A"][k] if x]
			p = [x for x in m["P"][k] if x]
			return f"{fmt_num(max(a) / max(p))}x" if a and p else "n/a"

		for m in res:
			rd = median_range(paired_ratio(m["A"]["decode"], m["P"]["decode"]))
			rp = median_range(paired_ratio(m["A"]["prefill"], m["P"]["prefill"]))
			td, okd = target("decode", m["shape"], m["wtype"], rd[0] if rd else None)
			if int8_note(b, m, "decode"):
				td, okd = td + " n/a: ran as fp16", None
			tp, okp = target("prefill", m["shape"], m["wtype"], rp[0] if rp else None)
			rows.append([f"{SHAPE_NAME.get(m['shape'], m['shape'])} {m['wtype'].upper()}", m["wdesc"],
			             f"{fmt_num(rd[0])}x" if rd else "n/a", td + verdict(okd), best(m, "decode"),
			             f"{fmt_num(rp[0])}x" if rp else "n/a", tp + verdict(okp), best(m, "prefill")])
		say(table(fmt, head, rows))
		say("")
		say("ratio: the median of the per-repeat ratios (the verdicts use it); best/best: the fastest"
		    " anedvd run over the fastest llama.cpp run")
		say("")


def main():
	if len(sys.argv) != 2:
		log("usage: bench.py BUILD_DIR (see tests/perf/bench.sh)")
		return 2
	build = os.path.abspath(sys.argv[1])
	src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
	# SIGTERM (and SIGINT, which a background job ignores) still remove the models
	signal.signal(signal.SIGTERM, _stop(143))
	signal.signal(signal.SIGINT, _stop(130))
	b = Bench(build, src)
	try:
		default = "stories260K,smollm2-135m:f16,smollm2-135m:q8_0,qwen2.5-0.5b:f16,qwen2.5-0.5b:q8_0"
		names = [x for x in os.environ.get("MODELS", default).split(",") if x]
		t0 = time.time()
		load0 = os.getloadavg()
		if b.peer:  # its build commit for the header, and a first check that it runs
			try:
				b.p_json(run([b.peer, "-m", b.model("stories260K")[0], "-p", "0", "-n", "1", "-r", "1", "-o", "json"]))
			except PeerFailed as e:
				raise SystemExit(f"bench.sh: LLAMA_BENCH={b.peer}: {e}")
		fmt = b.fmt
		say(("# " if fmt == "md" else "") + "anedvd side by side" + (" (QUICK)" if b.quick else ""))
		say("")
		bullet = "- " if fmt == "md" else "  "
		say(f"{bullet}date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(t0))}")
		say(f"{bullet}machine: {machine()}; load average {load0[0]:.1f} at the start")
		if load0[0] > 1.0:
			BUSY[0] = True
			say(f"{bullet}NOTE: the machine was busy with other work before the start (load above 1 on {os.cpu_count()} CPUs):"
			    f" these figures are noisy, llama.cpp's spinning thread pool suffers most, and a verdict"
			    f" marked * is not conclusive")
		say(f"{bullet}anedvd: commit {git_rev(src)}, {build_type(build)} build, backend emu, 2 threads")
		if b.peer:
			say(f"{bullet}llama.cpp: llama-bench, build commit {b.peer_commit or '?'}, CPU, -t 2")
		else:
			say(f"{bullet}llama.cpp: not compared (set LLAMA_BENCH to a llama-bench binary)")
		say(f"{bullet}each figure: median (min..max) of {b.n} repeats, the tools alternating"
		    f" (anedvd run, llama-bench, starts, kernels, streaming read); ratios are the median of the"
		    f" per-repeat ratios")
		say(f"{bullet}--weights: " + ("int8 for Q8_0 and Q4_0 files (anedvd's default), fp16 otherwise, unless a"
		                               " model is named shape:wtype:weights" if b.has_weights
		                               else "n/a (this build has no --weights; Q8_0 runs as fp16)"))
		say(f"{bullet}kernel cache: " + (f"cold starts get an empty cache ({b.cache_flag or 'ANEDVD_CACHE_DIR'}),"
		                                  f" the other runs one of their own"
		                                  if b.has_cache else "n/a (this build has none)"))
		say(f"{bullet}cold start: the model file dropped from the page cache (posix_fadvise DONTNEED)"
		    f" and an empty kernel cache; warm: the same start again at once. anedvd: start to the first"
		    f" byte of the reply after a {b.nprompt}-token prompt; llama.cpp: llama-bench's wall time for"
		    f" loading and one {b.nprompt}-token prompt, no warm-up")
		say(f"{bullet}peak RSS: the largest sum over a run's process tree (anedvd and every child) of"
		    f" VmRSS, sampled from /proc every 5 ms for half a second, then every 50 ms (a page two processes"
		    f" map counts twice); RssAnon likewise (private memory only); together: the largest sum of PSS"
		    f" (/proc/PID/smaps_rollup, every 5 ms for half a second, every 50 ms to a second, then every"
		    f" 250 ms), each resident page divided among the processes that map it, so the workers'"
		    f" shared surfaces and the shared libraries count once; the target's allowance for the KV"
		    f" cache is the fp16 rows of the run's positions. The memory comes from one more run of"
		    f" each tool per repeat, whose timings are not used: no timed run shares the cores with the"
		    f" sampler")
		say(f"{bullet}IPC and the share outside the kernels: anedvd run --json timings")
		say(f"{bullet}emu weight GB/s: anedvd-dev kernels times each kernel --iters times in a row (their"
		    f" median eval), so a kernel"
		    f" whose weights fit the last-level cache ({llc()}) is read from it and can beat the streaming"
		    f" read; its decode pass runs every kernel of the model once in order, as a decode step does,"
		    f" in rounds alternating with a 2-thread read of as many bytes (at most 512 MiB) in the same"
		    f" process; the ratio is the median of the rounds' ratios. Both reads load 32 bytes at a time"
		    f" from huge pages where the kernel gives them, as the emu holds its weights")
		say(f"{bullet}decode: llama-bench tg{b.ngen} starts from an empty context, anedvd after the prompt")
		say("")
		dp = b.dataplane()
		h = "## " if fmt == "md" else "== "
		say(f"{h}Kernel call round trip" + ("" if fmt == "md" else " =="))
		say("")
		if dp is None:
			say("n/a (this build has no tests/bench-dataplane)")
		elif not dp:
			say("bench-dataplane failed")
		else:
			say("bench-dataplane on stories260K (its own median and range); the issue's target: an empty call <= 10 us")
			say("")
			say(table(fmt, ["call", "us", "target"],
			          [[w, f"{fmt_num(m)} ({fmt_num(lo)}..{fmt_num(hi)})",
			            ("<= 10 us" + verdict(m <= 10)) if w.startswith("empty call: data plane") else ""]
			           for w, m, lo, hi in dp]))
		say("")
		res = []
		for n in names:
			res.append(b.bench_model(n))
			report_model(b, res[-1])
		report_summary(b, res)
		say(f"load average at the end: {os.getloadavg()[0]:.1f}; {(time.time() - t0) / 60:.1f} minutes in all")
	finally:
		shutil.rmtree(b.tmp, ignore_errors=True)
	return 0


if __name__ == "__main__":
	sys.exit(main())
