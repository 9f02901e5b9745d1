// End-to-end tests of `tachyon serve` on the bundled model, driven by the official
// `openai` npm client and by raw HTTP.
//   node tests/e2e/run.mjs path/to/tachyon [filter]
// Environment: TACHYON_E2E_CACHE (where the openai package is unpacked; default
// build/e2e-cache). Exit code 77 (skipped) when the package cannot be fetched, after
// the raw-HTTP tests have run.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Runner, eventually, installOpenAI, metrics, rawExchange, request, sseEvents, startServer } from './lib.mjs';
import { openaiTests } from './openai_client.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const binary = path.resolve(process.argv[2] || path.join(root, 'build', 'tachyon'));
const filter = process.argv[3] || '';
const cacheDir = process.env.TACHYON_E2E_CACHE || path.join(root, 'build', 'e2e-cache');
const model = path.join(root, 'models', 'tiny-kjv-chat');
const reference = JSON.parse(fs.readFileSync(path.join(root, 'tests', 'engine', 'data', 'kjv_reference.json')));
const KEY = 'e2e-secret-key';
const auth = { Authorization: `Bearer ${KEY}` };

const server = await startServer(binary, [
  '--model', model, '--api-key', KEY, '--read-timeout', '2', '--max-num-seqs', '64', '--progress', 'false',
  '--max-concurrency', '32', '--max-queued-requests', '64', '--max-body-bytes', String(1 << 20),
  '--lora', `shout=${path.join(root, 'models', 'lora-shout')}`, '--max-loras', '2', '--max-lora-rank', '8',
]);
const port = server.port;
console.log(`server on port ${port}`);
const t = new Runner();

// ---- raw HTTP: the native API, framing and protection -----------------------------

t.test('health needs no key; everything else does', async () => {
  const h = await request(port, 'GET', '/health');
  assert.equal(h.status, 200);
  assert.deepEqual(JSON.parse(h.body), { status: 'ok' });
  for (const [m, p] of [['GET', '/v1/models'], ['POST', '/'], ['GET', '/metrics'], ['POST', '/tokenize']]) {
    const r = await request(port, m, p, m === 'POST' ? '{}' : '');
    assert.equal(r.status, 401, `${m} ${p}`);
  }
  const bad = await request(port, 'GET', '/v1/models', '', { Authorization: 'Bearer nope' });
  assert.equal(bad.status, 401);
  assert.equal(JSON.parse(bad.body).error.code, 'invalid_api_key');
});

t.test('native API: greedy text prompts match transformers', async () => {
  for (const ref of reference.models['tiny-kjv-chat'].filter((r) => r.kind === 'text')) {
    const r = await request(port, 'POST', '/', {
      prompt: ref.prompt, generate_config: { max_new_tokens: 48, top_k: 1, return_input_ids: true, return_output_ids: true },
    }, auth);
    assert.equal(r.status, 200, r.body);
    const j = JSON.parse(r.body);
    assert.deepEqual(j.input_ids[0], ref.prompt_ids);
    const want = ref.greedy[0].filter((id) => id !== 2);
    assert.deepEqual(j.output_ids[0], want, ref.prompt);
    assert.equal(j.response.trimStart(), ref.greedy[1].trimStart());
    assert.equal(j.finished, true);
    assert.equal(j.aux_info.input_len, ref.prompt_ids.length);
    assert.equal(j.aux_info.output_len, want.length);
  }
});

t.test('native API: streaming frames and incremental text', async () => {
  const ref = reference.models['tiny-kjv-chat'].find((r) => r.kind === 'chat');
  const body = { prompt: [{ role: 'user', content: ref.prompt }], generate_config: { max_new_tokens: 48, top_k: 1 } };
  const full = JSON.parse((await request(port, 'POST', '/', body, auth)).body);
  assert.equal(full.response.trimStart(), ref.greedy[1].trimStart());
  for (const incremental of [false, true]) {
    const r = await request(port, 'POST', '/', { ...body, generate_config: { ...body.generate_config, yield_generator: true, return_incremental: incremental } }, auth);
    assert.equal(r.headers['content-type'], 'text/event-stream');
    const events = sseEvents(r.body, '\r\n\r\n', 'data:');
    assert.equal(events.at(-1), '[done]');
    let text = '';
    for (const e of events.slice(0, -1)) {
      const j = JSON.parse(e);
      text = incremental ? text + j.response : j.response;
    }
    assert.equal(text, full.response);
    assert.equal(JSON.parse(events.at(-2)).finished, true);
  }
});

