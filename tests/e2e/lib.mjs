// Helpers for the end-to-end tests: start `tachyon serve`, raw HTTP over sockets,
// SSE parsing, a tiny test runner, and installing the official `openai` client.
import { spawn, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';

export const OPENAI_VERSION = '5.23.2'; // runs on Node 18+ without dependencies

// Fetches the openai package into cacheDir with `npm pack` (once). Returns the path
// of its CommonJS/ESM entry, or null when the registry cannot be reached.
export function installOpenAI(cacheDir) {
  const pkgDir = path.join(cacheDir, `openai-${OPENAI_VERSION}`, 'package');
  const entry = path.join(pkgDir, 'index.mjs');
  if (fs.existsSync(entry)) return entry;
  fs.mkdirSync(path.dirname(pkgDir), { recursive: true });
  try {
    const out = execFileSync('npm', ['pack', `openai@${OPENAI_VERSION}`, '--silent'], {
      cwd: path.dirname(pkgDir),
      stdio: ['ignore', 'pipe', 'pipe'],
      timeout: 120000,
    }).toString().trim().split('\n').pop();
    execFileSync('tar', ['-xzf', out], { cwd: path.dirname(pkgDir) });
  } catch (e) {
    console.error(`could not fetch openai@${OPENAI_VERSION} with npm: ${e.message}`);
    return null;
  }
  return fs.existsSync(entry) ? entry : null;
}

// Starts `tachyon serve` on a free port; resolves once it logs "ready:".
export async function startServer(binary, args, { timeoutMs = 300000, env = {} } = {}) {
  const child = spawn(binary, ['serve', '--port', '0', ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'ignore', 'pipe'],
  });
  let log = '';
  const server = { child, log: () => log, port: 0, exited: null };
  server.exitPromise = new Promise((resolve) => {
    child.on('exit', (code, signal) => {
      server.exited = { code, signal };
      resolve(server.exited);
    });
  });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`server not ready in ${timeoutMs} ms:\n${log}`)), timeoutMs);
    child.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/ready: .* on http:\/\/[^:]+:(\d+)/);
      if (m && !server.port) {
        server.port = Number(m[1]);
        clearTimeout(timer);
        resolve();
      }
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`server exited with ${code} before it was ready:\n${log}`));
    });
  });
  return server;
}

// Sends raw bytes on a new connection and collects everything until the server
// closes it or `idleMs` passes without data.
export function rawExchange(port, bytes, { idleMs = 5000, chunks = null, chunkDelayMs = 0 } = {}) {
  return new Promise((resolve, reject) => {
    const sock = net.connect(port, '127.0.0.1');
    let data = Buffer.alloc(0);
    let timer = null;
    const done = (closed) => {
      clearTimeout(timer);
      sock.destroy();
      resolve({ text: data.toString('utf8'), closed });
    };
    const arm = () => {
      clearTimeout(timer);
      timer = setTimeout(() => done(false), idleMs);
    };
    sock.on('connect', async () => {
      arm();
      if (chunks) {
        for (const c of chunks) {
          if (sock.destroyed) return;
          sock.write(c);
          await new Promise((r) => setTimeout(r, chunkDelayMs));
        }
      } else {
        sock.write(bytes);
      }
    });
    sock.on('data', (d) => {
      data = Buffer.concat([data, d]);
      arm();
    });
    sock.on('end', () => done(true));
    sock.on('close', () => done(true));
    sock.on('error', (e) => (data.length ? done(true) : reject(e)));
  });
}

export function httpRequest(method, target, body = '', headers = {}) {
  const b = typeof body === 'string' ? body : JSON.stringify(body);
  let req = `${method} ${target} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n`;
  for (const [k, v] of Object.entries(headers)) req += `${k}: ${v}\r\n`;
  if (method === 'POST') req += `Content-Type: application/json\r\nContent-Length: ${Buffer.byteLength(b)}\r\n`;
  return req + '\r\n' + b;
}

// Splits a raw HTTP/1.1 response (Connection: close) into status, headers and body,
// decoding a chunked body and checking its framing.
export function parseResponse(text) {
  const head = text.indexOf('\r\n\r\n');
  if (head < 0) throw new Error(`no header end in: ${text.slice(0, 200)}`);
  const lines = text.slice(0, head).split('\r\n');
  const status = Number(lines[0].split(' ')[1]);
  const headers = {};
  for (const l of lines.slice(1)) {
    const i = l.indexOf(':');
    headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
  }
  let body = text.slice(head + 4);
  if (headers['transfer-encoding'] === 'chunked') {
    let out = '';
    let rest = Buffer.from(body, 'utf8');
    for (;;) {
      const eol = rest.indexOf('\r\n');
      if (eol < 0) throw new Error('bad chunk framing');
      const size = parseInt(rest.slice(0, eol).toString(), 16);
      if (Number.isNaN(size)) throw new Error('bad chunk size');
      if (size === 0) break;
      out += rest.slice(eol + 2, eol + 2 + size).toString('utf8');
      if (rest.slice(eol + 2 + size, eol + 4 + size).toString() !== '\r\n') throw new Error('chunk not terminated');
      rest = rest.slice(eol + 4 + size);
    }
    body = out;
  }
  return { status, headers, body };
}

export async function request(port, method, target, body = '', headers = {}) {
  const r = await rawExchange(port, httpRequest(method, target, body, headers), { idleMs: 120000 });
  return parseResponse(r.text);
}

export function sseEvents(body, sep = '\n\n', prefix = 'data: ') {
  const events = [];
  let pos = 0;
  while (pos < body.length) {
    const end = body.indexOf(sep, pos);
    if (end < 0) throw new Error(`unterminated SSE event: ${JSON.stringify(body.slice(pos, pos + 200))}`);
    const ev = body.slice(pos, end);
    if (!ev.startsWith(prefix)) throw new Error(`SSE event without '${prefix}': ${JSON.stringify(ev)}`);
    events.push(ev.slice(prefix.length));
    pos = end + sep.length;
  }
  return events;
}

export async function metrics(port, headers = {}) {
  const r = await request(port, 'GET', '/metrics', '', headers);
  const out = {};
  for (const line of r.body.split('\n')) {
    if (!line || line.startsWith('#')) continue;
    const sp = line.lastIndexOf(' ');
    out[line.slice(0, sp)] = Number(line.slice(sp + 1));
  }
  return out;
}

export async function eventually(fn, what, timeoutMs = 60000) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (await fn()) return;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

export function rssBytes(pid) {
  const status = fs.readFileSync(`/proc/${pid}/status`, 'utf8');
  const m = status.match(/VmRSS:\s+(\d+) kB/);
  return m ? Number(m[1]) * 1024 : 0;
}

// A minimal runner: named async tests, run in order, failures reported at the end.
export class Runner {
  constructor() {
    this.tests = [];
    this.failed = [];
  }
  test(name, fn) {
    this.tests.push({ name, fn });
  }
  async run(filter = '') {
    for (const t of this.tests) {
      if (filter && !t.name.includes(filter)) continue;
      const t0 = Date.now();
      try {
        await t.fn();
        console.log(`ok   ${t.name} (${Date.now() - t0} ms)`);
      } catch (e) {
        console.log(`FAIL ${t.name}: ${e.stack || e}`);
        this.failed.push(t.name);
      }
    }
    return this.failed.length === 0;
  }
}
