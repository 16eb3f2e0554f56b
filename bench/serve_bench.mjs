// Load benchmark for an OpenAI-compatible server such as `dsv4 serve` (not a
// test), with the metric definitions of vLLM's `vllm bench serve`
// (vllm/benchmarks/serve.py):
//   TTFT  time from sending the request to the first streamed token
//   TPOT  (E2EL - TTFT) / (output tokens - 1), per request
//   ITL   gaps between consecutive streamed chunks (all requests pooled)
//   E2EL  time from sending the request to the last byte
//   throughput: completed requests / s, output tokens / s, (input + output) tokens / s
// over the benchmark's wall time at a fixed number of concurrent clients.
//
//   node bench/serve_bench.mjs --base http://127.0.0.1:8000 [--model NAME]
//        [--input-len 128] [--output-len 64] [--concurrency 1,8,32]
//        [--requests-per-client 4] [--api-key KEY] [--vocab-lo 100 --vocab-hi 4000]
//
// Requests are /v1/completions with random token-id prompts, greedy, and ignore_eos,
// streamed with usage, so every request produces exactly --output-len tokens.
const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1]]);
  return acc;
}, []));
const base = args.base ?? 'http://127.0.0.1:8000';
const inputLen = Number(args['input-len'] ?? 128);
const outputLen = Number(args['output-len'] ?? 64);
const levels = (args.concurrency ?? '1,8,32').split(',').map(Number);
const perClient = Number(args['requests-per-client'] ?? 4);
const vocabLo = Number(args['vocab-lo'] ?? 100);
const vocabHi = Number(args['vocab-hi'] ?? 4000);
const headers = { 'Content-Type': 'application/json' };
if (args['api-key']) headers.Authorization = `Bearer ${args['api-key']}`;

let seed = 12345;
function rand() {  // deterministic prompts (xorshift32)
  seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0;
  return seed / 4294967296;
}
const prompt = () => Array.from({ length: inputLen }, () => vocabLo + Math.floor(rand() * (vocabHi - vocabLo)));

async function model() {
  if (args.model) return args.model;
  return (await (await fetch(`${base}/v1/models`, { headers })).json()).data[0].id;
}

// A server may close a keep-alive connection after a response without saying
// so (llama-server closed it after streamed responses while its headers
// announced keep-alive): a request the client then sends on that connection
// fails before a byte of the response, and the server never saw it.  As curl
// does, such a request is sent again, on another connection (the pool may
// hold one dead connection per client, hence the bound) and counted; it is
// timed from the attempt the server answered, so that the client's failed
// write does not count against the server's TTFT.
let retried = 0;
async function post(body) {
  const send = () => fetch(`${base}/v1/completions`, { method: 'POST', headers, body: JSON.stringify(body) });
  for (let attempt = 1; ; ++attempt) {
    const t0 = performance.now();
    try {
      return { res: await send(), t0 };
    } catch (e) {
      if (e.cause?.code !== 'UND_ERR_SOCKET' || attempt === 64) throw e;
      ++retried;
    }
  }
}

async function oneRequest(name) {
  // Greedy, as vLLM's benchmark requests are: the server's default sampling now
  // comes from the model's generation_config.json (--generation-config auto).
  const body = { model: name, prompt: prompt(), max_tokens: outputLen, ignore_eos: true,
                 temperature: 0, stream: true, stream_options: { include_usage: true } };
  const { res, t0 } = await post(body);
  if (res.status !== 200) throw new Error(`HTTP ${res.status}: ${await res.text()}`);
  const decoder = new TextDecoder();
  let buf = '', ttft = -1, last = t0, outputTokens = 0, promptTokens = 0;
  const itl = [];
  for await (const bytes of res.body) {
    buf += decoder.decode(bytes, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      if (!event.startsWith('data: ') || event === 'data: [DONE]') continue;
      const chunk = JSON.parse(event.slice(6));
      if (chunk.usage) {
        outputTokens = chunk.usage.completion_tokens;
        promptTokens = chunk.usage.prompt_tokens;
      }
      if (chunk.choices?.length && chunk.choices[0].text) {
        const now = performance.now();
        if (ttft < 0) ttft = now - t0; else itl.push(now - last);
        last = now;
      }
    }
  }
  const e2el = performance.now() - t0;
  return { ttft, e2el, itl, outputTokens, promptTokens,
           tpot: outputTokens > 1 ? (e2el - ttft) / (outputTokens - 1) : 0 };
}

function pct(xs, p) {
  if (!xs.length) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const i = (s.length - 1) * p;  // linear interpolation, as numpy.percentile
  const lo = Math.floor(i), hi = Math.ceil(i);
  return s[lo] + (s[hi] - s[lo]) * (i - lo);
}
const mean = (xs) => xs.reduce((a, b) => a + b, 0) / xs.length;

async function level(name, concurrency) {
  const t0 = performance.now();
  const results = (await Promise.all(Array.from({ length: concurrency }, async () => {
    const mine = [];
    for (let i = 0; i < perClient; i++) mine.push(await oneRequest(name));
    return mine;
  }))).flat();
  const sec = (performance.now() - t0) / 1000;
  const out = results.reduce((a, r) => a + r.outputTokens, 0);
  const inp = results.reduce((a, r) => a + r.promptTokens, 0);
  const f = (xs) => `${mean(xs).toFixed(1)} / ${pct(xs, 0.5).toFixed(1)} / ${pct(xs, 0.99).toFixed(1)}`;
  return {
    concurrency, requests: results.length, seconds: sec.toFixed(2),
    'req/s': (results.length / sec).toFixed(2), 'out tok/s': (out / sec).toFixed(1),
    'total tok/s': ((inp + out) / sec).toFixed(1),
    'TTFT ms mean/p50/p99': f(results.map((r) => r.ttft)),
    'TPOT ms mean/p50/p99': f(results.map((r) => r.tpot)),
    'ITL ms mean/p50/p99': f(results.flatMap((r) => r.itl)),
    'E2EL ms mean/p50/p99': f(results.map((r) => r.e2el)),
  };
}

const name = await model();
console.log(`serve benchmark: ${base} model ${name}, input ${inputLen}, output ${outputLen}, ` +
            `${perClient} requests per client`);
await oneRequest(name);  // warm-up
const rows = [];
for (const c of levels) rows.push(await level(name, c));
const keys = Object.keys(rows[0]);
console.log(`| ${keys.join(' | ')} |`);
console.log(`|${keys.map(() => '---').join('|')}|`);
for (const r of rows) console.log(`| ${keys.map((k) => r[k]).join(' | ')} |`);
if (retried) console.log(`${retried} retries: the server had closed a reused connection before the request`);
