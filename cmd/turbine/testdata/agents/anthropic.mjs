// The official Anthropic TypeScript SDK (@anthropic-ai/sdk) against `turbine serve` on a
// real model folder (TestE2EAgents in cmd/turbine/agents_e2e_test.go runs it):
// messages.create with tools (tool_choice auto, any, tool), a tool_result turn, thinking
// enabled and disabled, messages.stream accumulated by finalMessage, and countTokens. It
// prints one JSON object, each scenario's message as the SDK parsed it, which the Go
// test checks (tool inputs against the schemas of tools.json).
//
// Usage: NODE_PATH=<cache>/npm/node_modules node anthropic.mjs BASE_URL MODEL
// (BASE_URL without /v1: the SDK adds it. scripts/fixtures.sh installs the package.)
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const require = createRequire(import.meta.url); // CommonJS resolution honours NODE_PATH
const { default: Anthropic } = require('@anthropic-ai/sdk');

const [baseURL, model] = process.argv.slice(2);
const client = new Anthropic({ baseURL, apiKey: 'unused', maxRetries: 0 });

// tools.json holds OpenAI chat tools; Anthropic's take the schema as input_schema.
const tools = JSON.parse(readFileSync(new URL('./tools.json', import.meta.url), 'utf8')).map(({ function: f }) => ({
  name: f.name, description: f.description, input_schema: f.parameters,
}));
const ask = [{ role: 'user', content: 'What is the weather in Paris right now?' }];
const base = { model, max_tokens: 256 };

// shape keeps what the Go test checks of a message.
function shape(m) {
  return {
    stop_reason: m.stop_reason,
    usage: m.usage,
    content: m.content.map((b) => {
      switch (b.type) {
        case 'text': return { type: b.type, text: b.text };
        case 'thinking': return { type: b.type, thinking: b.thinking };
        case 'tool_use': return { type: b.type, id: b.id, name: b.name, input: b.input };
        default: return { type: b.type };
      }
    }),
  };
}

const out = {};

const first = await client.messages.create({ ...base, tools, messages: ask });
out.auto = shape(first);
out.any = shape(await client.messages.create({ ...base, tools, tool_choice: { type: 'any' }, messages: ask }));
out.tool = shape(await client.messages.create({ ...base, tools, tool_choice: { type: 'tool', name: 'get_time' }, messages: ask }));

// The agent loop's second turn: the first answer (thinking and tool_use blocks) sent
// back with a result for each call.
out.result_turn = shape(
  await client.messages.create({
    ...base,
    tools,
    messages: [
      ...ask,
      { role: 'assistant', content: first.content },
      {
        role: 'user',
        content: first.content
          .filter((b) => b.type === 'tool_use')
          .map((b) => ({ type: 'tool_result', tool_use_id: b.id, content: '{"temperature_c": 17, "sky": "drizzle"}' })),
      },
    ],
  }),
);

const hello = [{ role: 'user', content: 'Why is the sky blue?' }];
// Anthropic's minimum thinking budget is 1024 tokens, and it must be below max_tokens.
out.thinking_on = shape(
  await client.messages.create({ ...base, max_tokens: 2048, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: hello }),
);
out.thinking_off = shape(await client.messages.create({ ...base, thinking: { type: 'disabled' }, messages: hello }));

// messages.stream: the SDK's accumulating helper, with its text, thinking and input JSON
// events.
{
  const stream = client.messages.stream({ ...base, tools, messages: ask });
  let text = '';
  let thinking = '';
  let inputJSON = 0;
  const events = [];
  stream.on('text', (d) => { text += d; });
  stream.on('thinking', (d) => { thinking += d; });
  stream.on('inputJson', () => { inputJSON++; });
  stream.on('streamEvent', (e) => events.push(e.type));
  const final = await stream.finalMessage();
  out.stream = { final: shape(final), events, text, thinking, input_json_events: inputJSON };
}

out.count = await client.messages.countTokens({ model, tools, messages: ask });

process.stdout.write(JSON.stringify(out) + '\n');
