// troupe-serve's OpenAI-compatible HTTP API driven by a third-party client: the
// official `openai` npm package (version pinned in package.json / package-lock.json).
//
// Usage: node openai_client_test.mjs PORT   (run_test.sh installs the package and
// starts and stops the server)
//
// Checks, on the bundled stories260k model: completions (JSON and streamed) give the
// golden greedy text; chat completions JSON and streamed agree; models.list() has the
// model; a bad request makes the SDK throw an APIError with status 400; a json_schema
// response_format comes back parsed by the SDK's own chat.completions.parse, and
// streamed it parses too; a schema the engine cannot compile is a 400; a strict tool with
// tool_choice required comes back as a call whose arguments the SDK's parse() and its
// stream helper parse, and a tool_choice naming no tool is a 400.
// Exits 1 with a message naming what differed.
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { VERSION } from 'openai/version';

const MODEL = 'stories260k';
const port = process.argv[2];
if (!/^\d+$/.test(port ?? '')) {
  console.error('usage: node openai_client_test.mjs PORT');
  process.exit(2);
}

class Mismatch extends Error {}
const check = (cond, what) => {
  if (!cond) throw new Mismatch(what);
};
const show = (v) => JSON.stringify(v);

const goldenPath = fileURLToPath(new URL(`../../../models/${MODEL}/golden_greedy.json`, import.meta.url));
const golden = JSON.parse(readFileSync(goldenPath, 'utf8')).cases[0];

// No retries: a failure must show at once, not after the SDK's back-off.
const client = new OpenAI({ baseURL: `http://127.0.0.1:${port}/v1`, apiKey: 'unused', maxRetries: 0, timeout: 120_000 });

const greedy = { model: MODEL, prompt: golden.prompt, max_tokens: 64, temperature: 0, ignore_eos: true };

async function completions() {
  const res = await client.completions.create(greedy);
  const choice = res.choices?.[0];
  check(choice?.text === golden.generated_text,
    `completions.create: text ${show(choice?.text)}, golden text is ${show(golden.generated_text)}; response ${show(res)}`);
  check(choice.finish_reason === 'length', `completions.create: finish_reason ${show(choice.finish_reason)}, expected "length"`);
  check(res.usage?.completion_tokens === 64, `completions.create: usage ${show(res.usage)}, expected completion_tokens 64`);
  console.log('ok  completions.create: golden text, finish_reason length, 64 completion tokens');
}

async function completionsStream() {
  const stream = await client.completions.create({ ...greedy, stream: true, stream_options: { include_usage: true } });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks += 1;
    for (const choice of chunk.choices ?? []) {
      text += choice.text ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
    if (chunk.usage) usage = chunk.usage;
  }
  check(text === golden.generated_text,
    `completions.create stream: text ${show(text)}, golden text is ${show(golden.generated_text)}`);
  check(finish === 'length', `completions.create stream: finish_reason ${show(finish)}, expected "length"`);
  check(usage?.completion_tokens === 64,
    `completions.create stream: usage chunk ${show(usage)}, expected completion_tokens 64 (stream_options.include_usage)`);
  console.log(`ok  completions.create stream: golden text in ${chunks} chunks, usage chunk`);
}

async function chat() {
  const request = { model: MODEL, messages: [{ role: 'user', content: 'Tell me a story' }], temperature: 0, max_tokens: 24 };
  const res = await client.chat.completions.create(request);
  const message = res.choices?.[0]?.message;
  check(typeof message?.content === 'string' && message.content.length > 0,
    `chat.completions.create: no content in ${show(res)}`);
  check(message.role === 'assistant', `chat.completions.create: role ${show(message.role)}, expected "assistant"`);
  check(res.usage?.completion_tokens <= 24, `chat.completions.create: usage ${show(res.usage)} for max_tokens 24`);

  const stream = await client.chat.completions.create({ ...request, stream: true });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    for (const choice of chunk.choices ?? []) {
      text += choice.delta?.content ?? '';
      if (choice.finish_reason) finish = choice.finish_reason;
    }
  }
  check(text === message.content,
    `chat.completions.create stream: text ${show(text)}, the JSON response's content is ${show(message.content)}`);
  check(finish === res.choices[0].finish_reason,
    `chat.completions.create stream: finish_reason ${show(finish)}, JSON response's ${show(res.choices[0].finish_reason)}`);
  console.log(`ok  chat.completions.create JSON and stream agree: ${show(text)} (${finish})`);
}

async function models() {
  const ids = [];
  for await (const model of client.models.list()) ids.push(model.id);
  check(ids.includes(MODEL), `models.list: ${show(ids)} does not contain ${show(MODEL)}`);
  console.log(`ok  models.list: ${show(ids)}`);
}

async function badRequest() {
  let error = null;
  try {
    const res = await client.completions.create({ ...greedy, temperature: 5 });
    throw new Mismatch(`completions.create with temperature 5 succeeded: ${show(res)}`);
  } catch (e) {
    if (e instanceof Mismatch) throw e;
    error = e;
  }
  check(error instanceof OpenAI.APIError, `temperature 5: the SDK threw ${error?.name}: ${error?.message}, not an APIError`);
  check(error.status === 400, `temperature 5: APIError status ${error.status}, expected 400 (${error.message})`);
  check(error instanceof OpenAI.BadRequestError, `temperature 5: ${error.constructor.name} is not a BadRequestError`);
  console.log(`ok  temperature 5: ${error.constructor.name} ${error.status}: ${error.message}`);
}

