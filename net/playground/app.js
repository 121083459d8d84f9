// The playground's behaviour: one WebSocket to /v1/stream (reopened with back-off
// whenever it drops, e.g. across a server restart), one request at a time, live
// figures from its frames, and a /metrics panel polled every second.
'use strict';

const $ = (id) => document.getElementById(id);

const ui = {
  model: $('model'), conn: $('conn'), error: $('error'),
  prompt: $('prompt'), generate: $('generate'), stop: $('stop'),
  promptEcho: $('prompt-echo'), completion: $('completion'),
  completionView: $('completion-view'), chatLog: $('chat-log'),
  chatSettings: $('chat-settings'), system: $('system'), clearChat: $('clear-chat'),
  maxTokens: $('max-tokens'), temperature: $('temperature'), topP: $('top-p'), topK: $('top-k'),
  seed: $('seed'), priority: $('priority'), stopStrings: $('stop-strings'), stopHint: $('stop-hint'),
  ignoreEos: $('ignore-eos'), apiKey: $('api-key'),
  ttft: $('stat-ttft'), tps: $('stat-tps'), tokens: $('stat-tokens'), finish: $('stat-finish'),
  serverTimings: $('stat-server'),
  running: $('m-running'), waiting: $('m-waiting'), swapped: $('m-swapped'),
  kv: $('m-kv'), kvBar: $('m-kv-bar'), prefix: $('m-prefix'), metricsAge: $('metrics-age'),
};

// What the server allows (GET /playground/config); the defaults hold until it answers.
let limits = { max_tokens_limit: 4096, max_stop_strings: 8, max_stop_length: 256, temperature_max: 2 };

let socket = null;          // the open (or opening) WebSocket
let connected = false;
let retryDelayMs = 250;     // doubles per failed attempt, up to retryMaxMs
const retryMaxMs = 4000;
let nextId = 1;
let current = null;         // the request in flight: { id, mode, sentAt, firstAt, lastAt, tokens, text, node }
const history = [];         // chat mode's conversation: { role, content }

const mode = () => ($('mode-chat').checked ? 'chat' : 'completion');

// --- errors ------------------------------------------------------------------

function showError(message) {
  ui.error.textContent = message;
  ui.error.hidden = false;
}

function clearError() {
  ui.error.textContent = '';
  ui.error.hidden = true;
}

// --- connection --------------------------------------------------------------

function setConnection(state, text) {
  ui.conn.dataset.conn = state;
  ui.conn.textContent = text;
}

function connect() {
  const url = `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/stream`;
  setConnection('connecting', 'connecting…');
  const ws = new WebSocket(url);
  socket = ws;
  ws.onopen = () => {
    connected = true;
    retryDelayMs = 250;
    const key = ui.apiKey.value.trim();
    if (key) ws.send(JSON.stringify({ type: 'auth', key }));
    setConnection('connected', 'connected');
    loadConfig();
    updateButtons();
  };
  ws.onmessage = (ev) => {
    if (typeof ev.data !== 'string') return;
    let frame;
    try {
      frame = JSON.parse(ev.data);
    } catch {
      showError(`The server sent a frame that is not JSON: ${ev.data.slice(0, 200)}`);
      return;
    }
    onFrame(frame);
  };
  ws.onclose = (ev) => {
    if (socket !== ws) return;
    socket = null;
    connected = false;
    if (current) {
      finishCurrent('connection lost');
      showError('The connection to the server was lost before the request finished; reconnecting.');
    } else if (ev.code === 1008 && ev.reason) {
      showError(`The server closed the connection: ${ev.reason}`);
    }
    const delay = retryDelayMs;
    retryDelayMs = Math.min(retryDelayMs * 2, retryMaxMs);
    setConnection('disconnected', `disconnected; retrying in ${(delay / 1000).toFixed(1)} s`);
    updateButtons();
    setTimeout(connect, delay);
  };
  // An error is always followed by close, which does the work.
  ws.onerror = () => {};
}

async function loadConfig() {
  try {
    const res = await fetch('/playground/config', { cache: 'no-store' });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    limits = { ...limits, ...(await res.json()) };
  } catch (e) {
    showError(`Could not read the server's limits (/playground/config): ${e.message}`);
    return;
  }
  ui.model.textContent = `model: ${limits.model} · context ${limits.max_model_len} tokens · chat format ${limits.chat_format}`;
  ui.maxTokens.max = String(limits.max_tokens_limit);
  ui.temperature.max = String(limits.temperature_max);
  ui.stopHint.textContent = `(one a line, at most ${limits.max_stop_strings})`;
}

// --- requests ----------------------------------------------------------------

