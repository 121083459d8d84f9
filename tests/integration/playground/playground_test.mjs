// troupe-serve's playground page (GET /) driven end to end in headless Chromium
// through playwright-core (pinned in package.json / package-lock.json).
//
// Usage: node playground_test.mjs PATH/TO/troupe-serve ARTIFACT_DIR
// (run_test.sh installs the package and checks that /usr/bin/chromium is there).
//
// Starts its own troupe-serve on an ephemeral port (configs/stories260k-cpu.ini) and checks:
//  - the page loads with the server's limits and connects to /v1/stream;
//  - Generate (completion mode, temperature 0) shows exactly the text /v1/completions
//    gives for the same parameters, with TTFT, tokens/s, tokens and finish reason;
//  - chat mode with seeded sampling, top-p, top-k and a stop string shows exactly the
//    text /v1/chat/completions gives for the same messages and parameters;
//  - a bad setting and a server error (a prompt longer than the context) are shown;
//  - Stop during a long generation (the server kept busy by other requests) ends the
//    request with finish reason "cancelled", and /metrics' running count returns to 0;
//  - after a server restart on the same port the page reconnects and generates again.
// Screenshots go to ARTIFACT_DIR. Any page error or console error fails the test, except
// the connection errors the browser logs while the server is down during the restart;
// so does any request for something outside the server.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { chromium } from 'playwright-core';

const CHROMIUM = '/usr/bin/chromium';
const CHROMIUM_FLAGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];
const root = fileURLToPath(new URL('../../..', import.meta.url));
const [serveBin, artifactDir] = process.argv.slice(2);
if (!serveBin || !artifactDir) {
  console.error('usage: node playground_test.mjs PATH/TO/troupe-serve ARTIFACT_DIR');
  process.exit(2);
}

class Failure extends Error {}
const check = (cond, what) => {
  if (!cond) throw new Failure(what);
};
const show = (v) => JSON.stringify(v);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// --- the server ----------------------------------------------------------------

class Server {
  constructor() {
    this.proc = null;
    this.log = [];
    this.port = 0;
  }

  // Starts troupe-serve on `port` (0: ephemeral) and resolves once it prints its address.
  start(port = 0) {
    this.log.push(`--- start on port ${port} ---`);
    const proc = spawn(serveBin, ['--config-file=configs/stories260k-cpu.ini', `--server.port=${port}`],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] });
    this.proc = proc;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => reject(new Failure('troupe-serve printed no "listening on" line within 60 s')), 60_000);
      const onData = (chunk) => {
        for (const line of chunk.toString().split('\n')) {
          if (line) this.log.push(line);
          const m = /^listening on [0-9.]+:(\d+)/.exec(line);
          if (m) {
            clearTimeout(timer);
            this.port = Number(m[1]);
            resolve(this.port);
          }
        }
      };
      proc.stdout.on('data', onData);
      proc.stderr.on('data', onData);
      proc.on('exit', (code, signal) => {
        this.log.push(`--- exited: code ${code} signal ${signal} ---`);
        clearTimeout(timer);
        reject(new Failure(`troupe-serve exited (code ${code}, signal ${signal})`));
      });
    });
  }

  get running() {
    return this.proc !== null && this.proc.exitCode === null && this.proc.signalCode === null;
  }

  // SIGTERM; fails when it does not stop within 20 s or stops with an error.
  async stop() {
    const proc = this.proc;
    if (!proc) return;
    this.proc = null;
    if (proc.exitCode !== null || proc.signalCode !== null) throw new Failure(`troupe-serve had already exited (code ${proc.exitCode})`);
    const exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
    proc.kill('SIGTERM');
    const result = await Promise.race([exited, sleep(20_000).then(() => null)]);
    if (!result) {
      proc.kill('SIGKILL');
      throw new Failure('troupe-serve did not stop within 20 s of SIGTERM');
    }
    check(result.code === 0, `troupe-serve exited with ${show(result)} after SIGTERM`);
  }

  kill() {
    if (this.proc && this.running) this.proc.kill('SIGKILL');
    this.proc = null;
  }
}

const server = new Server();
const base = () => `http://127.0.0.1:${server.port}`;

