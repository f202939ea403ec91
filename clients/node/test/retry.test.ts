// Rate limits: a call the gateway refuses with RESOURCE_EXHAUSTED and a RetryInfo delay is
// tried again after the delay when that is safe (reads always; createSession and a turn's
// stream only when refused at admission, before any event), within a bounded budget.
// Driven by an in-process GatewayService (Connect's Node server speaking gRPC over HTTP/2)
// that refuses exactly the calls a test asks it to.
import assert from "node:assert/strict";
import { createServer, type Http2Server } from "node:http2";
import { after, before, beforeEach, test } from "node:test";

import { create } from "@bufbuild/protobuf";
import { Code, ConnectError } from "@connectrpc/connect";
import { connectNodeAdapter } from "@connectrpc/connect-node";

import {
  CogmeshClient,
  CogmeshError,
  FinalResultSchema,
  GatewayService,
  RuntimeEventSchema,
  SessionSchema,
  StatusUpdateSchema,
  TurnState,
  type RuntimeEvent,
} from "../src/index.js";
import { ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";

const DELAY_MS = 20;

function event(seq: number, payload: RuntimeEvent["payload"]): RuntimeEvent {
  return create(RuntimeEventSchema, { sessionId: "s1", turnId: "t1", seq: BigInt(seq), payload });
}

const TURN = [
  event(1, { case: "status", value: create(StatusUpdateSchema, { state: TurnState.RUNNING }) }),
  event(2, { case: "final", value: create(FinalResultSchema, { text: "391" }) }),
];

// What the gateway says over its rate: ErrorInfo naming the setting, and RetryInfo.
function refusal(reason = "RATE_LIMITED"): ConnectError {
  return new ConnectError("tenant 'default' exceeded 2 requests/s (burst 1)", Code.ResourceExhausted, undefined, [
    {
      desc: ErrorInfoSchema,
      value: { reason, domain: "cogmesh.dev", metadata: { setting: "COGMESH_TENANT_RATE_PER_S" } },
    },
    { desc: RetryInfoSchema, value: { retryDelay: { seconds: 0n, nanos: DELAY_MS * 1_000_000 } } },
  ]);
}

let server: Http2Server;
let address = "";
let client: CogmeshClient;
// Per method: how many calls to refuse before answering, with which reason; and the calls seen.
let refuse: Record<string, { times: number; reason?: string }> = {};
let calls: Record<string, number> = {};

function admit(method: string): void {
  calls[method] = (calls[method] ?? 0) + 1;
  const rule = refuse[method];
  if (rule && rule.times > 0) {
    rule.times -= 1;
    throw refusal(rule.reason);
  }
}

before(async () => {
  const handler = connectNodeAdapter({
    routes: (router) =>
      router.service(GatewayService, {
        listAgents() {
          admit("listAgents");
          return { agents: [] };
        },
        createSession() {
          admit("createSession");
          return { session: create(SessionSchema, { sessionId: `s${calls.createSession}` }) };
        },
        async *sendMessage(request) {
          admit("sendMessage");
          if (request.content === "fail after the first event") {
            yield { events: [TURN[0]!] };
            throw refusal();
          }
          yield { events: TURN };
        },
        async *subscribe(request) {
          admit("subscribe");
          yield { events: TURN.filter((e) => e.seq > request.afterSeq) };
        },
      }),
  });
  server = createServer(handler);
  await new Promise<void>((ok) => server.listen(0, "127.0.0.1", ok));
  const bound = server.address();
  assert.ok(bound && typeof bound === "object");
  address = `127.0.0.1:${bound.port}`;
  client = new CogmeshClient({ address, backoffMs: 10 });
});

beforeEach(() => {
  refuse = {};
  calls = {};
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

async function rejects(promise: Promise<unknown>): Promise<CogmeshError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof CogmeshError, `expected a CogmeshError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected the call to fail");
}

test("a read refused over the rate waits the RetryInfo delay and succeeds", async () => {
  refuse.listAgents = { times: 2 };
  assert.deepEqual(await client.listAgents(), []);
  assert.equal(calls.listAgents, 3);
});

test("createSession is sent again only when refused at admission (RATE_LIMITED)", async () => {
  refuse.createSession = { times: 1 };
  assert.equal((await client.createSession()).sessionId, "s2");
  assert.equal(calls.createSession, 2);

  calls = {};
  refuse.createSession = { times: 1, reason: "QUOTA_EXCEEDED" }; // a delay, but not the gateway's admission
  const error = await rejects(client.createSession());
  assert.equal(error.code, Code.ResourceExhausted);
  assert.equal(error.reason, "QUOTA_EXCEEDED");
  assert.equal(calls.createSession, 1);
});

test("sendMessage refused before any event is sent again, and the turn's events arrive once", async () => {
  refuse.sendMessage = { times: 1 };
  const events = await collect(client.sendMessage("s1", "What is 17 * 23?"));
  assert.deepEqual(
    events.map((e) => Number(e.seq)),
    [1, 2],
  );
  assert.equal(calls.sendMessage, 2);
});

test("sendMessage that failed after its first event is never sent again", async () => {
  const seen: RuntimeEvent[] = [];
  const error = await rejects(
    (async () => {
      for await (const e of client.sendMessage("s1", "fail after the first event")) seen.push(e);
    })(),
  );
  assert.equal(error.code, Code.ResourceExhausted);
  assert.equal(seen.length, 1);
  assert.equal(calls.sendMessage, 1);
});

test("subscribe refused over the rate waits and replays", async () => {
  refuse.subscribe = { times: 1 };
  const events = await collect(client.subscribe("s1", { stopWhenIdle: true }));
  assert.equal(events.length, 2);
  assert.equal(calls.subscribe, 2);
});

test("the wait is bounded: attempts in all, and the total delay", async () => {
  refuse.listAgents = { times: 100 };
  const error = await rejects(client.listAgents());
  assert.equal(error.reason, "RATE_LIMITED");
  assert.equal(error.metadata.setting, "COGMESH_TENANT_RATE_PER_S");
  assert.equal(error.retryDelayMs, DELAY_MS);
  assert.equal(calls.listAgents, 3); // the default: 3 attempts

  calls = {};
  const impatient = new CogmeshClient({ address, rateLimitWaitMs: DELAY_MS - 1 });
  try {
    await rejects(impatient.listAgents());
    assert.equal(calls.listAgents, 1); // the delay asked for is over the budget: thrown at once
  } finally {
    impatient.close();
  }

  calls = {};
  const never = new CogmeshClient({ address, rateLimitAttempts: 1 });
  try {
    await rejects(never.listAgents());
    assert.equal(calls.listAgents, 1);
  } finally {
    never.close();
  }
});
