// A turn that pauses (for an approval, user input or a client tool) ends its stream
// with a status event in TURN_STATE_PAUSED. live.test.ts answers real pauses; this
// drives the client with an in-process GatewayService (Connect's Node server speaking
// gRPC over HTTP/2) to break a stream exactly before the pause.
import assert from "node:assert/strict";
import { createServer, type Http2Server } from "node:http2";
import { after, before, test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  ApprovalRequiredSchema,
  CogmeshClient,
  GatewayService,
  isPause,
  RuntimeEventSchema,
  StatusUpdateSchema,
  TurnPausedError,
  TurnState,
  type RuntimeEvent,
} from "../src/index.js";

function event(seq: number, payload: RuntimeEvent["payload"]): RuntimeEvent {
  return create(RuntimeEventSchema, { sessionId: "s1", turnId: "t1", seq: BigInt(seq), payload });
}

const TURN = [
  event(1, { case: "status", value: create(StatusUpdateSchema, { state: TurnState.RUNNING, text: "thinking" }) }),
  event(2, {
    case: "approvalRequired",
    value: create(ApprovalRequiredSchema, { actionName: "delete_file", interruptId: "int-1" }),
  }),
  event(3, {
    case: "status",
    value: create(StatusUpdateSchema, { state: TurnState.PAUSED, text: "waiting", interruptId: "int-1" }),
  }),
];

let server: Http2Server;
let client: CogmeshClient;
let subscribeCalls: bigint[] = [];

before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(GatewayService, {
        async *sendMessage(request) {
          if (request.content === "break after the first event") {
            yield { events: [TURN[0]!] };
            throw new ConnectError("gateway going away", Code.Unavailable);
          }
          yield { events: TURN };
        },
        async *subscribe(request, context) {
          subscribeCalls.push(request.afterSeq);
          yield { events: TURN.filter((e) => e.seq > request.afterSeq) };
          // A paused session stays open with heartbeats: the client must stop on its own.
          while (!context.signal.aborted) {
            await new Promise((ok) => setTimeout(ok, 20));
            yield { events: [], heartbeat: true };
          }
        },
      }),
  });
  server = createServer(handler);
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const address = server.address();
  assert.ok(address && typeof address === "object");
  client = new CogmeshClient({ address: `127.0.0.1:${address.port}`, backoffMs: 10 });
});

after(async () => {
  client.close();
  await new Promise<void>((ok) => server.close(() => ok()));
});

async function collect(stream: AsyncIterable<RuntimeEvent>): Promise<RuntimeEvent[]> {
  const events: RuntimeEvent[] = [];
  for await (const e of stream) events.push(e);
  return events;
}

test("sendMessage ends at the pause", async () => {
  const events = await collect(client.sendMessage("s1", "delete it"));
  assert.deepEqual(
    events.map((e) => e.payload.case),
    ["status", "approvalRequired", "status"],
  );
  assert.ok(isPause(events.at(-1)!));
});

test("ask throws TurnPausedError naming the interrupt and the event that asked", async () => {
  await assert.rejects(client.ask("s1", "delete it"), (err: unknown) => {
    assert.ok(err instanceof TurnPausedError);
    assert.equal(err.interruptId, "int-1");
    assert.equal(err.request?.payload.case, "approvalRequired");
    return true;
  });
});

test("a stream broken before the pause resumes through Subscribe and still ends at the pause", async () => {
  subscribeCalls = [];
  const events = await collect(client.sendMessage("s1", "break after the first event"));
  assert.deepEqual(
    events.map((e) => Number(e.seq)),
    [1, 2, 3],
  );
  assert.deepEqual(subscribeCalls, [1n]);
});
