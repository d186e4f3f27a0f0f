# A Gemma 4 style vocabulary (tokenizer.ggml.model "gemma4": BPE over raw
# UTF-8 with spaces as U+2581, merges, <0xXX> byte fallback) made from the
# SentencePiece vocabulary of ggml-vocab-llama-spm.gguf, for the tokenizer's
# tests: the real Gemma 4 vocabulary (262144 tokens) is not in the repository.
#
#   python3 gemma4-vocab.py ggml-vocab-llama-spm.gguf OUT.gguf
#
# The tokens and their types are the SentencePiece file's, plus "\n", "\n\n"
# and "\n\n\n\n" as normal tokens (Gemma 4 has runs of newlines as tokens,
# some that no merge makes: llama.cpp takes a word of newlines whole when the
# vocabulary has it). The merges are derived the way Hugging Face's
# SentencePiece converter does: every split of a normal piece into two pieces
# of the vocabulary, ordered by the merged piece's score, then by the ids of
# its two sides; none makes "\n\n\n\n". Gemma 4's turn markers "<|turn>" and
# "<turn|>" follow as control tokens. add_bos_token is false, as llama.cpp overrides
# it for Gemma 4. A vocabulary-only GGUF, like llama.cpp's ggml-vocab files.
import struct
import sys

d = open(sys.argv[1], 'rb').read()
o = 0


def rd(fmt):
    global o
    v = struct.unpack_from('<' + fmt, d, o)
    o += struct.calcsize('<' + fmt)
    return v[0]


def rs():
    global o
    n = rd('Q')
    s = d[o:o + n].decode('utf8')
    o += n
    return s


T = {0: 'B', 1: 'b', 2: 'H', 3: 'h', 4: 'I', 5: 'i', 6: 'f', 7: '?', 10: 'Q', 11: 'q', 12: 'd'}


def rv(t):
    if t == 8:
        return rs()
    if t == 9:
        at = rd('I')
        n = rd('Q')
        return [rv(at) for _ in range(n)]
    return rd(T[t])


assert d[:4] == b'GGUF'
o = 4
rd('I')
rd('Q')
nk = rd('Q')
kv = {}
for _ in range(nk):
    k = rs()
    t = rd('I')
    kv[k] = rv(t)
toks = list(kv['tokenizer.ggml.tokens'])
scores = list(kv['tokenizer.ggml.scores'])
types = list(kv['tokenizer.ggml.token_type'])
for extra in ('\n', '\n\n', '\n\n\n\n'):
    toks.append(extra)
    scores.append(-1.0)  # late merges: a newline's own, below every word piece
    types.append(1)      # normal
for control in ('<|turn>', '<turn|>'):
    toks.append(control)
    scores.append(0.0)
    types.append(3)
ids = {p: i for i, p in enumerate(toks)}

merges = []
for i, p in enumerate(toks):
    if types[i] != 1 or len(p) < 2 or p == '\n\n\n\n':
        continue
    local = [(p[:k], p[k:]) for k in range(1, len(p)) if p[:k] in ids and p[k:] in ids]
    local.sort(key=lambda lr: (ids[lr[0]], ids[lr[1]]))
    merges += [(scores[i], i, lr) for lr in local]
merges.sort(key=lambda m: (-m[0], m[1]))  # stable within a piece
merges = [a + ' ' + b for _, _, (a, b) in merges]

entries = []


def s_(x):
    b = x.encode('utf8')
    return struct.pack('<Q', len(b)) + b


def kv_str(k, v):
    entries.append(s_(k) + struct.pack('<I', 8) + s_(v))


def kv_u32(k, v):
    entries.append(s_(k) + struct.pack('<II', 4, v))


def kv_bool(k, v):
    entries.append(s_(k) + struct.pack('<IB', 7, 1 if v else 0))


def kv_arr(k, at, vals, pack):
    entries.append(s_(k) + struct.pack('<IIQ', 9, at, len(vals)) + b''.join(pack(v) for v in vals))


kv_str('general.architecture', 'gemma4')
kv_str('general.name', 'gemma4-style vocabulary from llama-spm')
kv_str('tokenizer.ggml.model', 'gemma4')
kv_str('tokenizer.ggml.pre', 'gemma4')
kv_arr('tokenizer.ggml.tokens', 8, toks, s_)
kv_arr('tokenizer.ggml.scores', 6, scores, lambda v: struct.pack('<f', v))
kv_arr('tokenizer.ggml.token_type', 5, types, lambda v: struct.pack('<i', v))
kv_arr('tokenizer.ggml.merges', 8, merges, s_)
kv_u32('tokenizer.ggml.bos_token_id', 1)
kv_u32('tokenizer.ggml.eos_token_id', 2)
kv_u32('tokenizer.ggml.unknown_token_id', 0)
kv_bool('tokenizer.ggml.add_bos_token', False)
# version 3, no tensors, the key-value pairs
out = b'GGUF' + struct.pack('<IQQ', 3, 0, len(entries)) + b''.join(entries)
open(sys.argv[2], 'wb').write(out)
print(f'{len(toks)} tokens, {len(merges)} merges', file=sys.stderr)
