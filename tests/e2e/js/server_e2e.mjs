// End-to-end test of `dsv4 serve` with real clients: the official `openai`
// npm package and curl, against the real binary on a free loopback port with
// a tiny random checkpoint (made here by `dsv4 make-tiny`).
//
//   node server_e2e.mjs <path to dsv4_scripted_serve> <scratch dir>
//
// The binary is the test build of the CLI (every dsv4 command, plus one
// TEST-ONLY flag). A random model never emits reasoning or tool calls, so a
// second server runs with `--test-script-ids`, which replays scripted token
// ids, and the exact JSON / SSE the client receives is asserted.
import assert from 'node:assert/strict';
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';

const [dsv4, scratch] = process.argv.slice(2);
if (!dsv4 || !scratch) {
  console.error('usage: node server_e2e.mjs <dsv4> <scratch dir>');
  process.exit(2);
}
fs.mkdirSync(scratch, { recursive: true });
const model = path.join(scratch, 'tiny');
execFileSync(dsv4, ['make-tiny', '--preset', 'tiny', '--seed', '3', '--out', model, '--force'],
             { stdio: 'inherit' });

const API_KEY = 'e2e-key';
let failures = 0;
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures++;
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

// Starts `dsv4 serve` on port 0 and resolves once it prints its address.
function startServer(extra, env = {}) {
  return new Promise((resolve, reject) => {
    // --generation-config vllm: requests without a temperature stay greedy
    // (make-tiny's generation_config.json asks for 1.0; docs/sampling.md).
    const args = ['serve', '--model', model, '--port', '0', '--kv-cache-memory', '64M',
                  '--max-model-len', '1024', '--max-num-seqs', '16', '--threads', '2',
                  '--generation-config', 'vllm', ...extra];
    const proc = spawn(dsv4, args, { env: { ...process.env, ...env } });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no startup: ${out}`)), 60000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/Listening on http:\/\/([\d.]+):(\d+)[\s\S]*Application startup complete/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, base: `http://${m[1]}:${m[2]}`, output: () => out });
      }
    });
    proc.stderr.on('data', (d) => { out += d; });
    proc.on('exit', (code) => reject(new Error(`server exited ${code}: ${out}`)));
  });
}

function stopServer(server) {
  return new Promise((resolve) => {
    server.proc.removeAllListeners('exit');
    server.proc.on('exit', (code, signal) => resolve({ code, signal }));
    server.proc.kill('SIGTERM');
  });
}

function curl(args) {
  // -s silent, -w status on the last line.
  const out = execFileSync('curl', ['-s', '-w', '\n%{http_code}', ...args], { encoding: 'utf8' });
  const cut = out.lastIndexOf('\n');
  return { status: Number(out.slice(cut + 1)), body: out.slice(0, cut) };
}

async function metric(base, name) {
  const text = await (await fetch(`${base}/metrics`)).text();
  const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
  return line === undefined ? undefined : Number(line.split(' ').pop());
}

async function waitFor(pred, ms = 10000) {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    if (await pred()) return true;
    await new Promise((r) => setTimeout(r, 20));
  }
  return false;
}

const messages = (text) => [{ role: 'user', content: text }];

