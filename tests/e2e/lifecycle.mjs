// End-to-end checks of `tachyon serve`'s start and stop: what the start log says about the
// weights, /health answering while chat templates render, SIGTERM ending a server whose
// requests are still rendering, and task prompts given at start.
//   node tests/e2e/lifecycle.mjs path/to/tachyon
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { Runner, rawExchange, request, startServer } from './lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const binary = path.resolve(process.argv[2] || path.join(root, 'build', 'tachyon'));
const model = path.join(root, 'models', 'tiny-kjv-chat');
const t = new Runner();

// The bundled model with a chat template that takes a minute to render inside the
// interpreter's step and memory limits (each step scans a 50 MB string): only the
// deadline, a disconnect or shutdown stops it.
function slowTemplateModel() {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tachyon-slow-template-'));
  for (const f of fs.readdirSync(model)) fs.symlinkSync(path.join(model, f), path.join(dir, f));
  fs.writeFileSync(path.join(dir, 'chat_template.jinja'),
    "{% set s = 'x' * 50000000 %}{% for i in range(10000) %}{% if 'z' in s %}{% endif %}{% endfor %}" +
    '{% for m in messages %}{{ m.content }}{% endfor %}');
  return dir;
}

const chat = JSON.stringify({ messages: [{ role: 'user', content: 'hi' }], max_tokens: 2 });
const post = (port) =>
  rawExchange(port, `POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n` +
    `Content-Length: ${chat.length}\r\nConnection: close\r\n\r\n${chat}`, { idleMs: 60000 });

