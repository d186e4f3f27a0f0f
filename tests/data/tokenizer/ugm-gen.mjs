// Expected ids of a Unigram tokenizer.json for llama.cpp's vocab test
// strings, by tokenizers.js (@huggingface/tokenizers 0.2.0), with adjacent
// unknown tokens fused as the Rust library's fuse_unk does.
import { readFileSync, writeFileSync } from 'node:fs';
import { Tokenizer } from '@huggingface/tokenizers';
const [json, inp, out] = process.argv.slice(2);
const tj = JSON.parse(readFileSync(json, 'utf8'));
const tok = new Tokenizer(tj, {});
const unk = tj.model.unk_id;
const cases = readFileSync(inp, 'utf8').split('\n__ggml_vocab_test__\n');
if (cases[cases.length - 1] === '') cases.pop();
const lines = cases.map((text) => {
  const ids = tok.encode(text, { add_special_tokens: false }).ids;
  const fused = ids.filter((id, i) => !(id === unk && ids[i + 1] === unk));
  return fused.join(' ');
});
writeFileSync(out, lines.join('\n') + '\n');
console.log(`${lines.length} cases`);
