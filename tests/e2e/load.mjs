// Load test: waves of 200 concurrent streaming clients against one `tachyon serve` on
// the bundled model. Every stream must complete with the text greedy decoding gives the
// same prompt alone, and the server's resident memory must come back down afterwards.
//   node tests/e2e/load.mjs path/to/tachyon [clients] [waves]
import assert from 'node:assert/strict';
import http from 'node:http';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { eventually, metrics, request, rssBytes, sseEvents, startServer } from './lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '..', '..');
const binary = path.resolve(process.argv[2] || path.join(root, 'build', 'tachyon'));
const CLIENTS = Number(process.argv[3] || 200);
const WAVES = Number(process.argv[4] || 4);
const MAX_TOKENS = 24;
// Memory: the first wave is a warm-up. It leaves lasting, bounded state behind: the
// model's step buffers grown to the largest batch (for 216 sequences the logits alone
// are 216 x 32000 x 4 B = 27.6 MB), malloc arenas of the threads that served it. Later
// waves repeat it exactly, so after each of them the server must settle back to the same
// resident size. Measured on the bundled model: +42 MB after the warm-up wave over the
// idle server. After a later wave the settled size is usually the warm-up level, but
// one wave now and then leaves a plateau that the next wave clears: +24 to +37 MB in
// seven-wave runs of this tree, +25 to +30 MB in runs of the tree before the decoder
// staged its step uploads in one copy; no rise that stays in either. (glibc keeps some
// fragmentation and caches exited threads' stacks; the server trims its heap when it
// falls idle.) A leak stays: so the check is on two waves in a
// row, both above the tolerance. That catches a leak of 16 MB a wave (80 KB a request)
// within the four waves, as the one-wave check did within three.
const LEAK_TOLERANCE = 32 << 20;

const prompts = ['In the beginning God created', 'And the LORD spake unto Moses, saying,', 'A computer is',
  'Blessed are the', 'And it came to pass', 'The LORD is my shepherd', 'Thus saith the LORD', 'Hear, O Israel'];

const server = await startServer(binary, [
  '--model', path.join(root, 'models', 'tiny-kjv-chat'), '--progress', 'false', '--io-threads', '2',
  '--max-concurrency', String(CLIENTS + 16), '--max-num-seqs', String(CLIENTS + 16),
]);
const port = server.port;
const pid = server.child.pid;
const agent = new http.Agent({ keepAlive: false, maxSockets: Infinity });