t.test('the start log gives the weights in bytes, not "0.0 MB / 0.0 MB"', async () => {
  const server = await startServer(binary, ['--model', model, '--progress', 'true']);
  try {
    const log = server.log();
    assert.ok(!log.includes('0.0 MB / 0.0 MB'), log);
    assert.match(log, /weights: [0-9.]+ MB in the checkpoint's files/);
  } finally {
    server.child.kill('SIGTERM');
    assert.equal((await server.exitPromise).code, 0);
  }
});

t.test('renders run off the HTTP threads; SIGTERM cancels them', async () => {
  const dir = slowTemplateModel();
  const server = await startServer(binary, [
    '--model', dir, '--progress', 'false', '--io-threads', '2', '--shutdown-timeout', '1',
    '--render-timeout', '120']);
  try {
    const renders = [post(server.port), post(server.port)];
    await new Promise((r) => setTimeout(r, 300));  // both are rendering now
    const t0 = Date.now();
    const h = await request(server.port, 'GET', '/health');
    assert.equal(h.status, 200);
    // Both HTTP threads would be busy rendering if renders ran there; the bound is loose
    // (two busy render threads share this machine's cores with the probe).
    assert.ok(Date.now() - t0 < 1000, `/health took ${Date.now() - t0} ms`);
    const stop = Date.now();
    server.child.kill('SIGTERM');
    const exit = await server.exitPromise;
    assert.equal(exit.code, 0, server.log());
    // The renders are cancelled at once: within --shutdown-timeout + 1 s.
    assert.ok(Date.now() - stop < 2000, `exit took ${Date.now() - stop} ms`);
    for (const r of await Promise.allSettled(renders))
      if (r.status === 'fulfilled' && r.value.text) assert.match(r.value.text, /^HTTP\/1.1 503/);
    assert.match(server.log(), /shutting down \(2 requests in flight\)/);
  } finally {
    if (!server.exited) server.child.kill('SIGKILL');
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

t.test('task prompts: tokenized and logged at start, put before the prompts that name them', async () => {
  const task = 'In the beginning God created the heaven and the earth.';
  // Without the prefix cache: the task prompt is computed with each request.
  const server = await startServer(binary, ['--model', model, '--progress', 'false', '--no-prefix-caching'], {
    env: { MULTI_TASK_PROMPT_STR: JSON.stringify([{ task_id: 1, prompt: task }]) },
  });
  try {
    assert.match(server.log(), /task prompt 1: 12 tokens, 0 pinned in the prefix cache/);
    const config = { max_new_tokens: 8, top_k: 1, return_input_ids: true };
    const whole = await request(server.port, 'POST', '/',
      JSON.stringify({ prompt: `${task} And God said`, generate_config: config }));
    const tasked = await request(server.port, 'POST', '/',
      JSON.stringify({ prompt: ' And God said', generate_config: { ...config, task_id: '1' } }));
    assert.equal(whole.status, 200, whole.body);
    assert.equal(tasked.status, 200, tasked.body);
    const w = JSON.parse(whole.body), k = JSON.parse(tasked.body);
    // The same ids reach the model: the same greedy text and log-probability.
    assert.equal(k.response, w.response);
    assert.deepEqual(k.aux_info.cum_log_probs, w.aux_info.cum_log_probs);
    assert.equal(k.aux_info.prefix_len, 12);
    assert.equal(k.aux_info.input_len, w.aux_info.input_len - 12);
    assert.deepEqual(k.input_ids[0], w.input_ids[0].slice(12));
    const c = await request(server.port, 'POST', '/v1/completions',
      JSON.stringify({ prompt: ' And God said', task_id: 1, max_tokens: 8, temperature: 0 }));
    assert.equal(c.status, 200, c.body);
    const cj = JSON.parse(c.body);
    assert.equal(cj.choices[0].text, w.response);
    assert.equal(cj.usage.prompt_tokens, w.aux_info.input_len);
    assert.equal(cj.usage.prompt_tokens_details.cached_tokens, 0);
    const bad = await request(server.port, 'POST', '/', JSON.stringify({ prompt: 'x', task_id: 2 }));
    assert.equal(bad.status, 400);
    assert.match(bad.body, /task_id 2 is unknown; the configured task ids are: 1/);
  } finally {
    server.child.kill('SIGTERM');
    assert.equal((await server.exitPromise).code, 0);
  }
});

t.test('prefix cache: a pinned task prompt and a repeated prompt are reused, and reported', async () => {
  const task = 'In the beginning God created the heaven and the earth. And the earth was without ' +
    'form, and void; and darkness was upon the face of the deep.';
  const server = await startServer(binary, ['--model', model, '--progress', 'false'], {
    env: { MULTI_TASK_PROMPT_STR: JSON.stringify([{ task_id: 'genesis', prompt: task }]) },
  });
  try {
    const m = server.log().match(/task prompt genesis: (\d+) tokens, (\d+) pinned in the prefix cache/);
    assert.ok(m, server.log());
    const pinned = Number(m[2]);
    assert.ok(pinned >= 16 && pinned % 16 === 0 && pinned <= Number(m[1]), m[0]);
    const config = { max_new_tokens: 8, top_k: 1 };
    const tasked = JSON.parse((await request(server.port, 'POST', '/',
      JSON.stringify({ prompt: ' And God said', generate_config: { ...config, task_id: 'genesis' } }))).body);
    assert.equal(tasked.aux_info.reuse_len, pinned);
    // The same prompt twice: the second takes the first one's whole blocks.
    const prompt = `${task} And God said, Let there be light: and there was light. And God saw ` +
      'the light, that it was good: and God divided the light from the darkness.';
    const first = JSON.parse((await request(server.port, 'POST', '/',
      JSON.stringify({ prompt, generate_config: config }))).body);
    const second = JSON.parse((await request(server.port, 'POST', '/',
      JSON.stringify({ prompt, generate_config: config }))).body);
    assert.equal(second.response, first.response);
    assert.deepEqual(second.aux_info.cum_log_probs, first.aux_info.cum_log_probs);
    assert.ok(second.aux_info.reuse_len > first.aux_info.reuse_len, JSON.stringify(second.aux_info));
    assert.equal(second.aux_info.reuse_len % 16, 0);
    const c = JSON.parse((await request(server.port, 'POST', '/v1/completions',
      JSON.stringify({ prompt, max_tokens: 8, temperature: 0 }))).body);
    assert.equal(c.choices[0].text, first.response);
    assert.equal(c.usage.prompt_tokens_details.cached_tokens, second.aux_info.reuse_len);
    const metrics = (await request(server.port, 'GET', '/metrics')).body;
    const hits = Number(metrics.match(/^vllm:prefix_cache_hits_total(?:\{[^}]*\})? (\d+)/m)?.[1]);
    assert.ok(hits >= pinned + 2 * second.aux_info.reuse_len, metrics);
  } finally {
    server.child.kill('SIGTERM');
    assert.equal((await server.exitPromise).code, 0);
  }
});

t.test('a bad task prompt file stops the start, naming the entry', async () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'tachyon-tasks-'));
  const file = path.join(dir, 'tasks.json');
  fs.writeFileSync(file, JSON.stringify([{ task_id: 1, prompt: 'a' }, { task_id: '1', prompt: 'b' }]));
  try {
    await assert.rejects(startServer(binary, ['--model', model, '--system-prompts', file]),
      /--system-prompts: .*tasks\.json: entry 1 \(task_id 1\): task_id already given by entry 0/);
  } finally {
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

process.exit((await t.run(process.argv[3] || '')) ? 0 : 1);