// Reads a number field within its min/max; throws a message naming the field.
function numberField(input, name, { integer = false, optional = false } = {}) {
  const raw = input.value.trim();
  if (raw === '') {
    if (optional) return undefined;
    throw new Error(`${name} is empty`);
  }
  const v = Number(raw);
  if (!Number.isFinite(v) || (integer && !Number.isInteger(v))) throw new Error(`${name} must be ${integer ? 'an integer' : 'a number'}, got "${raw}"`);
  const lo = input.min === '' ? -Infinity : Number(input.min);
  const hi = input.max === '' ? Infinity : Number(input.max);
  if (v < lo || v > hi) throw new Error(`${name} must be in ${lo}..${hi}, got ${v}`);
  return v;
}

function samplingParams() {
  const p = {
    max_tokens: numberField(ui.maxTokens, 'max tokens', { integer: true }),
    temperature: numberField(ui.temperature, 'temperature'),
    top_p: numberField(ui.topP, 'top-p'),
    top_k: numberField(ui.topK, 'top-k', { integer: true }),
    priority: numberField(ui.priority, 'priority', { integer: true }),
  };
  const seed = numberField(ui.seed, 'seed', { integer: true, optional: true });
  if (seed !== undefined) {
    if (!Number.isSafeInteger(seed)) throw new Error('seed must be an integer of at most 15 digits here');
    p.seed = seed;
  }
  const stops = ui.stopStrings.value.split('\n').filter((s) => s !== '');
  if (stops.length > limits.max_stop_strings) throw new Error(`at most ${limits.max_stop_strings} stop strings are allowed, got ${stops.length}`);
  const tooLong = stops.find((s) => new TextEncoder().encode(s).length > limits.max_stop_length);
  if (tooLong !== undefined) throw new Error(`stop strings must be at most ${limits.max_stop_length} bytes long`);
  if (stops.length) p.stop = stops;
  if (ui.ignoreEos.checked) p.ignore_eos = true;
  return p;
}

function generate() {
  if (!connected || current) return;
  clearError();
  let params;
  try {
    params = samplingParams();
  } catch (e) {
    showError(e.message);
    return;
  }
  const text = ui.prompt.value;
  if (text === '') {
    showError('The prompt is empty.');
    return;
  }
  const id = nextId++;
  const frame = { type: 'generate', id, ...params };
  const m = mode();
  let node;
  if (m === 'chat') {
    const messages = [];
    if (ui.system.value.trim()) messages.push({ role: 'system', content: ui.system.value });
    history.push({ role: 'user', content: text });
    messages.push(...history);
    frame.messages = messages;
    addChatMessage('user', text);
    node = addChatMessage('assistant', '');
    node.classList.add('streaming');
    ui.prompt.value = '';
  } else {
    frame.prompt = text;
    ui.promptEcho.textContent = text;
    ui.completion.textContent = '';
    node = ui.completion;
  }
  current = { id, mode: m, sentAt: performance.now(), firstAt: 0, lastAt: 0, tokens: 0, text: '', node };
  resetFigures();
  ui.finish.textContent = 'running…';
  socket.send(JSON.stringify(frame));
  updateButtons();
}

function stop() {
  if (!current || !connected) return;
  socket.send(JSON.stringify({ type: 'cancel', id: current.id }));
  ui.stop.disabled = true;
  ui.finish.textContent = 'cancelling…';
}

function onFrame(frame) {
  if (frame.type === 'error' && (!current || frame.id !== current.id)) {
    showError(`Server error (${frame.code}): ${frame.message}`);
    return;
  }
  if (!current || frame.id !== current.id) return; // a request this page gave up on
  const now = performance.now();
  if (frame.type === 'delta') {
    if (!current.firstAt) current.firstAt = now;
    current.lastAt = now;
    current.tokens += Array.isArray(frame.token_ids) ? frame.token_ids.length : 0;
    current.text += frame.text ?? '';
    current.node.textContent = current.text;
    if (current.mode === 'chat') ui.chatLog.scrollTop = ui.chatLog.scrollHeight;
    else ui.completionView.scrollTop = ui.completionView.scrollHeight;
    updateFigures();
  } else if (frame.type === 'done') {
    if (frame.usage && Number.isInteger(frame.usage.completion_tokens)) current.tokens = frame.usage.completion_tokens;
    updateFigures();
    const t = frame.timings ?? {};
    const ms = (v) => (typeof v === 'number' ? `${v.toFixed(1)} ms` : '–');
    const cached = frame.usage?.cached_tokens ? ` · ${frame.usage.cached_tokens} prompt tokens cached` : '';
    ui.serverTimings.textContent = `server: queue ${ms(t.queue_ms)} · TTFT ${ms(t.ttft_ms)} · per token ${ms(t.tpot_ms)} · total ${ms(t.e2e_ms)}${cached}`;
    if (current.mode === 'chat') history.push({ role: 'assistant', content: current.text });
    finishCurrent(frame.finish_reason ?? '?');
  } else if (frame.type === 'error') {
    showError(`Server error (${frame.code}): ${frame.message}`);
    if (current.mode === 'chat') {
      history.pop(); // the user's turn was not answered: it is not part of the conversation
      current.node.parentElement?.remove();
    }
    finishCurrent('error');
  }
}

