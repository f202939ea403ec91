// The openai npm package against cogmesh's OpenAI-compatible API: node run.mjs <base_url> <api_key>.
// Prints one JSON object of what it saw; tests/integration/test_openai_api.py checks it.
import OpenAI from "openai";

const [baseURL, apiKey] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0 });
const SESSION = "x-cogmesh-session";
const weather = {
  type: "function",
  function: {
    name: "weather",
    description: "The weather in a city.",
    parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
  },
};
const results = {};

// Streaming text.
const stream = await client.chat.completions.create({
  model: "default",
  messages: [{ role: "user", content: "Hi from Node" }],
  stream: true,
});
let streamed = "";
let streamedChunks = 0;
for await (const chunk of stream) {
  streamed += chunk.choices[0]?.delta?.content ?? "";
  streamedChunks += 1;
}
results.streamed = streamed;
results.streamedChunks = streamedChunks;

// A whole completion, with the response's headers.
const { data: whole, response } = await client.chat.completions
  .create({ model: "default", messages: [{ role: "user", content: "What is 17 * 23?" }] })
  .withResponse();
results.whole = whole.choices[0].message.content;
const sessionId = response.headers.get(SESSION);

// A continued session: the header names it, and the turn's model call sees the first turn.
const first = await client.chat.completions.create({ model: "default", messages: [{ role: "user", content: "hi" }] });
const { data: continued, response: continuedResponse } = await client.chat.completions
  .create({ model: "default", messages: [{ role: "user", content: "hi" }] }, { headers: { [SESSION]: sessionId } })
  .withResponse();
results.sessionEchoed = continuedResponse.headers.get(SESSION) === sessionId && continued.cogmesh.session_id === sessionId;
results.continuedPromptTokensGrew = continued.usage.prompt_tokens > first.usage.prompt_tokens;

// A client tool turn: the call, then the tool message that answers it.
const messages = [{ role: "user", content: '@weather {"city": "Paris"}' }];
const asked = await client.chat.completions.create({ model: "default", messages, tools: [weather] });
const call = asked.choices[0].message.tool_calls[0];
results.toolCall = { name: call.function.name, arguments: JSON.parse(call.function.arguments) };
messages.push(asked.choices[0].message, { role: "tool", tool_call_id: call.id, content: "12°C" });
const answered = await client.chat.completions.create({ model: "default", messages, tools: [weather] });
results.toolAnswer = answered.choices[0].message.content;

// Errors, as the package's typed errors.
async function failure(run) {
  try {
    await run();
    return null;
  } catch (error) {
    return { status: error.status, name: error.constructor.name, code: error.code };
  }
}
const stranger = new OpenAI({ baseURL, apiKey: "wrong", maxRetries: 0 });
results.badKey = await failure(() =>
  stranger.chat.completions.create({ model: "default", messages: [{ role: "user", content: "hi" }] }),
);
results.unknownAgent = await failure(() =>
  client.chat.completions.create({ model: "nobody", messages: [{ role: "user", content: "hi" }] }),
);

// The Responses API: whole, streamed through the package's accumulating helper, and continued.
const made = await client.responses.create({ model: "default", input: "What is 6 * 7?" });
results.response = made.output_text;
const responseStream = client.responses.stream({ model: "default", input: "Streaming response" });
const final = await responseStream.finalResponse();
results.responseStreamed = final.output_text;
const next = await client.responses.create({ model: "default", input: "again", previous_response_id: final.id });
results.responseContinued = next.output_text;

console.log(JSON.stringify(results));