function stream(prompt) {
  const body = JSON.stringify({ prompt, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true, stream: true,
    stream_options: { include_usage: true } });
  return new Promise((resolve, reject) => {
    const t0 = performance.now();
    let first = 0;
    const req = http.request({ host: '127.0.0.1', port, path: '/v1/completions', method: 'POST', agent,
      headers: { 'Content-Type': 'application/json', 'Content-Length': Buffer.byteLength(body) } }, (res) => {
      let data = '';
      res.setEncoding('utf8');
      res.on('data', (d) => {
        if (!first && d.includes('"text":"') && !d.includes('"text":""')) first = performance.now();
        data += d;
      });
      res.on('end', () => resolve({ status: res.statusCode, data, ttft: first - t0, total: performance.now() - t0 }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(body);
  });
}

function check(r, expected) {
  assert.equal(r.status, 200, r.data);
  const events = sseEvents(r.data);
  assert.equal(events.at(-1), '[DONE]');
  let text = '';
  let usage = null;
  for (const e of events.slice(0, -1)) {
    const j = JSON.parse(e);
    assert.ok(!j.error, e);
    if (j.usage) usage = j.usage;
    for (const c of j.choices) text += c.text;
  }
  assert.equal(usage.completion_tokens, MAX_TOKENS);
  assert.equal(text, expected);
}

const pct = (xs, p) => xs.slice().sort((a, b) => a - b)[Math.min(xs.length - 1, Math.floor(p * xs.length))];
const mb = (b) => (b / 1048576).toFixed(1);

// The expected texts: each prompt alone.
const expected = {};
for (const p of prompts) {
  const r = await request(port, 'POST', '/v1/completions', { prompt: p, max_tokens: MAX_TOKENS, temperature: 0, ignore_eos: true });
  expected[p] = JSON.parse(r.body).choices[0].text;
}
await new Promise((r) => setTimeout(r, 500));
const baseline = rssBytes(pid);
console.log(`idle RSS ${mb(baseline)} MB`);

let afterFirst = 0;
const settledByWave = [];
let failed = false;
for (let wave = 1; wave <= WAVES; wave++) {
  const t0 = performance.now();
  const results = await Promise.all(Array.from({ length: CLIENTS }, (_, i) => stream(prompts[i % prompts.length])));
  const secs = (performance.now() - t0) / 1000;
  let errors = 0;
  results.forEach((r, i) => {
    try {
      check(r, expected[prompts[i % prompts.length]]);
    } catch (e) {
      if (errors++ < 3) console.log(`client ${i}: ${e.message}`);
    }
  });
  const ttft = results.map((r) => r.ttft);
  const peak = rssBytes(pid);
  console.log(`wave ${wave}: ${CLIENTS} streams in ${secs.toFixed(2)} s, ${errors} errors, ` +
    `${((CLIENTS * MAX_TOKENS) / secs).toFixed(0)} tok/s, TTFT p50 ${pct(ttft, 0.5).toFixed(0)} ms p99 ${pct(ttft, 0.99).toFixed(0)} ms, ` +
    `RSS ${mb(peak)} MB`);
  if (errors) failed = true;
  // Idle reader threads exit after 10 s; then measure.
  await eventually(async () => {
    const m = await metrics(port);
    return m['vllm:num_requests_running{model_name="tiny-kjv-chat"}'] === 0;
  }, 'the engine to drain');
  await new Promise((r) => setTimeout(r, 12000));
  const settled = rssBytes(pid);
  console.log(`  settled RSS ${mb(settled)} MB`);
  if (wave === 1) afterFirst = settled;
  settledByWave.push(settled);
}
const final = rssBytes(pid);
// CPU time by thread name: how much the HTTP layer (http-io, stream-reader) took next to
// the engine and the model's compute threads.
const cpu = {};
const fsMod = await import('node:fs');
for (const tid of fsMod.readdirSync(`/proc/${pid}/task`)) {
  try {
    const name = fsMod.readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
    const f = fsMod.readFileSync(`/proc/${pid}/task/${tid}/stat`, 'utf8').split(') ')[1].split(' ');
    cpu[name] = (cpu[name] || 0) + (Number(f[11]) + Number(f[12])) / 100;
  } catch { /* the thread exited */ }
}
console.log('CPU seconds by thread (live threads):', JSON.stringify(cpu));
console.log(`RSS: idle ${mb(baseline)} MB, after the warm-up wave ${mb(afterFirst)} MB, after wave ${WAVES} ${mb(final)} MB`);
const above = (w) => settledByWave[w] > afterFirst + LEAK_TOLERANCE;
for (let w = 2; w < settledByWave.length; w++) {
  if (above(w - 1) && above(w)) {
    console.log(`FAIL: after waves ${w} and ${w + 1} memory is ${mb(settledByWave[w - 1] - afterFirst)} and ` +
      `${mb(settledByWave[w] - afterFirst)} MB above the warm-up level (tolerance ${mb(LEAK_TOLERANCE)} MB)`);
    failed = true;
  }
}
if (WAVES < 3) {
  console.log('FAIL: the memory check needs at least three waves');
  failed = true;
}
server.child.kill('SIGTERM');
const exit = await server.exitPromise;
if (exit.code !== 0) {
  console.log(`FAIL: server exited with ${exit.code}\n${server.log().slice(-2000)}`);
  failed = true;
}
console.log(failed ? 'FAILED' : 'load test passed');
process.exit(failed ? 1 : 0);
