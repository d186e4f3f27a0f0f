# The expected ids of ggml-vocab-gemma4-style.gguf.inp, from llama.cpp's own
# tokenizer (llama-tokenize, vocabulary only, no BOS, no special tokens
# parsed: what test-tokenizer-0 asks of it), one line per test as in
# llama.cpp's .out files.
#
#   python3 gemma4-out.py LLAMA_TOKENIZE VOCAB.gguf IN.inp > OUT.out
import subprocess
import sys

tool, vocab, inp = sys.argv[1:4]
SEP = '\n__ggml_vocab_test__\n'
text = open(inp, encoding='utf-8').read()
tests = text.split(SEP)
if tests and tests[-1] == '':
    tests.pop()
for t in tests:
    r = subprocess.run([tool, '-m', vocab, '--stdin', '--ids', '--no-bos', '--no-parse-special', '--no-escape', '--log-disable'],
                       input=t.encode('utf-8'), capture_output=True, check=True)
    ids = r.stdout.decode().strip().strip('[]').replace(',', ' ').split()
    print((' ' + ' '.join(ids)) if ids else '')
