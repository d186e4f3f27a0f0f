#!/usr/bin/env python3
# bench-spec.py - speculative decoding, measured. Run it through
# tests/perf/bench-spec.sh, which documents the options.
import json
import os
import statistics
import subprocess
import sys
import tempfile


def log(*a):
	print(*a, file=sys.stderr, flush=True)


def load():
	with open("/proc/loadavg") as f:
		return " ".join(f.read().split()[:3])


def stat(v):
	v = [x for x in v if x is not None]
	if not v:
		return "n/a"
	return f"{statistics.median(v):.2f} [{min(v):.2f}, {max(v):.2f}] (n={len(v)})"


class Bench:
	def __init__(self, build, repeats):
		self.A = os.path.join(build, "bin", "anedvd")
		self.gen = os.path.join(build, "tests", "gen-model")
		self.repeats = repeats
		self.loads = []

	def run(self, model, args, prompt=None, ids=None):
		cmd = [self.A, "run", "--model", model, "--no-chat", "--json"] + args
		if ids is not None:
			cmd += ["--prompt-ids", ",".join(str(i) for i in ids)]
		else:
			cmd += ["--prompt", prompt]
		r = subprocess.run(cmd, capture_output=True, text=True)
		if r.returncode != 0:
			raise SystemExit(f"{' '.join(cmd[:6])} ...: exit {r.returncode}: {r.stderr[-800:]}")
		self.loads.append(load())
		return json.loads(r.stdout)

	# tok/s of the decode: generated tokens after the first over the decode time
	@staticmethod
	def tps(j):
		t = j["timings"]
		return t["decode_tokens"] / (t["decode_ms"] / 1e3) if t["decode_ms"] > 0 else None

	# decode calls: one per decode row sampled, less the draft tokens accepted
	@staticmethod
	def calls(j):
		return j["timings"]["decode_tokens"] - j["speculative"]["accepted"]

	# on and off alternating within each repeat; the ratio is taken within it
	def compare(self, title, model, ngen, prompt=None, ids=None, extra=()):
		on_tps, off_tps, ratio, acc, same = [], [], [], [], True
		sp = None
		for r in range(self.repeats):
			log(f"  {title}: repeat {r + 1}/{self.repeats}")
			pair = {}
			for mode in (["on", "off"] if r % 2 == 0 else ["off", "on"]):
				a = ["--max-tokens", str(ngen)] + list(extra) + (["--no-spec"] if mode == "off" else [])
				pair[mode] = self.run(model, a, prompt, ids)
			on, off = pair["on"], pair["off"]
			same &= on["ids"] == off["ids"]
			on_tps.append(self.tps(on))
			off_tps.append(self.tps(off))
			if on_tps[-1] and off_tps[-1]:
				ratio.append(on_tps[-1] / off_tps[-1])
			sp = on["speculative"]
			acc.append(sp["acceptance"])
		print(f"{title}")
		print(f"  generated tokens               {len(on['ids'])} (prompt {len(on['prompt_ids'])} tokens)")
		print(f"  same tokens on and off         {'yes' if same else 'NO'}")
		print(f"  acceptance (accepted/drafted)  {stat(acc)}")
		print(f"  last run: {sp['steps']} steps drafted {sp['drafted']}, accepted {sp['accepted']}; "
		      f"decode calls {self.calls(on)} instead of {self.calls(off)}")
		print("  by n (accepted/drafted)        " +
		      ", ".join(f"{n}: {v['accepted']}/{v['drafted']}" for n, v in sorted(sp["by_n"].items(), key=lambda x: int(x[0]))))
		print(f"  decode tok/s, speculation on   {stat(on_tps)}")
		print(f"  decode tok/s, speculation off  {stat(off_tps)}")
		print(f"  on/off, same repeat            {stat(ratio)}")
		print(flush=True)
		return on["ids"]

	# drafts verified in full at k = 0 (off), 1, 2, 4, 8 on a text the model
	# repeats (every draft accepted): ms per decode call, and what each
	# extra column adds to a one-column call, within each repeat
	def columns(self, title, model, ngen, ids):
		ks = [0, 1, 2, 4, 8]
		per = {k: [] for k in ks}
		extra = {k: [] for k in ks if k}
		tps = {k: [] for k in ks}
		accs = {k: [] for k in ks}
		for r in range(self.repeats):
			log(f"  {title}: repeat {r + 1}/{self.repeats}")
			row = {}
			for k in (ks if r % 2 == 0 else ks[::-1]):
				a = ["--max-tokens", str(ngen)] + (["--no-spec"] if k == 0 else ["--draft", str(k), "--draft-cost", "0"])
				j = self.run(model, a, ids=ids)
				calls = self.calls(j)
				row[k] = j["timings"]["decode_ms"] / calls if calls else None
				tps[k].append(self.tps(j))
				accs[k].append(j["speculative"]["acceptance"] if k else None)
			for k in ks:
				per[k].append(row[k])
				if k and row[k] and row[0]:
					extra[k].append((row[k] / row[0] - 1) / k)
		print(f"{title}")
		print("  draft   acceptance              ms per decode call      extra column / one-column call   decode tok/s")
		for k in ks:
			print(f"  {k:5d}   {stat(accs[k]) if k else 'off':22s}  {stat(per[k]):22s}  "
			      f"{stat(extra[k]) if k else '':30s}   {stat(tps[k])}")
		print(flush=True)