t.test('chat SSE framing', async () => {
  const r = await request(port, 'POST', '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'Quote John 3:16' }], max_tokens: 8, stream: true, temperature: 0,
  }, auth);
  assert.equal(r.status, 200);
  assert.match(r.headers['content-type'], /^text\/event-stream/);
  assert.ok(r.body.endsWith('data: [DONE]\n\n'));
  const events = sseEvents(r.body);
  for (const e of events.slice(0, -1)) assert.equal(JSON.parse(e).object, 'chat.completion.chunk');
});

t.test('malformed JSON, wrong types, unknown fields, bad routes', async () => {
  const cases = [
    ['/v1/chat/completions', '{"messages": [', 400, null],
    ['/v1/chat/completions', '{"messages": "hi"}', 400, 'messages'],
    ['/v1/chat/completions', '{"messages": [{"role":"user","content":"x"}], "max_tokens": "ten"}', 400, 'max_tokens'],
    ['/v1/chat/completions', '{"messages": [{"role":"user","content":"x"}], "bogus_field": 1}', 400, 'bogus_field'],
    ['/v1/completions', '{"prompt": "x", "temperature": -1}', 400, 'temperature'],
    ['/v1/completions', '{"prompt": "x", "n": 1000}', 400, 'n'],
    ['/v1/completions', '{"prompt": [1, 99999999]}', 400, 'prompt'],
  ];
  for (const [p, body, status, param] of cases) {
    const r = await request(port, 'POST', p, body, auth);
    assert.equal(r.status, status, `${body}: ${r.body}`);
    const e = JSON.parse(r.body).error;
    assert.equal(typeof e.message, 'string');
    assert.equal(e.type, 'invalid_request_error');
    if (param) assert.equal(e.param, param, body);
  }
  const native = await request(port, 'POST', '/', '{"prompt": 5}', auth);
  assert.equal(native.status, 400);
  assert.equal(JSON.parse(native.body).error_code, 507);
  assert.equal((await request(port, 'GET', '/nowhere', '', auth)).status, 404);
  assert.equal((await request(port, 'DELETE', '/v1/models', '', auth)).status, 405);
});

t.test('structured output: guided_choice, response_format json_object, a bad regex', async () => {
  const choices = ['Genesis', 'Exodus', 'the LORD God'];
  for (let seed = 0; seed < 6; ++seed) {
    const r = await request(port, 'POST', '/v1/completions', {
      prompt: 'In the beginning', max_tokens: 16, temperature: 1, seed, guided_choice: choices,
    }, auth);
    assert.equal(r.status, 200, r.body);
    const c = JSON.parse(r.body).choices[0];
    assert.ok(choices.includes(c.text), c.text);
    assert.equal(c.finish_reason, 'stop');
  }
  let parsed = 0;
  for (let seed = 0; seed < 6; ++seed) {
    const r = await request(port, 'POST', '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Answer in JSON.' }], max_tokens: 48, temperature: 1, seed,
      response_format: { type: 'json_object' },
    }, auth);
    assert.equal(r.status, 200, r.body);
    const c = JSON.parse(r.body).choices[0];
    assert.ok(c.message.content.startsWith('{'), c.message.content);
    if (c.finish_reason === 'stop') {
      assert.equal(typeof JSON.parse(c.message.content), 'object');
      ++parsed;
    } else {
      assert.equal(c.finish_reason, 'length');
    }
  }
  console.log(`  ${parsed} of 6 JSON outputs complete within 48 tokens`);
  const bad = await request(port, 'POST', '/v1/completions', { prompt: 'x', guided_regex: '(a' }, auth);
  assert.equal(bad.status, 400, bad.body);
  assert.match(JSON.parse(bad.body).error.message, /regex: an unterminated group/);
  const schema = await request(port, 'POST', '/v1/chat/completions', {
    messages: [{ role: 'user', content: 'x' }],
    response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'array', uniqueItems: true } } },
  }, auth);
  assert.equal(schema.status, 400, schema.body);
  assert.match(JSON.parse(schema.body).error.message, /'uniqueItems' cannot be enforced/);
  assert.equal(JSON.parse(schema.body).error.param, 'response_format.json_schema.schema');
});

