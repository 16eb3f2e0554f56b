// The Hugging Face Rust tokenizers engine (npm @anush008/tokenizers) on the
// same tokenizer.json and corpus as bench/text_tokenizer_bench.cc: encode
// throughput, single thread, documents split at form feeds, no special
// tokens added.  Writes the ids (little-endian int32) for comparison.
//
// usage: node hf_bench.js TOKENIZER_JSON CORPUS IDS_OUT [REPEAT]
'use strict';
const fs = require('fs');
const { Tokenizer } = require('@anush008/tokenizers');

async function main() {
  const [tokPath, corpusPath, idsOut, repeatArg] = process.argv.slice(2);
  const repeat = Number(repeatArg) || 3;
  const t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(tokPath);
  const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
  const corpus = fs.readFileSync(corpusPath, 'utf8');
  const bytes = Buffer.byteLength(corpus);
  const docs = corpus.split('\f');
  let best = Infinity;
  let bestCpu = Infinity;
  let all = [];
  for (let r = 0; r < repeat; ++r) {
    all = [];
    const start = process.hrtime.bigint();
    const cpuStart = process.cpuUsage();
    for (const d of docs) {
      const e = await tok.encode(d, null, { addSpecialTokens: false });
      all.push(e.getIds());
    }
    const s = Number(process.hrtime.bigint() - start) / 1e9;
    // Process CPU time: the encode runs on a libuv worker while the main
    // thread waits, so this is the engine's single-thread CPU time.
    const c = process.cpuUsage(cpuStart);
    const cpu = (c.user + c.system) / 1e6;
    best = Math.min(best, s);
    bestCpu = Math.min(bestCpu, cpu);
    console.log(`hf run ${r}: wall ${s.toFixed(3)} s (${(bytes / s / 1e6).toFixed(2)} MB/s), cpu ${cpu.toFixed(3)} s (${(bytes / cpu / 1e6).toFixed(2)} MB/s)`);
  }
  const flat = all.flat();
  console.log(`hf: load ${loadS.toFixed(2)} s; ${bytes} bytes, ${docs.length} docs, ${flat.length} ids; best wall ${(bytes / best / 1e6).toFixed(2)} MB/s, best cpu ${(bytes / bestCpu / 1e6).toFixed(2)} MB/s`);
  fs.writeFileSync(idsOut, Buffer.from(Int32Array.from(flat).buffer));
}
main().catch((e) => { console.error(e); process.exit(1); });