function finishCurrent(reason) {
  current.node.classList.remove('streaming');
  ui.finish.textContent = reason;
  current = null;
  updateButtons();
}

function updateButtons() {
  ui.generate.disabled = !connected || current !== null;
  ui.stop.disabled = !connected || current === null;
  document.body.dataset.state = current ? 'generating' : 'idle';
}

// --- figures -----------------------------------------------------------------

function resetFigures() {
  for (const el of [ui.ttft, ui.tps, ui.tokens, ui.finish]) el.textContent = '–';
  ui.serverTimings.textContent = '';
}

function updateFigures() {
  const r = current;
  if (!r.firstAt) return;
  ui.ttft.textContent = `${(r.firstAt - r.sentAt).toFixed(0)} ms`;
  ui.tokens.textContent = String(r.tokens);
  // Decode speed: tokens after the first over the time since the first arrived.
  const span = (r.lastAt - r.firstAt) / 1000;
  ui.tps.textContent = r.tokens > 1 && span > 0 ? ((r.tokens - 1) / span).toFixed(1) : '–';
}

// --- chat view ---------------------------------------------------------------

function addChatMessage(role, text) {
  const row = document.createElement('div');
  row.className = `msg ${role}`;
  const who = document.createElement('div');
  who.className = 'who';
  who.textContent = role;
  const body = document.createElement('div');
  body.className = 'body';
  body.textContent = text;
  row.append(who, body);
  ui.chatLog.append(row);
  ui.chatLog.scrollTop = ui.chatLog.scrollHeight;
  return body;
}

function showMode() {
  const chat = mode() === 'chat';
  ui.chatLog.hidden = !chat;
  ui.completionView.hidden = chat;
  ui.chatSettings.hidden = !chat;
  ui.prompt.placeholder = chat ? 'Your message' : 'Once upon a time';
}

// --- /metrics ----------------------------------------------------------------

// Sums each troupe: sample over its labels: {"troupe:num_requests_running": 1, ...}.
function parseMetrics(text) {
  const out = {};
  for (const line of text.split('\n')) {
    const m = /^(troupe:[A-Za-z0-9_:]+)(?:\{[^}]*\})?\s+(\S+)$/.exec(line);
    if (m) out[m[1]] = (out[m[1]] ?? 0) + Number(m[2]);
  }
  return out;
}

let metricsOkAt = 0;

async function pollMetrics() {
  try {
    const headers = {};
    const key = ui.apiKey.value.trim();
    if (key) headers.Authorization = `Bearer ${key}`;
    const res = await fetch('/metrics', { cache: 'no-store', headers });
    if (!res.ok) throw new Error(`HTTP ${res.status}`);
    const m = parseMetrics(await res.text());
    const show = (el, v) => { el.textContent = v === undefined ? '–' : String(v); };
    show(ui.running, m['troupe:num_requests_running']);
    show(ui.waiting, m['troupe:num_requests_waiting']);
    show(ui.swapped, m['troupe:num_requests_swapped']);
    const kv = m['troupe:kv_cache_usage_perc'];
    ui.kv.textContent = kv === undefined ? '–' : `${(kv * 100).toFixed(1)} %`;
    ui.kvBar.style.width = `${Math.min(100, Math.max(0, (kv ?? 0) * 100))}%`;
    const queries = m['troupe:prefix_cache_queries_total'];
    const hits = m['troupe:prefix_cache_hits_total'];
    ui.prefix.textContent = queries ? `${((100 * hits) / queries).toFixed(1)} %` : '–';
    ui.prefix.title = `${hits ?? 0} of ${queries ?? 0} prompt tokens looked up were found in the prefix cache`;
    metricsOkAt = Date.now();
    ui.metricsAge.textContent = '';
  } catch (e) {
    const since = metricsOkAt ? ` (last read ${Math.round((Date.now() - metricsOkAt) / 1000)} s ago)` : '';
    ui.metricsAge.textContent = `unavailable${since}`;
  } finally {
    setTimeout(pollMetrics, 1000);
  }
}

// --- wiring ------------------------------------------------------------------

ui.generate.addEventListener('click', generate);
ui.stop.addEventListener('click', stop);
ui.prompt.addEventListener('keydown', (ev) => {
  if (ev.key === 'Enter' && (ev.ctrlKey || ev.metaKey)) {
    ev.preventDefault();
    generate();
  }
});
for (const radio of document.querySelectorAll('input[name="mode"]')) radio.addEventListener('change', showMode);
ui.clearChat.addEventListener('click', () => {
  if (current) return; // the reply in flight belongs to this conversation
  history.length = 0;
  ui.chatLog.replaceChildren();
});

showMode();
connect();
pollMetrics();
