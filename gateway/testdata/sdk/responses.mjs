// The official `openai` npm package's Responses client against a Turbine gateway
// (gateway/responses_node_test.go runs it): non-streaming and streaming answers with
// function tools, a function_call_output turn, a JSON-schema text format, and an error.
// It prints one JSON object that the Go test checks.
//
// Usage: NODE_PATH=<cache>/npm/node_modules node responses.mjs BASE_URL
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url); // CommonJS resolution honours NODE_PATH
const { OpenAI } = require('openai');

const client = new OpenAI({ baseURL: process.argv[2], apiKey: 'unused', maxRetries: 0 });

const tools = [
  {
    type: 'function', name: 'get_weather', description: 'Weather in a city', strict: true,
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'], additionalProperties: false },
  },
  { type: 'function', name: 'get_time', strict: false, parameters: { type: 'object', properties: { tz: { type: 'string' } } } },
];
const question = 'Weather in Paris?';

// summary keeps what the Go test checks of a Response.
function summary(r) {
  return {
    id: r.id, object: r.object, status: r.status, model: r.model, output_text: r.output_text,
    items: r.output.map((it) => {
      switch (it.type) {
        case 'reasoning': return { type: it.type, id: it.id, text: (it.content || []).map((c) => c.text).join('') };
        case 'message': return { type: it.type, id: it.id, status: it.status, text: it.content.map((c) => c.text).join('') };
        case 'function_call': return { type: it.type, id: it.id, call_id: it.call_id, name: it.name, arguments: it.arguments, status: it.status };
        default: return { type: it.type };
      }
    }),
    usage: r.usage, incomplete_details: r.incomplete_details, error: r.error,
  };
}

const out = {};

// 1. Non-streaming, with tools.
const first = await client.responses.create({ model: 'agent', instructions: 'be brief', input: question, tools, reasoning: { effort: 'low' } });
out.create = summary(first);

// 2. The streaming helper: events, then the accumulated final response.
const stream = client.responses.stream({ model: 'agent', instructions: 'be brief', input: question, tools, reasoning: { effort: 'low' } });
const types = [];
let textDeltas = '';
let argDeltas = '';
stream.on('event', (e) => types.push(e.type));
stream.on('response.output_text.delta', (e) => { textDeltas += e.delta; });
stream.on('response.function_call_arguments.delta', (e) => { argDeltas += e.delta; });
const streamed = await stream.finalResponse();
out.stream = { final: summary(streamed), types, text_deltas: textDeltas, argument_deltas: argDeltas };

// 3. create({stream: true}): the raw events, the last one carrying the response.
const raw = await client.responses.create({ model: 'agent', input: question, tools, stream: true });
const rawTypes = [];
const seqs = [];
let completed = null;
for await (const e of raw) {
  rawTypes.push(e.type);
  seqs.push(e.sequence_number);
  if (e.type === 'response.completed') completed = e.response;
}
out.raw_stream = { types: rawTypes, sequence_numbers: seqs, completed: completed && summary(completed) };

// 4. The next turn of the agent loop: the items sent back with the function outputs.
const input = [{ role: 'user', content: question }, ...first.output];
for (const it of first.output) {
  if (it.type === 'function_call') {
    input.push({ type: 'function_call_output', call_id: it.call_id, output: JSON.stringify({ result: `of ${it.name}` }) });
  }
}
const second = await client.responses.create({ model: 'agent', input, tools });
out.tool_result_turn = summary(second);

// 5. Structured output: a JSON schema the answer satisfies.
const schemaResp = await client.responses.create({
  model: 'agent', input: 'Weather as JSON',
  text: { format: { type: 'json_schema', name: 'weather', strict: true, schema: { type: 'object', properties: { city: { type: 'string' }, temp: { type: 'number' } }, required: ['city', 'temp'], additionalProperties: false } } },
});
out.json_schema = { output_text: schemaResp.output_text, parsed: JSON.parse(schemaResp.output_text), format: schemaResp.text.format };

// 6. A refused request surfaces as the SDK's error.
try {
  await client.responses.create({ model: 'agent', input: question, previous_response_id: 'resp_1' });
  out.error = null;
} catch (e) {
  out.error = { status: e.status, code: e.code, param: e.param, type: e.type, message: e.message };
}

process.stdout.write(JSON.stringify(out));