async function plainServerTests() {
  // MTP with K = 2: greedy output must not change, and the speculative
  // decoding counters must move.
  const server = await startServer(['--api-key', API_KEY, '--max-request-bytes', '65536',
                                    '--speculative-config', '{"method":"mtp","num_speculative_tokens":2}']);
  const { base } = server;
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: API_KEY, maxRetries: 0 });

  await check('health and models', async () => {
    assert.equal(curl([`${base}/health`]).status, 200);
    const models = await client.models.list();
    assert.deepEqual(models.data.map((m) => m.id), ['tiny']);
  });

  let greedy;
  await check('chat: non-streaming, usage, length', async () => {
    const r = await client.chat.completions.create({ model: 'tiny', messages: messages('Hello'),
                                                     max_tokens: 12 });
    assert.equal(r.object, 'chat.completion');
    assert.match(r.id, /^chatcmpl-/);
    assert.equal(r.choices[0].message.role, 'assistant');
    assert.equal(typeof r.choices[0].message.content, 'string');
    assert.equal(r.choices[0].finish_reason, 'length');
    assert.equal(r.usage.completion_tokens, 12);
    const tok = await (await fetch(`${base}/tokenize`, {
      method: 'POST', headers: { Authorization: `Bearer ${API_KEY}` },
      body: JSON.stringify({ messages: messages('Hello') }) })).json();
    assert.equal(r.usage.prompt_tokens, tok.count);
    assert.equal(r.usage.total_tokens, tok.count + 12);
    greedy = r.choices[0].message.content;
  });

  await check('chat: streaming equals non-streaming; role first, usage, [DONE]', async () => {
    const stream = await client.chat.completions.create({
      model: 'tiny', messages: messages('Hello'), max_tokens: 12, stream: true,
      stream_options: { include_usage: true } });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    assert.equal(chunks[0].choices[0].delta.role, 'assistant');
    const text = chunks.map((c) => c.choices[0]?.delta?.content ?? '').join('');
    assert.equal(text, greedy);
    const fin = chunks[chunks.length - 2];
    assert.equal(fin.choices[0].finish_reason, 'length');
    const usage = chunks[chunks.length - 1];
    assert.deepEqual(usage.choices, []);
    assert.equal(usage.usage.completion_tokens, 12);
    // Raw SSE over curl ends with [DONE].
    const raw = curl(['-N', '-H', `Authorization: Bearer ${API_KEY}`, `${base}/v1/chat/completions`,
                      '-d', JSON.stringify({ messages: messages('Hello'), max_tokens: 3, stream: true })]);
    assert.equal(raw.status, 200);
    assert.ok(raw.body.trimEnd().endsWith('data: [DONE]'), raw.body);
  });

  await check('completions: string, list of strings, token ids, streaming, n', async () => {
    const a = await client.completions.create({ model: 'tiny', prompt: 'The cat', max_tokens: 6 });
    assert.equal(a.object, 'text_completion');
    assert.equal(a.usage.completion_tokens, 6);
    const b = await client.completions.create({ model: 'tiny', prompt: ['The cat', 'A dog'],
                                                max_tokens: 6 });
    assert.equal(b.choices.length, 2);
    assert.equal(b.choices[0].text, a.choices[0].text);
    const ids = (await (await fetch(`${base}/tokenize`, { method: 'POST',
      headers: { Authorization: `Bearer ${API_KEY}` },
      body: JSON.stringify({ prompt: 'The cat' }) })).json()).tokens;
    const c = await client.completions.create({ model: 'tiny', prompt: ids, max_tokens: 6 });
    assert.equal(c.choices[0].text, a.choices[0].text);
    const s = await client.completions.create({ model: 'tiny', prompt: 'The cat', max_tokens: 6,
                                                stream: true });
    let text = '';
    for await (const chunk of s) text += chunk.choices[0]?.text ?? '';
    assert.equal(text, a.choices[0].text);
    const n = await client.completions.create({ model: 'tiny', prompt: 'The cat', max_tokens: 6, n: 3 });
    assert.deepEqual(n.choices.map((c) => [c.index, c.text]),
                     [0, 1, 2].map((i) => [i, a.choices[0].text]));  // greedy: all equal
    // Seeded sampling with every sampling parameter: reproducible, choices
    // draw from distinct streams.
    const sampled = { model: 'tiny', prompt: 'The cat', max_tokens: 8, n: 2, temperature: 1.0,
                      top_p: 0.95, seed: 11, presence_penalty: 0.3, frequency_penalty: 0.2 };
    const s1 = await client.completions.create(sampled);
    const s2 = await client.completions.create(sampled);
    assert.deepEqual(s1.choices.map((c) => c.text), s2.choices.map((c) => c.text));
    assert.notEqual(s1.choices[0].text, s1.choices[1].text);
    const lp = await client.chat.completions.create({ model: 'tiny', messages: messages('Hi'),
      max_tokens: 3, logprobs: true, top_logprobs: 2 });
    assert.equal(lp.choices[0].logprobs.content.length, 3);
    assert.equal(lp.choices[0].logprobs.content[0].top_logprobs.length, 2);
  });

  await check('logit_bias: +100 forces a token, an id outside the vocabulary is a 400', async () => {
    const h = { Authorization: `Bearer ${API_KEY}` };
    const post = async (path, body) => (await fetch(`${base}${path}`, { method: 'POST', headers: h,
                                                                        body: JSON.stringify(body) })).json();
    const [id] = (await post('/tokenize', { prompt: ' cat' })).tokens.slice(-1);
    const forced = await client.completions.create({ model: 'tiny', prompt: 'The dog', max_tokens: 5,
                                                     logit_bias: { [id]: 100 } });
    const want = (await post('/detokenize', { tokens: [id, id, id, id, id] })).prompt;
    assert.equal(forced.choices[0].text, want);
    await assert.rejects(client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 1,
                                                     logit_bias: { 99999999: 5 } }),
                         (e) => e.status === 400 && /logit_bias/.test(e.message));
  });

  await check('tokenize / detokenize round trip', async () => {
    const h = { Authorization: `Bearer ${API_KEY}` };
    const t = await (await fetch(`${base}/tokenize`, { method: 'POST', headers: h,
                                                       body: JSON.stringify({ prompt: 'Hello world' }) })).json();
    const d = await (await fetch(`${base}/detokenize`, { method: 'POST', headers: h,
                                                         body: JSON.stringify({ tokens: t.tokens }) })).json();
    assert.equal(d.prompt, 'Hello world');
  });

  await check('errors: OpenAI shape and status for every class', async () => {
    await assert.rejects(client.chat.completions.create({ model: 'gpt-4', messages: messages('x') }),
                         (e) => e.status === 400 && e.error?.param === 'model');
    await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: messages('x'),
                                                          max_tokens: 1100 }),
                         (e) => e.status === 400 && /maximum context length/.test(e.message));
    await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: messages('x'),
      tools: [{ type: 'function', function: { name: 'f' } }], tool_choice: 'required' }),
                         (e) => e.status === 400 && e.error?.param === 'tool_choice');
    await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: [{ role: 'tool', content: 'x' }] }),
                         (e) => e.status === 400);
    const bad = new OpenAI({ baseURL: `${base}/v1`, apiKey: 'wrong', maxRetries: 0 });
    await assert.rejects(bad.models.list(), (e) => e.status === 401);
    const auth = ['-H', `Authorization: Bearer ${API_KEY}`, '-H', 'Content-Type: application/json'];
    for (const [args, status] of [
      [[`${base}/v1/chat/completions`, '-d', '{bad json'], 400],
      [[`${base}/v1/chat/completions`, '-d', '{"messages":[{"role":"user","content":"x"}],"top_p":"a"}'], 400],
      [[`${base}/v1/completions`, '-d', '{"prompt":"x","bogus":1}'], 400],
      [[`${base}/v1/nowhere`], 404],
      [[`${base}/v1/completions`, '-d', JSON.stringify({ prompt: 'x'.repeat(70000) })], 413],
    ]) {
      const r = curl([...auth, ...args]);
      assert.equal(r.status, status, `${args[0]} -> ${r.status} ${r.body}`);
      const e = JSON.parse(r.body).error;
      assert.ok(e && 'message' in e && 'type' in e && 'param' in e && 'code' in e, r.body);
    }
  });

  await check('client disconnect aborts the request and its pages return', async () => {
    const before = await metric(base, 'vllm:request_success_total{model_name="tiny",engine="0",finished_reason="abort"}');
    const ctl = new AbortController();
    const stream = await client.chat.completions.create(
      { model: 'tiny', messages: messages('Go on'), max_tokens: 400, stream: true },
      { signal: ctl.signal });
    let n = 0;
    // openai-node ends the iteration quietly on abort.
    try {
      for await (const c of stream) {
        if (c && ++n === 3) {
          ctl.abort();
          break;
        }
      }
    } catch (e) {
      if (e.name !== 'AbortError' && !/abort/i.test(String(e))) throw e;
    }
    assert.equal(n, 3);
    assert.ok(await waitFor(async () => (await metric(base, 'vllm:num_requests_running')) === 0),
              'request still running after the client left');
    assert.equal(await metric(base, 'vllm:kv_cache_usage_perc'), 0);
    const after = await metric(base, 'vllm:request_success_total{model_name="tiny",engine="0",finished_reason="abort"}');
    assert.equal(after, before + 1);
    const gen = await metric(base, 'vllm:generation_tokens_total');
    assert.ok(gen < 400 + 200, `generated ${gen} tokens`);
  });

  await check('64 concurrent streaming clients equal sequential greedy runs; cache empty after', async () => {
    const prompts = Array.from({ length: 64 }, (_, i) => `Question number ${i}`);
    const sequential = [];
    for (const p of prompts) {
      const r = await client.chat.completions.create({ model: 'tiny', messages: messages(p), max_tokens: 10 });
      sequential.push(r.choices[0].message.content);
    }
    const concurrent = await Promise.all(prompts.map(async (p) => {
      const s = await client.chat.completions.create({ model: 'tiny', messages: messages(p),
                                                       max_tokens: 10, stream: true });
      let text = '';
      for await (const c of s) text += c.choices[0]?.delta?.content ?? '';
      return text;
    }));
    assert.deepEqual(concurrent, sequential);
    assert.ok(await waitFor(async () => (await metric(base, 'vllm:kv_cache_usage_perc')) === 0));
    assert.equal(await metric(base, 'vllm:num_requests_running'), 0);
  });

  await check('metrics: vLLM names', async () => {
    const text = (await fetch(`${base}/metrics`)).headers.get('content-type');
    assert.equal(text, 'text/plain; version=0.0.4');
    const body = await (await fetch(`${base}/metrics`)).text();
    for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
                        'vllm:prompt_tokens_total', 'vllm:generation_tokens_total', 'vllm:request_success_total',
                        'vllm:time_to_first_token_seconds_bucket', 'vllm:time_per_output_token_seconds_bucket',
                        'vllm:e2e_request_latency_seconds_count', 'vllm:spec_decode_num_drafts_total',
                        'vllm:spec_decode_num_draft_tokens_total', 'vllm:spec_decode_num_accepted_tokens_total',
                        'vllm:spec_decode_num_accepted_tokens_per_pos_total']) {
      assert.ok(body.includes(name), name);
    }
    assert.ok(await metric(base, 'vllm:spec_decode_num_drafts_total') > 0);
    const drafted = await metric(base, 'vllm:spec_decode_num_draft_tokens_total');
    const accepted = await metric(base, 'vllm:spec_decode_num_accepted_tokens_total');
    assert.ok(drafted > 0 && accepted >= 0 && accepted <= drafted, `${accepted}/${drafted}`);
    assert.ok(body.includes('vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name="tiny",engine="0",position="1"}'));
  });

  const exit = await stopServer(server);
  await check('SIGTERM: graceful exit 0', async () => {
    assert.equal(exit.code, 0, server.output());
    assert.match(server.output(), /dsv4 serve: stopped/);
  });
}

