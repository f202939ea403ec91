// Example: one turn against a running suite (`cogmesh up`), rendered as it streams,
// then the same session replayed from a cursor.
//
//   npm run build && node dist/examples/chat.js "What is 17 * 23?"
//
// The gateway address comes from $COGMESH_GATEWAY_ADDR (default 127.0.0.1:50051)
// and the API key, if the gateway wants one, from $COGMESH_API_KEY.
import { CogmeshClient, CogmeshError, ErrorKind, TurnFailedError } from "../src/index.js";

const message = process.argv.slice(2).join(" ") || "What is 17 * 23?";
const client = new CogmeshClient();

try {
  const session = await client.createSession({ agent: "default" });
  console.log(`session ${session.sessionId}`);

  let lastSeq = 0n;
  for await (const event of client.sendMessage(session.sessionId, message)) {
    lastSeq = event.seq;
    const { payload } = event;
    switch (payload.case) {
      case "status":
        console.log(`· ${payload.value.text}`);
        break;
      case "toolCallStarted":
        console.log(`→ ${payload.value.name} ${JSON.stringify(payload.value.arguments)}`);
        break;
      case "toolCallFinished":
        console.log(`← ${payload.value.name}: ${payload.value.resultSummary}`);
        break;
      case "assistantDelta":
        process.stdout.write(payload.value.text);
        break;
      case "final": {
        const m = payload.value.metrics;
        console.log(`\n✓ ${m?.modelCalls} model call(s) · ${m?.toolCalls} tool call(s) · seq ${event.seq}`);
        break;
      }
      case "error":
        console.log(`\n✗ ${ErrorKind[payload.value.kind]}: ${payload.value.message}`);
        break;
    }
  }

  // Any client can read the session's log from a cursor; here, everything after seq 2.
  const kinds: string[] = [];
  for await (const event of client.subscribe(session.sessionId, { afterSeq: 2, stopWhenIdle: true })) {
    kinds.push(`${event.seq}:${event.payload.case}`);
  }
  console.log(`replayed after seq 2 up to ${lastSeq}: ${kinds.join(" ")}`);
} catch (err) {
  if (err instanceof CogmeshError) {
    const fields = err.violations.map((v) => `${v.field}: ${v.description}`).join("; ");
    console.error(`${err.message}${err.reason ? ` (${err.reason})` : ""}${fields ? ` [${fields}]` : ""}`);
  } else if (err instanceof TurnFailedError) {
    console.error(err.message);
  } else {
    throw err;
  }
  process.exitCode = 1;
} finally {
  client.close();
}