const answerSchema = {
  type: 'object',
  properties: { answer: { enum: ['yes', 'no'] }, count: { type: 'integer', minimum: 0, maximum: 9 } },
  required: ['answer', 'count'],
  additionalProperties: false,
};
const answerFormat = { type: 'json_schema', json_schema: { name: 'answer', strict: true, schema: answerSchema } };
const isAnswer = (v) =>
  v !== null && typeof v === 'object' && Object.keys(v).length === 2 && ['yes', 'no'].includes(v.answer) &&
  Number.isInteger(v.count) && v.count >= 0 && v.count <= 9;

async function structuredOutput() {
  const request = { model: MODEL, messages: [{ role: 'user', content: 'Is the cat happy?' }], max_tokens: 64,
    temperature: 1, seed: 7, response_format: answerFormat };
  // The SDK's parse helper: JSON.parse of the content for a json_schema format, and an error on a
  // truncated ("length") answer.
  const parsed = await client.chat.completions.parse(request);
  const message = parsed.choices?.[0]?.message;
  check(isAnswer(message?.parsed), `chat.completions.parse: parsed ${show(message?.parsed)} from ${show(message?.content)}`);
  check(parsed.choices[0].finish_reason === 'stop', `chat.completions.parse: finish_reason ${show(parsed.choices[0].finish_reason)}`);

  const stream = await client.chat.completions.create({ ...request, seed: 8, stream: true });
  let text = '';
  for await (const chunk of stream) for (const choice of chunk.choices ?? []) text += choice.delta?.content ?? '';
  check(isAnswer(JSON.parse(text)), `structured stream: ${show(text)} does not parse into the schema`);

  let error = null;
  try {
    await client.chat.completions.create({ ...request, response_format: { type: 'json_schema',
      json_schema: { name: 'bad', schema: { type: 'string', multipleOf: 3 } } } });
  } catch (e) {
    error = e;
  }
  check(error instanceof OpenAI.BadRequestError && /multipleOf/.test(error.message),
    `an uncompilable schema: ${error?.constructor?.name} ${error?.message}, expected a 400 naming multipleOf`);
  console.log(`ok  structured output: parse() gave ${show(message.parsed)}, stream ${show(text)}, bad schema 400`);
}

// Small, so that the instructions and the schema fit the bundled model's 512 tokens.
const lookupTool = { type: 'function', function: { name: 'lookup', strict: true, parameters: { type: 'object',
  properties: { c: { type: 'string', maxLength: 3 } }, required: ['c'], additionalProperties: false } } };
const isLookup = (v) => v !== null && typeof v === 'object' && Object.keys(v).length === 1 &&
  typeof v.c === 'string' && [...v.c].length <= 3;

async function toolCalls() {
  const request = { model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 200, temperature: 1,
    seed: 3, tools: [lookupTool], tool_choice: 'required', parallel_tool_calls: false };
  // parse(): JSON.parse of a strict tool's arguments into parsed_arguments.
  const parsed = await client.chat.completions.parse(request);
  const choice = parsed.choices?.[0];
  const call = choice?.message?.tool_calls?.[0];
  check(choice?.finish_reason === 'tool_calls', `tools parse(): finish_reason ${show(choice?.finish_reason)}`);
  check(choice.message.tool_calls.length === 1 && call.type === 'function' && call.function.name === 'lookup' &&
    /^call_/.test(call.id), `tools parse(): calls ${show(choice.message.tool_calls)}`);
  check(isLookup(call.function.parsed_arguments), `tools parse(): parsed_arguments ${show(call.function.parsed_arguments)}`);
  check(choice.message.content === null, `tools parse(): content ${show(choice.message.content)}, expected null`);

  // The stream helper accumulates the tool_calls deltas into the final message.
  const runner = client.chat.completions.stream({ ...request, seed: 4, tool_choice: { type: 'function',
    function: { name: 'lookup' } } });
  const final = await runner.finalChatCompletion();
  const streamedCall = final.choices?.[0]?.message?.tool_calls?.[0];
  check(final.choices[0].finish_reason === 'tool_calls', `tools stream: finish_reason ${show(final.choices[0].finish_reason)}`);
  check(streamedCall?.function?.name === 'lookup' && isLookup(streamedCall.function.parsed_arguments),
    `tools stream: ${show(final.choices[0].message)}`);

  let error = null;
  try {
    await client.chat.completions.create({ ...request, tool_choice: { type: 'function', function: { name: 'nope' } } });
  } catch (e) {
    error = e;
  }
  check(error instanceof OpenAI.BadRequestError && /not among the tools/.test(error.message),
    `tool_choice naming no tool: ${error?.constructor?.name} ${error?.message}, expected a 400`);
  console.log(`ok  tool calls: parse() gave ${show(call.function.parsed_arguments)}, stream ` +
    `${show(streamedCall.function.parsed_arguments)}, unknown function 400`);
}

try {
  await completions();
  await completionsStream();
  await chat();
  await models();
  await badRequest();
  await structuredOutput();
  await toolCalls();
  console.log(`openai_client_test: all checks passed (openai ${VERSION}, node ${process.version})`);
} catch (e) {
  const what = e instanceof Mismatch ? e.message : `${e?.constructor?.name}: ${e?.message}${e?.status ? ` (status ${e.status})` : ''}`;
  console.error(`openai_client_test: FAILED: ${what}`);
  process.exitCode = 1;
}
