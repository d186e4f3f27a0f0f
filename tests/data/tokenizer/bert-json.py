#!/usr/bin/env python3
"""bert-json.py - a Hugging Face tokenizer.json (WordPiece) from a BERT-style vocab GGUF.

    python3 bert-json.py ggml-vocab-bert-bge.gguf | xz -9 > bert-bge-tokenizer.json.xz

Undoes llama.cpp's conversion of the vocabulary (word-initial pieces written with a
leading U+2581, continuations bare, [X] tokens as they are): a U+2581 piece becomes
the bare word piece, a bare piece gets the "##" continuation prefix. The rest is what
bge-small's own tokenizer.json has: BertNormalizer (lowercase, accents stripped),
BertPreTokenizer, [CLS] $A [SEP], the WordPiece decoder. Standard library only.
"""
import json
import struct
import sys

SIZES = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}
FMT = {0: "<B", 1: "<b", 2: "<H", 3: "<h", 4: "<I", 5: "<i", 6: "<f", 7: "<?", 10: "<Q", 11: "<q", 12: "<d"}


def gguf_kv(path):
    f = open(path, "rb").read()
    o = 8
    _, nkv = struct.unpack_from("<QQ", f, o)
    o += 16

    def rs(o):
        n = struct.unpack_from("<Q", f, o)[0]
        return f[o + 8:o + 8 + n].decode("utf-8"), o + 8 + n
    kv = {}
    for _ in range(nkv):
        k, o = rs(o)
        t = struct.unpack_from("<I", f, o)[0]
        o += 4
        if t == 8:
            v, o = rs(o)
        elif t == 9:
            at, cnt = struct.unpack_from("<IQ", f, o)
            o += 12
            v = []
            for _ in range(cnt):
                if at == 8:
                    x, o = rs(o)
                else:
                    x = struct.unpack_from(FMT[at], f, o)[0]
                    o += SIZES[at]
                v.append(x)
        else:
            v = struct.unpack_from(FMT[t], f, o)[0]
            o += SIZES[t]
        kv[k] = v
    return kv


def main(path):
    kv = gguf_kv(path)
    toks = kv["tokenizer.ggml.tokens"]
    vocab, added = {}, []
    for i, t in enumerate(toks):
        if t.startswith("[") and t.endswith("]"):
            p = t
        elif t.startswith("\u2581"):
            p = t[1:]
        else:
            p = "##" + t
        vocab[p] = i
    for name in ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"):
        added.append({"id": vocab[name], "content": name, "single_word": False, "lstrip": False,
                      "rstrip": False, "normalized": False, "special": True})
    j = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": {"type": "BertNormalizer", "clean_text": True, "handle_chinese_chars": True,
                       "strip_accents": None, "lowercase": True},
        "pre_tokenizer": {"type": "BertPreTokenizer"},
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "[CLS]", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}},
                                      {"SpecialToken": {"id": "[SEP]", "type_id": 0}}],
                           "pair": [], "special_tokens": {
                               "[CLS]": {"id": "[CLS]", "ids": [vocab["[CLS]"]], "tokens": ["[CLS]"]},
                               "[SEP]": {"id": "[SEP]", "ids": [vocab["[SEP]"]], "tokens": ["[SEP]"]}}},
        "decoder": {"type": "WordPiece", "prefix": "##", "cleanup": True},
        "model": {"type": "WordPiece", "unk_token": "[UNK]", "continuing_subword_prefix": "##",
                  "max_input_chars_per_word": 100, "vocab": vocab},
    }
    json.dump(j, sys.stdout, ensure_ascii=False, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    main(sys.argv[1])