const TOOL_OUTPUT = 'Let me check.</think>Sure.\n\n<｜DSML｜tool_calls>\n' +
  '<｜DSML｜invoke name="get_weather">\n' +
  '<｜DSML｜parameter name="city" string="true">Paris</｜DSML｜parameter>\n' +
  '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n' +
  '</｜DSML｜invoke>\n</｜DSML｜tool_calls><｜end▁of▁sentence｜> after eos';
const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather',
  parameters: { type: 'object', properties: { city: { type: 'string' }, days: { type: 'integer' } } } } }];
const TOOL_REQUEST = { model: 'tiny', messages: messages('Weather in Paris?'), tools: TOOLS,
                       chat_template_kwargs: { enable_thinking: true }, max_tokens: 200 };

async function scriptedServerTests() {
  const script = path.join(scratch, 'script.jsonl');
  fs.writeFileSync(script, JSON.stringify(TOOL_OUTPUT) + '\n');
  const server = await startServer(['--test-script-ids', script], { DSV4_API_KEY: API_KEY });
  const { base } = server;
  const client = new OpenAI({ baseURL: `${base}/v1`, apiKey: API_KEY, maxRetries: 0 });
  const post = async (route, body) => (await fetch(`${base}${route}`, { method: 'POST',
    headers: { Authorization: `Bearer ${API_KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(body) })).json();
  const count = async (text) => (await post('/tokenize', { prompt: text })).count;
  const whole = await count(TOOL_OUTPUT.slice(0, TOOL_OUTPUT.indexOf(' after eos')));
  const reasoning = await count('Let me check.');
  const prompt = (await post('/tokenize', TOOL_REQUEST)).count;

  await check('scripted: reasoning + content + tool call, exact JSON', async () => {
    const r = await post('/v1/chat/completions', TOOL_REQUEST);
    const callId = r.choices?.[0]?.message?.tool_calls?.[0]?.id;
    assert.match(callId, /^call_[0-9a-f]{24}$/);
    assert.match(r.id, /^chatcmpl-[0-9a-f]{16}$/);
    assert.equal(typeof r.created, 'number');
    assert.deepEqual(r, {
      id: r.id, object: 'chat.completion', created: r.created, model: 'tiny',
      choices: [{ index: 0,
                  message: { role: 'assistant', content: 'Sure.', reasoning_content: 'Let me check.',
                             tool_calls: [{ id: callId, type: 'function',
                                            function: { name: 'get_weather',
                                                        arguments: '{"city": "Paris", "days": 3}' } }] },
                  logprobs: null, finish_reason: 'tool_calls' }],
      usage: { prompt_tokens: prompt, completion_tokens: whole, total_tokens: prompt + whole,
               prompt_tokens_details: { cached_tokens: 0 },
               completion_tokens_details: { reasoning_tokens: reasoning } } });
  });

  await check('scripted: streaming SSE chunks (role, reasoning, content, tool deltas, finish, usage, [DONE])', async () => {
    const stream = await client.chat.completions.create({ ...TOOL_REQUEST, stream: true,
                                                          stream_options: { include_usage: true } });
    const chunks = [];
    for await (const c of stream) chunks.push(c);
    const id = chunks[0].id;
    for (const c of chunks) {
      assert.deepEqual(Object.keys(c), ['id', 'object', 'created', 'model', 'choices', ...(c.usage ? ['usage'] : [])]);
      assert.equal(c.id, id);
      assert.equal(c.object, 'chat.completion.chunk');
    }
    assert.deepEqual(chunks[0].choices, [{ index: 0, delta: { role: 'assistant', content: '' },
                                           logprobs: null, finish_reason: null }]);
    let reasoningText = '', content = '', args = '', phase = 0;
    let header;
    for (const c of chunks.slice(1, -2)) {
      const d = c.choices[0].delta;
      assert.equal(c.choices[0].finish_reason, null);
      if (d.reasoning_content) { assert.equal(phase, 0); reasoningText += d.reasoning_content; }
      if (d.content) { assert.ok(phase <= 1); phase = 1; content += d.content; }
      if (d.tool_calls) {
        phase = 2;
        assert.equal(d.tool_calls.length, 1);
        const t = d.tool_calls[0];
        if (header === undefined) {
          header = t;
          assert.deepEqual(Object.keys(t), ['index', 'id', 'type', 'function']);
          assert.equal(t.index, 0);
          assert.match(t.id, /^call_/);
          assert.equal(t.type, 'function');
          assert.equal(t.function.name, 'get_weather');
        } else {
          assert.deepEqual(Object.keys(t), ['index', 'function']);
          assert.deepEqual(Object.keys(t.function), ['arguments']);
        }
        args += t.function.arguments;
      }
    }
    assert.equal(reasoningText, 'Let me check.');
    assert.equal(content, 'Sure.');
    assert.equal(args, '{"city": "Paris", "days": 3}');
    assert.deepEqual(chunks.at(-2).choices, [{ index: 0, delta: {}, logprobs: null, finish_reason: 'tool_calls' }]);
    assert.deepEqual(chunks.at(-1).choices, []);
    assert.deepEqual(chunks.at(-1).usage, { prompt_tokens: prompt, completion_tokens: whole,
      total_tokens: prompt + whole, prompt_tokens_details: { cached_tokens: 0 },
      completion_tokens_details: { reasoning_tokens: reasoning } });
  });

  await check('scripted: the client library accumulates the tool call', async () => {
    const r = await client.chat.completions.create(TOOL_REQUEST);
    assert.equal(r.choices[0].message.tool_calls[0].function.name, 'get_weather');
    assert.deepEqual(JSON.parse(r.choices[0].message.tool_calls[0].function.arguments), { city: 'Paris', days: 3 });
    // Round trip: the assistant turn (with reasoning_content) and the tool result go back in.
    const next = await client.chat.completions.create({ ...TOOL_REQUEST, messages: [
      ...TOOL_REQUEST.messages,
      { role: 'assistant', content: r.choices[0].message.content,
        reasoning_content: r.choices[0].message.reasoning_content,
        tool_calls: r.choices[0].message.tool_calls },
      { role: 'tool', tool_call_id: r.choices[0].message.tool_calls[0].id, content: '21 C' }] });
    assert.equal(next.choices[0].finish_reason, 'tool_calls');
  });

  await check('scripted: tool_choice none consumes the block; EOS honoured unless ignore_eos', async () => {
    const r = await client.chat.completions.create({ ...TOOL_REQUEST, tool_choice: 'none' });
    assert.equal(r.choices[0].message.tool_calls, undefined);
    assert.equal(r.choices[0].message.content, 'Sure.');
    assert.equal(r.choices[0].finish_reason, 'stop');
    const a = await client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 300 });
    assert.ok(!a.choices[0].text.includes('after eos'));
    assert.equal(a.choices[0].finish_reason, 'stop');
    const b = await client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 300, ignore_eos: true });
    assert.ok(b.choices[0].text.endsWith(' after eos'), b.choices[0].text);
  });

  const exit = await stopServer(server);
  await check('scripted server: SIGTERM exit 0', async () => assert.equal(exit.code, 0));
}

await plainServerTests();
await scriptedServerTests();
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