// timeout(1) sends SIGTERM: take the server down with us.
for (const sig of ['SIGTERM', 'SIGINT']) {
  process.on(sig, () => {
    server.kill();
    setTimeout(() => process.exit(sig === 'SIGINT' ? 130 : 143), 1000);
  });
}

async function postJson(urlPath, body, signal) {
  const res = await fetch(base() + urlPath, {
    method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body), signal,
  });
  const json = await res.json();
  check(res.ok, `POST ${urlPath} ${show(body)}: HTTP ${res.status} ${show(json)}`);
  return json;
}

async function metrics() {
  const res = await fetch(`${base()}/metrics`);
  check(res.ok, `GET /metrics: HTTP ${res.status}`);
  const out = {};
  for (const line of (await res.text()).split('\n')) {
    const m = /^(troupe:[A-Za-z0-9_:]+)(?:\{[^}]*\})?\s+(\S+)$/.exec(line);
    if (m) out[m[1]] = (out[m[1]] ?? 0) + Number(m[2]);
  }
  return out;
}

async function waitFor(what, cond, timeoutMs) {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > until) throw new Failure(`timed out after ${timeoutMs / 1000} s waiting for ${what}`);
    await sleep(100);
  }
}

// --- the browser -----------------------------------------------------------------

const problems = [];    // page errors, console errors, foreign requests
const tolerated = [];   // connection errors while the server was down on purpose
let serverDown = false;
const connectionError = /ERR_CONNECTION_REFUSED|ERR_CONNECTION_RESET|ERR_EMPTY_RESPONSE|ERR_CONNECTION_CLOSED|WebSocket connection to .* failed|Failed to load resource/;

function watch(page) {
  page.on('pageerror', (e) => problems.push(`page error: ${e.stack ?? e.message}`));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const text = msg.text();
    if (serverDown && connectionError.test(text)) tolerated.push(text);
    else problems.push(`console error: ${text}`);
  });
  page.on('request', (req) => {
    const url = new URL(req.url());
    if (url.protocol !== 'data:' && url.origin !== base()) problems.push(`request outside the server: ${req.url()}`);
  });
  page.on('websocket', (ws) => {
    if (ws.url() !== `ws://127.0.0.1:${server.port}/v1/stream`) problems.push(`WebSocket outside the server: ${ws.url()}`);
  });
}

function noProblems(step) {
  check(problems.length === 0, `${step}: the page reported problems:\n  ${problems.join('\n  ')}`);
}

const text = (page, sel) => page.locator(sel).textContent();

async function setField(page, sel, value) {
  await page.locator(sel).fill(String(value));
}

// Sets the sampling fields (missing ones to the page's defaults) and the prompt.
async function setRequest(page, { prompt, max_tokens = 128, temperature = 1, top_p = 1, top_k = 0, seed = '',
  priority = 0, stop = [], ignore_eos = false }) {
  await setField(page, '#max-tokens', max_tokens);
  await setField(page, '#temperature', temperature);
  await setField(page, '#top-p', top_p);
  await setField(page, '#top-k', top_k);
  await setField(page, '#seed', seed);
  await setField(page, '#priority', priority);
  await setField(page, '#stop-strings', stop.join('\n'));
  await page.locator('#ignore-eos').setChecked(ignore_eos);
  await setField(page, '#prompt', prompt);
}

// Presses Generate and waits for the request to end; returns the figures shown.
async function generateAndWait(page, timeoutMs = 60_000) {
  await page.locator('#generate').click();
  await page.locator('body[data-state="idle"]').waitFor({ timeout: timeoutMs });
  return {
    ttft: await text(page, '#stat-ttft'),
    tps: await text(page, '#stat-tps'),
    tokens: await text(page, '#stat-tokens'),
    finish: await text(page, '#stat-finish'),
    error: (await page.locator('#error').isVisible()) ? await text(page, '#error') : '',
  };
}

// --- the checks --------------------------------------------------------------------

