// End-to-end test of the shipped model: `dsv4 serve` on models/dsv4-mini (no
// --model: the embedded default), driven by the official `openai` npm client.
// What a user of the default model relies on:
//   - a weather question with a weather tool gets a parsed tool_calls entry;
//   - thinking mode returns non-empty reasoning_content;
//   - greedy text is identical streamed and non-streamed (with MTP K = 1).
//
//   node mini_e2e.mjs <path to dsv4> <repository root>
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import OpenAI from 'openai';

const [dsv4, root] = process.argv.slice(2);
if (!dsv4 || !root) {
  console.error('usage: node mini_e2e.mjs <dsv4> <repository root>');
  process.exit(2);
}
if (!fs.existsSync(path.join(root, 'models', 'dsv4-mini', 'config.json'))) {
  console.error(`FAIL: ${root}/models/dsv4-mini is missing (the shipped default model)`);
  process.exit(1);
}

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

// Runs from the repository root without --model, so the default model is used.
function startServer() {
  return new Promise((resolve, reject) => {
    const args = ['serve', '--port', '0', '--kv-cache-memory', '64M', '--max-model-len', '2048',
                  '--max-num-seqs', '4', '--threads', '2',
                  '--speculative-config', '{"method":"mtp","num_speculative_tokens":1}'];
    const env = { ...process.env };
    delete env.DSV4_MODEL;
    const proc = spawn(dsv4, args, { cwd: root, env });
    let out = '';
    const timer = setTimeout(() => reject(new Error(`no startup: ${out}`)), 120000);
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

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'Get the current weather for a city',
    parameters: {
      type: 'object',
      properties: {
        location: { type: 'string', description: 'The city, e.g. Paris' },
        unit: { type: 'string', enum: ['celsius', 'fahrenheit'] },
      },
      required: ['location'],
    },
  },
};

const server = await startServer();
const client = new OpenAI({ baseURL: `${server.base}/v1`, apiKey: 'unused', maxRetries: 0 });

await check('the default model is dsv4-mini', async () => {
  const models = await client.models.list();
  assert.deepEqual(models.data.map((m) => m.id), ['dsv4-mini']);
});

await check('weather question with a weather tool: a parsed tool call', async () => {
  const r = await client.chat.completions.create({
    model: 'dsv4-mini', temperature: 0, max_tokens: 160, tools: [weatherTool],
    messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
  });
  const msg = r.choices[0].message;
  assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(msg));
  assert.ok(msg.tool_calls.length >= 1, JSON.stringify(msg));
  const call = msg.tool_calls[0];
  assert.equal(call.type, 'function');
  assert.equal(call.function.name, 'get_weather');
  const args = JSON.parse(call.function.arguments);
  assert.equal(typeof args, 'object', call.function.arguments);
  console.log(`     tool call: ${call.function.name}(${call.function.arguments})`);
});

await check('thinking mode: non-empty reasoning_content', async () => {
  const r = await client.chat.completions.create({
    model: 'dsv4-mini', temperature: 0, max_tokens: 160,
    chat_template_kwargs: { thinking: true },
    messages: [{ role: 'user', content: 'What is 17 plus 25?' }],
  });
  const msg = r.choices[0].message;
  assert.equal(typeof msg.reasoning_content, 'string', JSON.stringify(msg));
  assert.ok(msg.reasoning_content.trim().length > 0, JSON.stringify(msg));
  console.log(`     reasoning: ${JSON.stringify(msg.reasoning_content)}`);
  console.log(`     content:   ${JSON.stringify(msg.content)}`);
});

await check('greedy: streamed text equals non-streamed text', async () => {
  const body = { model: 'dsv4-mini', temperature: 0, max_tokens: 48,
                 messages: [{ role: 'user', content: 'Tell me about the Python language.' }] };
  const whole = await client.chat.completions.create(body);
  const stream = await client.chat.completions.create({ ...body, stream: true });
  let text = '';
  for await (const c of stream) text += c.choices[0]?.delta?.content ?? '';
  assert.ok(whole.choices[0].message.content.length > 0);
  assert.equal(text, whole.choices[0].message.content);
});

server.proc.removeAllListeners('exit');
server.proc.kill('SIGTERM');
console.log(failures ? `${failures} check(s) failed` : 'all checks passed');
process.exit(failures ? 1 : 0);