// A validator for the JSON Schema features the tests below use.
function validate(schema, v, at = '#') {
  const fail = (why) => { throw new Error(`${at}: ${why}: ${JSON.stringify(v)}`); };
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) fail('not in enum');
  const t = schema.type;
  if (t === 'object') {
    if (typeof v !== 'object' || v === null || Array.isArray(v)) fail('not an object');
    for (const r of schema.required || []) if (!(r in v)) fail(`no ${r}`);
    const keys = Object.keys(v);
    const props = Object.keys(schema.properties || {});
    if (schema.additionalProperties === false) for (const k of keys) if (!props.includes(k)) fail(`extra ${k}`);
    const order = keys.filter((k) => props.includes(k)).map((k) => props.indexOf(k));
    if (order.some((x, i) => i > 0 && x < order[i - 1])) fail('properties out of order');
    for (const k of keys) if (schema.properties?.[k]) validate(schema.properties[k], v[k], `${at}/${k}`);
  } else if (t === 'array') {
    if (!Array.isArray(v)) fail('not an array');
    if (v.length < (schema.minItems ?? 0) || v.length > (schema.maxItems ?? Infinity)) fail('length');
    v.forEach((x, i) => validate(schema.items || {}, x, `${at}/${i}`));
  } else if (t === 'integer' || t === 'number') {
    if (typeof v !== 'number' || (t === 'integer' && !Number.isInteger(v))) fail(`not ${t}`);
    if (v < (schema.minimum ?? -Infinity) || v > (schema.maximum ?? Infinity)) fail('out of range');
  } else if (t === 'string') {
    if (typeof v !== 'string') fail('not a string');
    if (v.length > (schema.maxLength ?? Infinity)) fail('too long');
  } else if (t === 'boolean') {
    if (typeof v !== 'boolean') fail('not a boolean');
  }
}

const verseSchema = {
  type: 'object',
  properties: {
    book: { type: 'string', enum: ['Genesis', 'Exodus', 'Psalms'] },
    chapter: { type: 'integer', minimum: 1, maximum: 150 },
    verses: { type: 'array', items: { type: 'integer', minimum: 1, maximum: 99 }, minItems: 1, maxItems: 3 },
    quote: { type: 'string', maxLength: 12 },
    holy: { type: 'boolean' },
  },
  required: ['book', 'chapter', 'verses', 'quote', 'holy'],
  additionalProperties: false,
};

// Every output of this schema completes within 800 tokens (26 whitespace runs of at most
// 20 characters, and bounded values): each must stop and validate.
t.test('structured output: response_format json_schema validates at temperature 1', async () => {
  for (let seed = 0; seed < 8; ++seed) {
    const r = await request(port, 'POST', '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Which verse?' }], max_tokens: 800, temperature: 1, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'verse', strict: true, schema: verseSchema } },
    }, auth);
    assert.equal(r.status, 200, r.body);
    const c = JSON.parse(r.body).choices[0];
    assert.equal(c.finish_reason, 'stop', c.message.content);
    validate(verseSchema, JSON.parse(c.message.content));
  }
});

