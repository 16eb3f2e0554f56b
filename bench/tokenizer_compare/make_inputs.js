// Builds the two inputs of the side-by-side tokenizer benchmark:
//  1. OUT_DIR/tokenizer_v4.json: the V4-equivalent test tokenizer as ONE file
//     (DeepSeek-V3 tokenizer.json + the confirmed V4 added tokens at their ids,
//     every other id up to 129279 filled with a unique dummy, as described in
//     tests/data/tokenizer/README.md), so both engines load the same file;
//  2. OUT_DIR/corpus.txt: a multi-MB mixed text (repository code and docs,
//     English and CJK test prompts, DSML markup, multilingual subword soup),
//     documents separated by form feeds.  Deterministic for a given checkout.
//
// usage: node make_inputs.js REPO_ROOT OUT_DIR [MB]
'use strict';
const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const [repo, outDir, mbArg] = process.argv.slice(2);
const targetBytes = Math.round((Number(mbArg) || 4) * 1e6);
fs.mkdirSync(outDir, { recursive: true });

// 1. Tokenizer.
const tokData = path.join(repo, 'tests/data/tokenizer');
const tok = JSON.parse(fs.readFileSync(path.join(tokData, 'deepseek_v3_tokenizer.json'), 'utf8'));
const known = JSON.parse(fs.readFileSync(path.join(tokData, 'v4_known_added_tokens.json'), 'utf8'));
const specialIds = new Set(known.confirmed_special_flag.true);
const byId = new Map(tok.added_tokens.map((t) => [t.id, t]));
for (const [content, id] of Object.entries(known.confirmed_v4)) {
  const special = specialIds.has(id);
  byId.set(id, { id, content, single_word: false, lstrip: false, rstrip: false, normalized: !special, special });
}
for (let id = 128000; id <= 129279; ++id) {
  if (!byId.has(id)) {
    byId.set(id, { id, content: `<｜dsv4▁unused▁${id}｜>`, single_word: false, lstrip: false, rstrip: false,
                   normalized: false, special: true });
  }
}
tok.added_tokens = [...byId.values()].sort((a, b) => a.id - b.id);
fs.writeFileSync(path.join(outDir, 'tokenizer_v4.json'), JSON.stringify(tok));

// 2. Corpus.
const docs = [];
const tracked = execFileSync('git', ['-C', repo, 'ls-files'], { encoding: 'utf8' }).split('\n');
for (const f of tracked) {
  if (!/\.(cc|h|md|cmake|txt|sh|py|js)$/.test(f) && !/^scripts\//.test(f)) continue;
  if (/^tests\/data\//.test(f) && !/\.txt$/.test(f)) continue;
  const p = path.join(repo, f);
  if (!fs.existsSync(p) || fs.statSync(p).size > 2e6) continue;
  docs.push(fs.readFileSync(p, 'utf8'));
}
const enc = (rel) => JSON.parse(fs.readFileSync(path.join(repo, 'tests/data/text/encoding', rel), 'utf8'));
for (const c of enc('derived_from_reference/derived_cases.json').encode_cases) {
  if (c.expected_prompt) docs.push(c.expected_prompt);
}
for (const c of enc('official_v4_flash/official_cases.json').cases) docs.push(c.expected_prompt);
// Multilingual subword soup: words made of 1-3 vocabulary entries (decoded
// through the byte-level map), drawn with a fixed-seed LCG.
const bytesToUnicode = (() => {
  const m = new Map();
  let n = 256;
  for (let b = 0; b < 256; ++b) {
    const printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    m.set(String.fromCodePoint(printable ? b : n++), b);
  }
  return m;
})();
const vocab = Object.keys(tok.model.vocab).map((s) => {
  const chars = [...s];
  if (!chars.every((c) => bytesToUnicode.has(c))) return null;
  return Buffer.from(chars.map((c) => bytesToUnicode.get(c)));
}).filter((b) => b !== null && b.toString('utf8').indexOf('\uFFFD') < 0 && /[^\x00-\x7f]/.test(b.toString('utf8')));
let seed = 12345;
const rand = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
const baseBytes = docs.reduce((s, d) => s + Buffer.byteLength(d), 0);
let soup = [];
let soupBytes = 0;
while (baseBytes + soupBytes < targetBytes * 0.5 || soupBytes < targetBytes * 0.3) {
  const words = [];
  for (let w = 0; w < 200; ++w) {
    let word = '';
    for (let k = 0, nk = 1 + rand(3); k < nk; ++k) word += vocab[rand(vocab.length)].toString('utf8');
    words.push(word);
  }
  const para = words.join(rand(4) === 0 ? '' : ' ') + '\n\n';
  soup.push(para);
  soupBytes += Buffer.byteLength(para);
  if (soup.length % 20 === 0) { docs.push(soup.join('')); soup = []; }
}
if (soup.length) docs.push(soup.join(''));
// Repeat the whole set until the target size (real traffic repeats too).
const out = [];
let total = 0;
for (let i = 0; total < targetBytes; ++i) {
  const d = docs[i % docs.length];
  out.push(d);
  total += Buffer.byteLength(d) + 1;
}
fs.writeFileSync(path.join(outDir, 'corpus.txt'), out.join('\f'));
console.log(`corpus: ${total} bytes, ${out.length} documents (${docs.length} distinct); tokenizer: ${tok.added_tokens.length} added tokens`);