async function loads(page) {
  const res = await page.goto(`${base()}/`);
  check(res.status() === 200, `GET /: HTTP ${res.status()}`);
  check(res.headers()['content-type'] === 'text/html; charset=utf-8', `GET /: content-type ${res.headers()['content-type']}`);
  await page.locator('#conn[data-conn="connected"]').waitFor({ timeout: 30_000 });
  await page.locator('#model', { hasText: 'stories260k' }).waitFor({ timeout: 10_000 });
  const config = await (await fetch(`${base()}/playground/config`)).json();
  check(await page.locator('#max-tokens').getAttribute('max') === String(config.max_tokens_limit),
    `max tokens field's max is not the server's max_tokens_limit ${config.max_tokens_limit}`);
  check((await page.locator('#generate').isEnabled()), 'Generate is disabled once connected');
  noProblems('page load');
  console.log(`ok  page loads, connects, and bounds max tokens by the server's limit (${config.max_tokens_limit})`);
}

let greedyText = null;
const greedy = { prompt: 'Once upon a time', max_tokens: 64, temperature: 0, top_p: 1, top_k: 0, priority: 0 };

async function completionMatchesHttp(page) {
  await page.locator('#mode-completion').check();
  await setRequest(page, greedy);
  const figures = await generateAndWait(page);
  const shown = await text(page, '#completion');
  const http = await postJson('/v1/completions', greedy);
  const choice = http.choices[0];
  greedyText = choice.text;
  check(figures.error === '', `completion: an error is shown: ${figures.error}`);
  check(shown === choice.text, `completion: the page shows ${show(shown)}, /v1/completions gives ${show(choice.text)}`);
  check(shown.length > 0, 'completion: no text');
  check(figures.finish === choice.finish_reason, `completion: finish reason ${show(figures.finish)}, HTTP ${show(choice.finish_reason)}`);
  check(figures.tokens === String(http.usage.completion_tokens), `completion: tokens ${show(figures.tokens)}, HTTP usage ${show(http.usage)}`);
  check(/^\d+ ms$/.test(figures.ttft), `completion: TTFT shows ${show(figures.ttft)}`);
  check(/^\d+(\.\d)?$/.test(figures.tps), `completion: tokens/s shows ${show(figures.tps)}`);
  check(await text(page, '#prompt-echo') === greedy.prompt, 'completion: the prompt is not shown before the text');
  noProblems('completion');
  console.log(`ok  completion at temperature 0 equals /v1/completions (${figures.tokens} tokens, ${figures.finish}; TTFT ${figures.ttft}, ${figures.tps} tokens/s)`);
}

async function chatMatchesHttp(page) {
  await page.locator('#mode-chat').check();
  await page.locator('#chat-log').waitFor();
  const params = { max_tokens: 40, temperature: 0.8, top_p: 0.9, top_k: 40, seed: 1234, priority: 0, stop: ['park'] };
  const message = 'Tell me a story about a cat.';
  await setRequest(page, { ...params, prompt: message });
  const figures = await generateAndWait(page);
  const shown = await page.locator('#chat-log .msg.assistant .body').last().textContent();
  const user = await page.locator('#chat-log .msg.user .body').last().textContent();
  const http = await postJson('/v1/chat/completions', { messages: [{ role: 'user', content: message }], ...params });
  const choice = http.choices[0];
  check(figures.error === '', `chat: an error is shown: ${figures.error}`);
  check(user === message, `chat: the user's message shows as ${show(user)}`);
  check(shown === choice.message.content, `chat: the page shows ${show(shown)}, /v1/chat/completions gives ${show(choice.message.content)}`);
  check(figures.finish === choice.finish_reason, `chat: finish reason ${show(figures.finish)}, HTTP ${show(choice.finish_reason)}`);
  check(await page.locator('#prompt').inputValue() === '', 'chat: the message box is not cleared after sending');
  await page.locator('#clear-chat').click();
  check(await page.locator('#chat-log .msg').count() === 0, 'chat: Clear conversation left messages');
  await page.locator('#mode-completion').check();
  noProblems('chat');
  console.log(`ok  chat with seed, top-p, top-k and a stop string equals /v1/chat/completions (${figures.tokens} tokens, ${figures.finish})`);
}