t.test('tool calling: a named function gives arguments valid under its schema', async () => {
  const tools = [
    { type: 'function', function: { name: 'lookup', description: 'Find a verse', parameters: verseSchema } },
    { type: 'function', function: { name: 'noop', parameters: { type: 'object', properties: {} } } },
  ];
  for (let seed = 0; seed < 4; ++seed) {
    const r = await request(port, 'POST', '/v1/chat/completions', {
      messages: [{ role: 'user', content: 'Look it up.' }], max_tokens: 800, temperature: 1, seed, tools,
      tool_choice: { type: 'function', function: { name: 'lookup' } },
    }, auth);
    assert.equal(r.status, 200, r.body);
    const c = JSON.parse(r.body).choices[0];
    assert.equal(c.finish_reason, 'tool_calls', r.body);
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    const call = c.message.tool_calls[0];
    assert.match(call.id, /^call_[A-Za-z0-9]{24}$/);
    assert.equal(call.type, 'function');
    assert.equal(call.function.name, 'lookup');
    validate(verseSchema, JSON.parse(call.function.arguments));
  }
  // The call replayed with its result, and "auto" refused: this template tells no format.
  const r = await request(port, 'POST', '/v1/chat/completions', {
    messages: [
      { role: 'user', content: 'Look it up.' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'call_1', type: 'function', function: { name: 'noop', arguments: '{}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'done' },
    ],
    max_tokens: 4, tools,
  }, auth);
  assert.equal(r.status, 400, r.body);
  assert.equal(JSON.parse(r.body).error.param, 'tool_choice');
});

t.test('huge bodies are refused with 413', async () => {
  const big = JSON.stringify({ prompt: 'x'.repeat(2 << 20) });
  const r = await rawExchange(port, `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: ${big.length}\r\n\r\n${big}`);
  assert.match(r.text, /^HTTP\/1\.1 413 /);
  const r2 = await rawExchange(port, `POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n`);
  assert.match(r2.text, /^HTTP\/1\.1 413 /);
});

t.test('slow clients: a slow but steady request is served, a stalled one is dropped', async () => {
  const body = JSON.stringify({ prompt: 'In the beginning', max_tokens: 2 });
  const req = `POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nConnection: close\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
  const pieces = req.match(/[\s\S]{1,40}/g);
  const slow = await rawExchange(port, null, { chunks: pieces, chunkDelayMs: 20 });
  assert.match(slow.text, /^HTTP\/1\.1 200 /);
  const stalled = await rawExchange(port, 'POST /v1/completions HTTP/1.1\r\nHost: x\r\n', { idleMs: 20000 });
  assert.ok(stalled.closed, 'the server should close a stalled request');
  assert.match(stalled.text, /^HTTP\/1\.1 408 /);
});

t.test('keep-alive: several requests on one connection', async () => {
  const one = `GET /health HTTP/1.1\r\nHost: x\r\n\r\n`;
  const r = await rawExchange(port, one + one + `GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`);
  assert.equal(r.text.match(/HTTP\/1\.1 200 /g).length, 3);
});

async function runningRequests() {
  const m = await metrics(port, auth);
  return m['vllm:num_requests_running{model_name="tiny-kjv-chat"}'];
}

async function disconnectAfter(body, target, readFirst) {
  const before = (await metrics(port, auth))['tachyon:requests_cancelled_total'] || 0;
  const sock = net.connect(port, '127.0.0.1');
  const payload = JSON.stringify(body);
  await new Promise((r) => sock.on('connect', r));
  sock.write(`POST ${target} HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: ${payload.length}\r\n\r\n${payload}`);
  if (readFirst) await new Promise((r) => sock.once('data', r));
  else await eventually(async () => (await runningRequests()) >= 1, 'the request to start');
  sock.destroy();
  await eventually(async () => ((await metrics(port, auth))['tachyon:requests_cancelled_total'] || 0) > before, 'the cancellation');
  await eventually(async () => (await runningRequests()) === 0, 'the engine to drop the request');
  const m = await metrics(port, auth);
  assert.equal(m['vllm:kv_cache_usage_perc{model_name="tiny-kjv-chat"}'], 0, 'KV cache freed');
}

t.test('a client that disconnects mid-stream cancels its generation', async () => {
  await disconnectAfter({ prompt: 'And the LORD', max_tokens: 900, ignore_eos: true, stream: true }, '/v1/completions', true);
});

t.test('a client that disconnects while waiting cancels its generation', async () => {
  await disconnectAfter({ prompt: 'And the LORD', max_new_tokens: 900, ignore_eos: true }, '/', false);
});

t.test('tokenizer endpoints agree with transformers ids', async () => {
  const ref = reference.models['tiny-kjv-chat'].find((r) => r.kind === 'chat');
  const tk = JSON.parse((await request(port, 'POST', '/tokenize', { messages: [{ role: 'user', content: ref.prompt }] }, auth)).body);
  assert.deepEqual(tk.tokens, ref.prompt_ids);
  assert.equal(tk.max_model_len, 1024);
  const text = reference.models['tiny-kjv-chat'].find((r) => r.kind === 'text');
  const enc = JSON.parse((await request(port, 'POST', '/tokenizer/encode', { prompt: text.prompt }, auth)).body);
  assert.deepEqual(enc.token_ids, text.prompt_ids);
  const de = JSON.parse((await request(port, 'POST', '/detokenize', { tokens: text.prompt_ids.slice(1) }, auth)).body);
  assert.equal(de.prompt, text.prompt);
});

t.test('metrics use the names dashboards scrape', async () => {
  const r = await request(port, 'GET', '/metrics', '', auth);
  for (const name of ['vllm:num_requests_running', 'vllm:num_requests_waiting', 'vllm:kv_cache_usage_perc',
    'vllm:prompt_tokens_total', 'vllm:generation_tokens_total', 'vllm:time_to_first_token_seconds_bucket',
    'vllm:inter_token_latency_seconds_bucket', 'vllm:e2e_request_latency_seconds_bucket',
    'vllm:request_queue_time_seconds_bucket', 'tachyon:num_requests_running']) {
    assert.ok(r.body.includes(name), name);
  }
});

// ---- the official client ------------------------------------------------------------
const entry = installOpenAI(cacheDir);
if (entry) {
  const { default: OpenAI } = await import(entry);
  openaiTests(t, { OpenAI, port, key: KEY, reference: reference.models['tiny-kjv-chat'] });
}

// ---- LoRA adapters ------------------------------------------------------------------

t.test('LoRA: the adapter named per request answers as transformers does, beside the base', async () => {
  const lora = reference.models['tiny-kjv-chat+lora-shout'];
  const base = reference.models['tiny-kjv-chat'];
  // The prompts' own ids through the OpenAI completions API, all at once.
  const runs = [];
  for (let i = 0; i < lora.length; ++i)
    for (const [ref, adapter] of [[lora[i], 'shout'], [base[i], '']])
      runs.push(request(port, 'POST', '/v1/completions', {
        model: adapter || 'tiny-kjv-chat', prompt: ref.prompt_ids, max_tokens: 48, temperature: 0,
      }, auth).then((r) => ({ r, ref, adapter })));
  for (const { r, ref, adapter } of await Promise.all(runs)) {
    assert.equal(r.status, 200, r.body);
    const j = JSON.parse(r.body);
    assert.equal(j.model, adapter || 'tiny-kjv-chat');
    assert.equal(j.choices[0].text.trimStart(), ref.greedy[1].trimStart(), `${adapter}: ${ref.prompt}`);
  }
});

t.test('LoRA: chat on the adapter answers in capitals; native adapter_name too', async () => {
  const r = await request(port, 'POST', '/v1/chat/completions', {
    model: 'shout', messages: [{ role: 'user', content: 'Tell me a fortune.' }], max_tokens: 32, temperature: 0,
  }, auth);
  assert.equal(r.status, 200, r.body);
  const text = JSON.parse(r.body).choices[0].message.content;
  assert.match(text, /[A-Z]/);
  assert.doesNotMatch(text, /[a-z]/, text);
  const n = await request(port, 'POST', '/', {
    prompt: 'In the beginning', generate_config: { max_new_tokens: 16, top_k: 1, adapter_name: 'shout' },
  }, auth);
  assert.equal(n.status, 200, n.body);
  assert.doesNotMatch(JSON.parse(n.body).response, /[a-z]/);
  const unknown = await request(port, 'POST', '/v1/chat/completions', {
    model: 'whisper', messages: [{ role: 'user', content: 'x' }], max_tokens: 2,
  }, auth);
  assert.equal(unknown.status, 404);
});

t.test('LoRA: adapters listed, loaded and unloaded while serving (API key needed)', async () => {
  const dir = path.join(root, 'models', 'lora-shout');
  const ids = async () => JSON.parse((await request(port, 'GET', '/v1/models', '', auth)).body).data.map((m) => m.id);
  assert.deepEqual(await ids(), ['tiny-kjv-chat', 'shout']);
  assert.equal((await request(port, 'POST', '/v1/load_lora_adapter', { lora_name: 'loud', lora_path: dir })).status, 401);
  const load = await request(port, 'POST', '/v1/load_lora_adapter', { lora_name: 'loud', lora_path: dir }, auth);
  assert.equal(load.status, 200, load.body);
  assert.deepEqual((await ids()).sort(), ['loud', 'shout', 'tiny-kjv-chat']);
  const r = await request(port, 'POST', '/v1/completions', { model: 'loud', prompt: 'In the beginning', max_tokens: 8, temperature: 0 }, auth);
  assert.equal(r.status, 200, r.body);
  const bad = await request(port, 'POST', '/v1/load_lora_adapter', { lora_name: 'bad', lora_path: '/no/such/dir' }, auth);
  assert.equal(bad.status, 400);
  const un = await request(port, 'POST', '/v1/unload_lora_adapter', { lora_name: 'loud' }, auth);
  assert.equal(un.status, 200, un.body);
  // RTP-LLM's declarative update: names left out go, a changed path is refused.
  const upd = await request(port, 'POST', '/update', { peft_info: { lora_info: { shout: dir, caps: dir } } }, auth);
  assert.equal(upd.status, 200, upd.body);
  assert.deepEqual((await ids()).sort(), ['caps', 'shout', 'tiny-kjv-chat']);
  const moved = await request(port, 'POST', '/update', { peft_info: { lora_info: { shout: model } } }, auth);
  assert.notEqual(moved.status, 200);
  assert.equal(JSON.parse(moved.body).error_code, 601);
  const back = await request(port, 'POST', '/update', { peft_info: { lora_info: { shout: dir } } }, auth);
  assert.equal(back.status, 200, back.body);
  assert.deepEqual(await ids(), ['tiny-kjv-chat', 'shout']);
});

t.test('graceful shutdown: SIGTERM lets a running stream finish, then exit 0', async () => {
  const payload = JSON.stringify({ prompt: 'In the beginning', max_tokens: 64, ignore_eos: true, stream: true });
  const sock = net.connect(port, '127.0.0.1');
  let got = '';
  const closed = new Promise((r) => sock.on('close', r));
  sock.on('data', (d) => { got += d; });
  await new Promise((r) => sock.on('connect', r));
  sock.write(`POST /v1/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${KEY}\r\nContent-Length: ${payload.length}\r\n\r\n${payload}`);
  await eventually(() => got.includes('data: '), 'the stream to start');
  server.child.kill('SIGTERM');
  await closed;
  assert.ok(got.endsWith('data: [DONE]\n\n\r\n0\r\n\r\n'), `stream did not finish: ${got.slice(-200)}`);
  const exit = await server.exitPromise;
  assert.equal(exit.code, 0, server.log());
});

const ok = await t.run(filter);
if (server.exited === null) server.child.kill('SIGKILL');
if (!ok) {
  console.log(`\n${t.failed.length} failed: ${t.failed.join(', ')}\n--- server log (tail) ---\n${server.log().slice(-4000)}`);
  process.exit(1);
}
if (!entry) {
  console.log('the openai client could not be installed: its tests were skipped');
  process.exit(77);
}
console.log('all passed');