def main():
	build = sys.argv[1]
	repeats = int(os.environ.get("REPEATS", "5"))
	ngen_s = int(os.environ.get("NGEN", "512"))
	ngen_q = int(os.environ.get("QWEN_NGEN", "128"))
	which = os.environ.get("CASES", "stories,qwen").split(",")
	root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
	stories = os.path.join(root, "data", "stories260K", "stories260K.gguf")
	b = Bench(build, repeats)
	print(f"bench-spec: {repeats} repeats, speculation on and off alternating; load average at start {load()}")
	print(f"  figures: median [min, max] (n); a ratio is taken within one repeat\n", flush=True)
	if "stories" in which:
		# the model's own story, then its start again: it retells its input
		story = b.run(stories, ["--max-tokens", str(ngen_s), "--no-spec"], prompt="Once upon a time")["text"]
		b.compare(f"stories260K, greedy, {ngen_s} tokens, retelling a story of {ngen_s} tokens it wrote",
		          stories, ngen_s, prompt="Once upon a time" + story + "\n\nOnce upon a time")
		b.compare(f"stories260K, greedy, {ngen_s} tokens after \"Once upon a time\" (its own text repeats)",
		          stories, ngen_s, prompt="Once upon a time")
	if "qwen" in which:
		tmp = tempfile.mkdtemp(prefix="anedvd-bench-spec-")
		q = os.path.join(tmp, "qwen2.5-0.5b-f16.gguf")
		log(f"writing the Qwen2.5-0.5B shape (F16) to {q}")
		r = subprocess.run([b.gen, "qwen2.5-0.5b", "f16", "7", q], capture_output=True, text=True)
		if r.returncode:
			raise SystemExit(f"gen-model: {r.stderr}")
		try:
			passage = [1000 + (i * 7919) % 20000 for i in range(400)]
			b.compare(f"Qwen2.5-0.5B shape (F16, random weights), greedy, {ngen_q} tokens after a 400-token passage "
			          "given twice", q, ngen_q, ids=[1] + passage + passage[:200])
			b.columns(f"Qwen2.5-0.5B shape (F16), {ngen_q} tokens, every draft accepted (the random model repeats "
			          "one token): the verify's cost per extra column", q, ngen_q, ids=[1] + passage[:64])
		finally:
			os.unlink(q)
			os.rmdir(tmp)
	print(f"load average over the runs: {b.loads[0] if b.loads else '?'} ... {b.loads[-1] if b.loads else '?'} "
	      f"(1, 5, 15 min); now {load()}")


if __name__ == "__main__":
	main()