async function errorsShown(page) {
  await setRequest(page, { prompt: 'Once upon a time', temperature: 5 });
  await page.locator('#generate').click();
  const local = await text(page, '#error');
  check(await page.locator('#error').isVisible() && /temperature must be in 0\.\.2/.test(local),
    `a temperature of 5 is not refused plainly; error box: ${show(local)}`);
  check(await page.locator('body[data-state="idle"]').count() === 1, 'a refused setting still started a request');
  // Far more tokens than the 512-token context: the engine refuses it with an error frame.
  await setRequest(page, { prompt: 'the cat sat on the mat. '.repeat(200), max_tokens: 16 });
  const figures = await generateAndWait(page);
  check(/Server error \(prompt_too_long\): /.test(figures.error), `a too-long prompt shows ${show(figures.error)}`);
  check(figures.finish === 'error', `a too-long prompt's finish reason shows ${show(figures.finish)}`);
  noProblems('errors');
  console.log(`ok  errors are shown: ${show(local)}; ${show(figures.error)}`);
}

// Presses Generate and returns once the page has gone to "generating". The page records that
// itself: a request the engine ends (or refuses) within a frame flips the state back before a
// poll from here could see it (CI once timed out waiting for it on a retry here, on a loaded
// machine). If it never starts, the failure says what the page showed.
async function clickGenerateAndSeeItStart(page) {
  await page.evaluate(() => {
    window.generateStarted = false;
    new MutationObserver((records, observer) => {
      if (document.body.dataset.state !== 'generating') return;
      window.generateStarted = true;
      observer.disconnect();
    }).observe(document.body, { attributes: true, attributeFilter: ['data-state'] });
  });
  await page.locator('#generate').click();
  try {
    await page.waitForFunction(() => window.generateStarted === true, null, { timeout: 30_000 });
  } catch (e) {
    const shown = await page.evaluate(() => ({
      state: document.body.dataset.state,
      connection: document.getElementById('conn').dataset.conn,
      generateDisabled: document.getElementById('generate').disabled,
      finish: document.getElementById('stat-finish').textContent,
      error: document.getElementById('error').hidden ? '' : document.getElementById('error').textContent,
    }));
    throw new Error(`Generate did not start a request within 30 s; the page shows ${JSON.stringify(shown)}`);
  }
}

async function stopCancels(page) {
  // Keep the engine busy so that the page's request runs for seconds, not a fraction of one:
  // 24 background requests before each attempt (an attempt that comes too late finds the last
  // ones done, and its request would run alone and as fast).
  const load = new AbortController();
  const background = [];
  const busy = async (attempt) => {
    for (let i = 0; i < 24; i += 1) {
      background.push(postJson('/v1/completions',
        { prompt: 'Once upon a time', max_tokens: 500, temperature: 0.8, seed: 100 * attempt + i, ignore_eos: true },
        load.signal)
        .catch((e) => (e.name === 'AbortError' ? null : e)));
    }
    await waitFor('the background requests to run', async () => (await metrics())['troupe:num_requests_running'] >= 12, 30_000);
    // The panel polls /metrics once a second: it must show them before the page's own request
    // starts, so that this wait does not eat into that request's time.
    await waitFor('the panel to show running requests', async () => Number(await text(page, '#m-running')) > 0, 30_000);
  };
  await setRequest(page, { prompt: 'Once upon a time', max_tokens: 500, temperature: 0.8, ignore_eos: true });
  // Stop needs a request that is still running. On a fast machine 500 tokens can be done before
  // the screenshot is; then the request is made again (a few times at most), not judged.
  let pressed = null;
  for (let attempt = 1; attempt <= 3 && pressed === null; attempt += 1) {
    await busy(attempt);
    await clickGenerateAndSeeItStart(page);
    await waitFor('tokens to stream in', async () =>
      Number(await text(page, '#stat-tokens')) >= 20 || (await page.locator('body[data-state="idle"]').count()) === 1, 30_000);
    await page.screenshot({ path: path.join(artifactDir, 'playground-generating.png') });
    // Whether the page is still generating, whether Stop is enabled, and the click, in one task
    // of the page: nothing the page receives can come in between.
    const seen = await page.evaluate(() => {
      const stop = document.getElementById('stop');
      const generating = document.body.dataset.state === 'generating';
      const enabled = !stop.disabled;
      if (generating && enabled) stop.click();
      return { generating, enabled };
    });
    if (!seen.generating) {
      console.log(`    the request ended before Stop could be pressed (attempt ${attempt}); again`);
      continue;
    }
    check(seen.enabled, 'Stop is disabled during a generation');
    pressed = seen;
  }
  check(pressed !== null, 'three requests of 500 tokens each ended before Stop could be pressed');
  await page.locator('body[data-state="idle"]').waitFor({ timeout: 30_000 });
  const finish = await text(page, '#stat-finish');
  const tokens = Number(await text(page, '#stat-tokens'));
  check(finish === 'cancelled', `after Stop the finish reason shows ${show(finish)}, expected "cancelled"`);
  check(tokens < 500, `after Stop ${tokens} tokens were generated: the request ran to its end`);
  load.abort();
  for (const r of await Promise.all(background)) if (r instanceof Error) throw r;
  const settled = await waitFor('/metrics to show no running or waiting requests', async () => {
    const m = await metrics();
    return m['troupe:num_requests_running'] === 0 && m['troupe:num_requests_waiting'] === 0 ? m : null;
  }, 60_000);
  await page.locator('#m-running', { hasText: /^0$/ }).waitFor({ timeout: 10_000 });
  noProblems('stop');
  console.log(`ok  Stop cancels a running request after ${tokens} tokens; running returns to ${settled['troupe:num_requests_running']}`);
}

