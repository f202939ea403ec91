// Drives the real @ag-ui/client HttpAgent against the browser edge's AG-UI endpoint for
// tests/integration/test_agui.py. The scenario comes as JSON on stdin:
//   {"url": ".../agui/default", "headers": {...}, "threadId": "", "runs": [step, ...]}
// where a step is {"user": "text", "tools": [...], "forwardedProps": {...}} (a new user message),
// {"resume": {"status": "resolved", "payload": {...}}} (answers the last run's interrupts), or
// {"toolResult": {"content": "..."}} (a tool message for each call the last run left pending).
// Every run goes through the client's own pipeline: its schema enforcement and its event
// verifier (verifyEvents), which rejects a stream that breaks AG-UI's event order. What each
// run saw comes back as one JSON document on stdout.
//
// `node run.mjs --selfcheck` feeds the same client a stream that breaks the order (content for
// a message never started) and prints what the verifier said, so the test knows it is active.

import { randomUUID } from "node:crypto";
import { HttpAgent } from "@ag-ui/client";

async function readStdin() {
  const chunks = [];
  for await (const chunk of process.stdin) chunks.push(chunk);
  return JSON.parse(Buffer.concat(chunks).toString("utf8"));
}

function describe(error) {
  return { message: String(error?.message ?? error), status: error?.status ?? null, payload: error?.payload ?? null };
}

async function runStep(agent, step, last) {
  if (step.user !== undefined) {
    agent.addMessage({ id: randomUUID(), role: "user", content: step.user });
  }
  if (step.toolResult !== undefined) {
    for (const toolCallId of last?.pendingToolCallIds ?? []) {
      agent.addMessage({ id: randomUUID(), role: "tool", toolCallId, ...step.toolResult });
    }
  }
  const parameters = { tools: step.tools ?? [], forwardedProps: step.forwardedProps ?? {} };
  if (step.resume !== undefined) {
    parameters.resume = agent.pendingInterrupts.map((interrupt) => ({
      interruptId: interrupt.id,
      status: step.resume.status ?? "resolved",
      ...(step.resume.payload !== undefined ? { payload: step.resume.payload } : {}),
    }));
  }
  const seen = { events: [], outcome: null, interrupts: [], pendingToolCallIds: [], error: null, runError: null };
  try {
    await agent.runAgent(parameters, {
      onEvent: ({ event }) => {
        seen.events.push(event);
      },
      onRunStartedEvent: ({ event }) => {
        // threadId is the cogmesh session: a new thread's id comes back on RUN_STARTED.
        agent.threadId = event.threadId;
      },
      onRunFinishedEvent: (params) => {
        seen.outcome = params.outcome;
        seen.interrupts = params.interrupts ?? [];
        seen.pendingToolCallIds = params.pendingToolCallIds ?? [];
      },
      onRunErrorEvent: ({ event }) => {
        seen.runError = { message: event.message, code: event.code ?? null };
      },
    });
  } catch (error) {
    seen.error = describe(error);
  }
  seen.pendingInterrupts = agent.pendingInterrupts;
  return seen;
}

async function scenario() {
  const input = await readStdin();
  const agent = new HttpAgent({ url: input.url, headers: input.headers ?? {}, threadId: input.threadId ?? "" });
  const runs = [];
  for (const step of input.runs) {
    runs.push(await runStep(agent, step, runs.at(-1)));
  }
  return { runs, messages: agent.messages, state: agent.state, threadId: agent.threadId };
}

async function selfcheck() {
  // A stream whose second event continues a text message nobody started.
  const body = [
    { type: "RUN_STARTED", threadId: "t", runId: "r" },
    { type: "TEXT_MESSAGE_CONTENT", messageId: "m", delta: "hi" },
    { type: "RUN_FINISHED", threadId: "t", runId: "r" },
  ]
    .map((event) => `data: ${JSON.stringify(event)}\n\n`)
    .join("");
  const fetch = async () => new Response(body, { headers: { "content-type": "text/event-stream" } });
  const agent = new HttpAgent({ url: "http://127.0.0.1:1/unused", fetch, threadId: "t" });
  agent.addMessage({ id: randomUUID(), role: "user", content: "hello" });
  try {
    await agent.runAgent({});
    return { rejected: false };
  } catch (error) {
    return { rejected: true, error: describe(error) };
  }
}

const output = process.argv.includes("--selfcheck") ? await selfcheck() : await scenario();
process.stdout.write(JSON.stringify(output));
