# tokenizer.json (Unigram, Metaspace always, no split) from a SentencePiece vocab GGUF
import struct, sys, json
d = open(sys.argv[1], 'rb').read(); o = 0
def rd(fmt):
    global o
    v = struct.unpack_from('<' + fmt, d, o); o += struct.calcsize('<' + fmt); return v[0]
def rs():
    global o
    n = rd('Q'); s = d[o:o + n].decode('utf8'); o += n; return s
T = {0:'B',1:'b',2:'H',3:'h',4:'I',5:'i',6:'f',7:'?',10:'Q',11:'q',12:'d'}
def rv(t):
    if t == 8: return rs()
    if t == 9:
        at = rd('I'); n = rd('Q'); return [rv(at) for _ in range(n)]
    return rd(T[t])
assert d[:4] == b'GGUF'; o = 4; rd('I'); nt = rd('Q'); nk = rd('Q')
kv = {}
for _ in range(nk):
    k = rs(); t = rd('I'); kv[k] = rv(t)
toks = kv['tokenizer.ggml.tokens']; scores = kv['tokenizer.ggml.scores']; types = kv['tokenizer.ggml.token_type']
vocab = [[p, float(s)] for p, s in zip(toks, scores)]
added = [{"id": i, "content": toks[i], "single_word": False, "lstrip": False, "rstrip": False,
          "normalized": False, "special": True} for i in range(len(toks)) if types[i] in (2, 3)]
tj = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
      "normalizer": None,
      "pre_tokenizer": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
      "post_processor": None,
      "decoder": {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
      "model": {"type": "Unigram", "unk_id": 0, "vocab": vocab, "byte_fallback": False}}
json.dump(tj, open(sys.argv[2], 'w'), ensure_ascii=False, separators=(',', ':'))