async function survivesRestart(page) {
  const port = server.port;
  serverDown = true;
  await server.stop();
  await page.locator('#conn[data-conn="disconnected"]').waitFor({ timeout: 10_000 });
  check(await page.locator('#generate').isDisabled(), 'Generate is enabled while disconnected');
  await sleep(1500);
  await server.start(port);
  await page.locator('#conn[data-conn="connected"]').waitFor({ timeout: 30_000 });
  // One full metrics read after the reconnect, then connection errors count again.
  await page.waitForFunction(() => document.getElementById('metrics-age').textContent === '', null, { timeout: 10_000 });
  await sleep(1200);
  serverDown = false;
  await setRequest(page, greedy);
  const figures = await generateAndWait(page);
  const shown = await text(page, '#completion');
  check(shown === greedyText, `after the restart the page shows ${show(shown)}, expected ${show(greedyText)}`);
  check(figures.error === '', `after the restart an error is shown: ${figures.error}`);
  await page.screenshot({ path: path.join(artifactDir, 'playground-done.png') });
  noProblems('restart');
  console.log(`ok  the page reconnects after a server restart and generates the same text (${tolerated.length} connection errors logged while the server was down)`);
}

// --- main --------------------------------------------------------------------------

mkdirSync(artifactDir, { recursive: true });
const userDataDir = mkdtempSync(path.join(tmpdir(), 'troupe-playground-chromium-'));
let context = null;
let status = 0;
try {
  await server.start(0);
  console.log(`troupe-serve listening on ${base()}`);
  context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: CHROMIUM, headless: true, args: CHROMIUM_FLAGS,
    viewport: { width: 1280, height: 760 }, timeout: 60_000,
  });
  const page = context.pages()[0] ?? await context.newPage();
  page.setDefaultTimeout(30_000);
  watch(page);
  await loads(page);
  await completionMatchesHttp(page);
  await chatMatchesHttp(page);
  await errorsShown(page);
  await stopCancels(page);
  await survivesRestart(page);
  await context.close();
  context = null;
  await server.stop();
  console.log(`playground_test: passed; screenshots in ${artifactDir}`);
} catch (e) {
  status = 1;
  console.error(`playground_test: FAILED: ${e instanceof Failure ? e.message : e.stack}`);
  if (problems.length) console.error(`problems the page reported:\n  ${problems.join('\n  ')}`);
  console.error(`--- troupe-serve log (last 40 lines) ---\n${server.log.slice(-40).join('\n')}\n--- end of log ---`);
} finally {
  if (context) await context.close().catch(() => {});
  server.kill();
  rmSync(userDataDir, { recursive: true, force: true });
}
process.exit(status);
