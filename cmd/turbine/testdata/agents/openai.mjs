// The official `openai` npm package against `turbine serve` on a real model folder
// (TestE2EAgents in cmd/turbine/agents_e2e_test.go runs it): chat completions with
// tools, streaming and not, and the Responses API with function tools, streaming and
// not. It prints one JSON object, what the SDK parsed, which the Go test checks (tool
// arguments against the schemas of tools.json).
//
// Usage: NODE_PATH=<cache>/npm/node_modules node openai.mjs BASE_URL MODEL
// (scripts/fixtures.sh installs the package into the cache.)
import { createRequire } from 'node:module';
import { readFileSync } from 'node:fs';

const require = createRequire(import.meta.url); // CommonJS resolution honours NODE_PATH
const { OpenAI } = require('openai');

const [baseURL, model] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey: 'unused', maxRetries: 0 });

// tools.json holds the chat completions tools; the Responses API takes them flat.
const chatTools = JSON.parse(readFileSync(new URL('./tools.json', import.meta.url), 'utf8'));
const responsesTools = chatTools.map(({ function: f }) => ({
  type: 'function', name: f.name, description: f.description, parameters: f.parameters, strict: false,
}));
const question = 'What is the weather in Paris right now?';
const chatParams = { model, messages: [{ role: 'user', content: question }], tools: chatTools, max_tokens: 256, seed: 11 };

// chatSummary keeps what the Go test checks of a chat completion's only choice; reasoning
// and reasoning_content are fields the SDK passes through untyped.
function chatSummary(c) {
  const ch = c.choices[0];
  const m = ch.message;
  return {
    finish_reason: ch.finish_reason,
    content: m.content ?? '',
    reasoning: m.reasoning ?? '',
    reasoning_content: m.reasoning_content ?? '',
    tool_calls: (m.tool_calls ?? []).map((tc) => ({ id: tc.id, type: tc.type, name: tc.function.name, arguments: tc.function.arguments })),
  };
}

function responseSummary(r) {
  return {
    status: r.status,
    items: r.output.map((it) => {
      switch (it.type) {
        case 'reasoning': return { type: it.type, text: (it.content ?? []).map((c) => c.text).join('') };
        case 'message': return { type: it.type, text: it.content.map((c) => c.text).join('') };
        case 'function_call': return { type: it.type, call_id: it.call_id, name: it.name, arguments: it.arguments };
        default: return { type: it.type };
      }
    }),
  };
}

const out = {};

out.chat = chatSummary(await client.chat.completions.create(chatParams));

// The SDK's streaming helper accumulates the deltas into a chat completion (and throws
// on deltas that do not fit together); the raw chunks are counted alongside, and their
// reasoning deltas concatenated (the helper keeps only the last value of a field it does
// not know).
{
  const stream = client.chat.completions.stream({ ...chatParams, stream_options: { include_usage: true } });
  let chunks = 0;
  let reasoning = '';
  const argumentDeltas = {};
  stream.on('chunk', (c) => {
    chunks++;
    for (const ch of c.choices) {
      reasoning += ch.delta.reasoning ?? '';
      for (const d of ch.delta.tool_calls ?? []) {
        if (d.function?.arguments) argumentDeltas[d.index] = (argumentDeltas[d.index] ?? 0) + 1;
      }
    }
  });
  const final = await stream.finalChatCompletion();
  out.chat_stream = { final: chatSummary(final), chunks, reasoning, argument_deltas: argumentDeltas };
}

const responsesParams = { model, instructions: 'Use the tools.', input: question, tools: responsesTools, max_output_tokens: 256 };
out.responses = responseSummary(await client.responses.create(responsesParams));
{
  const stream = client.responses.stream(responsesParams);
  const types = [];
  let argumentDeltas = '';
  stream.on('event', (e) => types.push(e.type));
  stream.on('response.function_call_arguments.delta', (e) => { argumentDeltas += e.delta; });
  const final = await stream.finalResponse();
  out.responses_stream = { final: responseSummary(final), types, argument_deltas: argumentDeltas };
}

process.stdout.write(JSON.stringify(out) + '\n');
