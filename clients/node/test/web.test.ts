// The browser transport (src/web.ts) against the real suite's browser edge: Connect and
// gRPC-Web over fetch (Node's, the same API a browser has), with the same typed client.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import { CogmeshClient } from "../src/index.js";
import {
  Code,
  CogmeshError,
  CogmeshWebClient,
  createWebTransport,
  is,
  TurnPausedError,
  type WebProtocol,
} from "../src/web.js";
import { startSuite, type Suite } from "./suite.js";

let suite: Suite;

before(async () => {
  suite = await startSuite(["acme", "globex"]);
});

after(async () => {
  await suite?.stop();
});

for (const protocol of ["connect", "grpc-web"] as WebProtocol[]) {
  describe(`browser transport over ${protocol}`, () => {
    const client = () => new CogmeshWebClient({ baseUrl: suite.web, apiKey: suite.keys.acme, protocol });

    test("a turn streams with the calculator call and its answer", async () => {
      const web = client();
      const session = await web.createSession();
      const result = await web.ask(session.sessionId, "What is 17 * 23?");
      assert.equal(result.text, "17 * 23 = 391.");
      const started = result.events.filter((e) => is(e, "toolCallStarted"));
      assert.deepEqual(
        started.map((e) => [e.payload.value.name, e.payload.value.arguments]),
        [["calculator", { expression: "17 * 23" }]],
      );
      // The same log as the gRPC port replays.
      const grpc = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.acme });
      const replayed = [];
      for await (const e of grpc.subscribe(session.sessionId, { stopWhenIdle: true })) replayed.push(e.seq);
      grpc.close();
      assert.deepEqual(
        result.events.map((e) => e.seq),
        replayed,
      );
    });

    test("an approval pauses the careful agent's turn and approve() finishes it", async () => {
      const web = client();
      const session = await web.createSession({ agent: "careful" });
      const paused = await web.ask(session.sessionId, "What is 12 * 12?").then(
        () => assert.fail("the careful agent asks before calculating"),
        (err: unknown) => err,
      );
      assert.ok(paused instanceof TurnPausedError && paused.kind === "approval");
      assert.equal((await web.approve(paused)).text, "12 * 12 = 144.");
    });

    test("errors carry the gateway's reason and field violations", async () => {
      const web = client();
      await assert.rejects(web.getSession("nope"), (err: unknown) => {
        assert.ok(err instanceof CogmeshError);
        assert.equal(err.code, Code.NotFound);
        assert.equal(err.reason, "SESSION_NOT_FOUND");
        return true;
      });
      await assert.rejects(web.gateway.getSession({ sessionId: "" }), (err: unknown) => {
        const error = CogmeshError.from(err);
        assert.equal(error.code, Code.InvalidArgument);
        assert.deepEqual(
          error.violations.map((v) => v.field),
          ["session_id"],
        );
        return true;
      });
    });

    test("a wrong key is UNAUTHENTICATED; tenants stay apart", async () => {
      const wrong = new CogmeshWebClient({ baseUrl: suite.web, apiKey: "cm_wrong", protocol });
      await assert.rejects(wrong.listSessions(), (err: unknown) => {
        assert.ok(err instanceof CogmeshError);
        assert.equal(err.code, Code.Unauthenticated);
        assert.equal(err.reason, "UNAUTHENTICATED");
        return true;
      });
      const mine = await client().createSession();
      const globex = new CogmeshWebClient({ baseUrl: suite.web, apiKey: suite.keys.globex, protocol });
      await assert.rejects(globex.getSession(mine.sessionId), (err: unknown) => {
        assert.equal((err as CogmeshError).reason, "SESSION_NOT_FOUND");
        return true;
      });
    });

    test("a unary deadline ends the call with DEADLINE_EXCEEDED", async () => {
      const web = new CogmeshWebClient({ baseUrl: suite.web, apiKey: suite.keys.acme, protocol, timeoutMs: 1 });
      await assert.rejects(web.listModels(), (err: unknown) => {
        assert.equal((err as CogmeshError).code, Code.DeadlineExceeded);
        return true;
      });
    });
  });
}

test("createWebTransport names a bad protocol", () => {
  assert.throws(
    () => createWebTransport({ baseUrl: "http://x", protocol: "grpc" as WebProtocol }),
    /protocol must be "connect" or "grpc-web", got "grpc"/,
  );
});
