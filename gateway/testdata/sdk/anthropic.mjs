// The official Anthropic TypeScript SDK (@anthropic-ai/sdk) against the gateway's
// Messages API: run by TestAnthropicSDK (gateway/anthropic_sdk_test.go), which serves a
// fake Qwen3-style model and checks what this prints: one JSON object, each scenario's
// result as the SDK parsed it.
//
// Usage: NODE_PATH=<cache>/npm/node_modules node anthropic.mjs BASE_URL API_KEY
// (scripts/fixtures.sh installs the package into the cache.)
import { createRequire } from 'node:module';

// ES modules ignore NODE_PATH; CommonJS resolution reads it.
const require = createRequire(import.meta.url);
const { default: Anthropic } = require('@anthropic-ai/sdk');

const [baseURL, apiKey] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey, maxRetries: 0 });

const tools = [
  {
    name: 'get_weather',
    description: 'Weather in a city',
    input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
  {
    name: 'get_time',
    description: 'Local time in a time zone',
    input_schema: { type: 'object', properties: { tz: { type: 'string' } }, required: ['tz'] },
  },
];
const ask = [{ role: 'user', content: 'What is the weather in Paris?' }];
const base = { model: 'agent', max_tokens: 2048 };

// shape keeps what the checks read of a message.
function shape(m) {
  return {
    id: m.id,
    type: m.type,
    role: m.role,
    model: m.model,
    stop_reason: m.stop_reason,
    stop_sequence: m.stop_sequence,
    usage: m.usage,
    content: m.content.map((b) => {
      switch (b.type) {
        case 'text':
          return { type: b.type, text: b.text };
        case 'thinking':
          return { type: b.type, thinking: b.thinking, signature: b.signature };
        case 'tool_use':
          return { type: b.type, id: b.id, name: b.name, input: b.input };
        default:
          return { type: b.type };
      }
    }),
  };
}

async function failure(f) {
  try {
    await f();
    return { thrown: false };
  } catch (e) {
    return { thrown: true, class: e.constructor.name, status: e.status, type: e.error?.error?.type ?? e.type, message: e.message };
  }
}

const out = {};

out.auto = shape(await client.messages.create({ ...base, tools, messages: ask }));
out.any = shape(await client.messages.create({ ...base, tools, tool_choice: { type: 'any' }, messages: ask }));
out.tool = shape(
  await client.messages.create({ ...base, tools, tool_choice: { type: 'tool', name: 'get_time' }, messages: [{ role: 'user', content: 'Time in Paris?' }] }),
);
out.none = shape(await client.messages.create({ ...base, tools, tool_choice: { type: 'none' }, messages: ask }));

// The agent loop's second turn: the first answer (thinking, text, tool_use) sent back
// with the tool's result.
const first = await client.messages.create({ ...base, tools, messages: ask });
const use = first.content.find((b) => b.type === 'tool_use');
out.result_turn = shape(
  await client.messages.create({
    ...base,
    tools,
    messages: [
      ...ask,
      { role: 'assistant', content: first.content },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: use.id, content: '18 C, sunny' }] },
    ],
  }),
);

out.thinking_on = shape(await client.messages.create({ ...base, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: [{ role: 'user', content: 'Hello!' }] }));
out.thinking_off = shape(await client.messages.create({ ...base, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'Hello!' }] }));

// messages.stream: the SDK's accumulating helper, with its text and input JSON events.
{
  const stream = client.messages.stream({ ...base, tools, messages: ask });
  let text = '';
  let thinking = '';
  let inputJSON = 0;
  const events = [];
  stream.on('text', (d) => (text += d));
  stream.on('thinking', (d) => (thinking += d));
  stream.on('inputJson', () => inputJSON++);
  stream.on('streamEvent', (e) => events.push(e.type));
  const final = await stream.finalMessage();
  out.stream = { message: shape(final), text, thinking, input_json_events: inputJSON, events };
}

// create({stream: true}): the raw events.
{
  const stream = await client.messages.create({ ...base, stream: true, thinking: { type: 'disabled' }, messages: [{ role: 'user', content: 'Hello!' }] });
  const events = [];
  let text = '';
  for await (const e of stream) {
    events.push(e.type);
    if (e.type === 'content_block_delta' && e.delta.type === 'text_delta') text += e.delta.text;
  }
  out.raw_stream = { events, text };
}

out.count = await client.messages.countTokens({ model: 'agent', tools, messages: ask });

// The Models API, paged one model at a time (the SDK follows last_id while has_more).
out.models = [];
for await (const m of client.models.list({ limit: 1 })) out.models.push(m);
out.model = await client.models.retrieve('agent');
out.unknown_model_info = await failure(() => client.models.retrieve('nope'));

out.unknown_model = await failure(() => client.messages.create({ ...base, model: 'nope', messages: ask }));
out.bad_request = await failure(() =>
  client.messages.create({ ...base, messages: [{ role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_x', content: 'x' }] }] }),
);
out.wrong_key = await failure(() =>
  new Anthropic({ baseURL, apiKey: 'sk-ant-wrong', maxRetries: 0 }).messages.create({ ...base, messages: ask }),
);
out.stream_failure = await failure(async () => {
  const stream = client.messages.stream({ ...base, messages: [{ role: 'user', content: 'FAIL' }] });
  await stream.finalMessage();
});

process.stdout.write(JSON.stringify(out) + '\n');
