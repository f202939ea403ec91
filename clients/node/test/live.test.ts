// The Node client against a live suite: `cogmesh up` as real processes, with API keys.
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { after, before, describe, test } from "node:test";

import {
  Code,
  CogmeshError,
  CogmeshClient,
  is,
  isPause,
  isTerminal,
  TurnPausedError,
  TurnState,
  type RuntimeEvent,
} from "../src/index.js";
import { CuttableProxy, freePort, startSuite, type Suite } from "./suite.js";

let suite: Suite;
let client: CogmeshClient;

before(async () => {
  suite = await startSuite(["acme", "globex"]);
  client = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.acme });
});

after(async () => {
  client?.close();
  await suite?.stop();
});

async function collect(stream: AsyncIterable<RuntimeEvent>): Promise<RuntimeEvent[]> {
  const events: RuntimeEvent[] = [];
  for await (const event of stream) events.push(event);
  return events;
}

function seqs(events: RuntimeEvent[]): number[] {
  return events.map((e) => Number(e.seq));
}

function range(from: number, to: number): number[] {
  return Array.from({ length: to - from + 1 }, (_, i) => from + i);
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

describe("catalogue", () => {
  test("listModels returns the catalogue and its default", async () => {
    const { models, defaultModel } = await client.listModels();
    assert.equal(defaultModel, "cogmesh-local");
    const ids = models.map((m) => m.id);
    assert.ok(ids.includes("cogmesh-local") && ids.includes("claude-sonnet-4-20250514"), ids.join(","));
    const local = models.find((m) => m.id === "cogmesh-local")!;
    assert.ok(local.aliases.includes("local"));
    assert.equal(local.capabilities?.tools, true);
  });

  test("listModels filters by provider", async () => {
    const { models } = await client.listModels({ provider: "anthropic" });
    assert.ok(models.length > 0);
    assert.deepEqual([...new Set(models.map((m) => m.provider))], ["anthropic"]);
  });

  test("listAgents includes the default agent", async () => {
    const agents = await client.listAgents();
    assert.ok(agents.some((a) => a.name === "default"));
  });
});

describe("sessions and turns", () => {
  test("createSession then sendMessage streams the calculator turn as typed events", async () => {
    const session = await client.createSession({ userId: "u1", topicId: "t1", scope: { end_user: "u1" } });
    assert.match(session.sessionId, /.+/);
    assert.equal(session.agent, "default");
    assert.equal(session.tenantId, "acme");
    assert.deepEqual(session.scope, { end_user: "u1" });

    const events = await collect(client.sendMessage(session.sessionId, "What is 17 * 23?"));
    assert.deepEqual(seqs(events), range(1, events.length));
    assert.ok(events.every((e) => e.sessionId === session.sessionId && e.turnId === events[0]!.turnId));
    const started = events.filter((e) => is(e, "toolCallStarted")).map((e) => e.payload.value);
    assert.equal(started.length, 1);
    assert.equal(started[0]!.name, "calculator");
    assert.deepEqual(started[0]!.arguments, { expression: "17 * 23" });
    const finished = events.find((e) => is(e, "toolCallFinished"));
    assert.ok(finished && is(finished, "toolCallFinished"));
    assert.equal(finished.payload.value.ok, true);
    assert.equal(finished.payload.value.correlationId, started[0]!.correlationId);
    const last = events.at(-1)!;
    assert.ok(is(last, "final"), `last event is ${last.payload.case}`);
    assert.equal(last.payload.value.text, "17 * 23 = 391.");
    assert.equal(last.payload.value.metrics?.toolCalls, 1n);
    assert.ok(events.some((e) => is(e, "status") && e.payload.value.state === TurnState.RUNNING));
    const deltas = events.filter((e) => is(e, "assistantDelta")).map((e) => e.payload.value.text);
    assert.equal(deltas.join(""), "17 * 23 = 391.");
  });

  test("ask returns the final answer; getSession and listSessions see the session", async () => {
    const session = await client.createSession();
    const result = await client.ask(session.sessionId, "What is (2 + 3) * 4?");
    assert.equal(result.text, "(2 + 3) * 4 = 20.");
    assert.ok(isTerminal(result.events.at(-1)!));
    const again = await client.getSession(session.sessionId);
    assert.equal(again.messageCount > 0n, true);
    const { sessions } = await client.listSessions({ pageSize: 1000 });
    assert.ok(sessions.some((s) => s.sessionId === session.sessionId));
    assert.equal(await client.deleteSession(session.sessionId), true);
    assert.equal(await client.deleteSession(session.sessionId), false);
  });

  test("cancelTurn on an idle session signals nothing", async () => {
    const session = await client.createSession();
    assert.deepEqual(await client.cancelTurn(session.sessionId), { cancelled: false, turnId: "" });
  });
});

describe("approvals and user input (the careful agent asks before every calculation)", () => {
  async function paused(sessionId: string, content: string): Promise<TurnPausedError> {
    const err = await client.ask(sessionId, content).then(
      () => assert.fail("expected the turn to pause"),
      (e: unknown) => e,
    );
    assert.ok(err instanceof TurnPausedError, `expected TurnPausedError, got ${String(err)}`);
    return err;
  }

  test("answer an approval: approve resumes the turn to its final answer, same turn, seqs continuing", async () => {
    const session = await client.createSession({ agent: "careful" });
    const pause = await paused(session.sessionId, "What is 12 * 12?");
    assert.equal(pause.kind, "approval");
    assert.equal(pause.sessionId, session.sessionId);
    assert.ok(pause.request && is(pause.request, "approvalRequired"));
    assert.equal(pause.request.payload.value.actionName, "calculator");
    assert.deepEqual(pause.request.payload.value.arguments, { expression: "12 * 12" });
    assert.equal(pause.request.payload.value.interruptId, pause.interruptId);

    const result = await client.approve(pause);
    assert.equal(result.text, "12 * 12 = 144.");
    assert.equal(result.turnId, pause.turnId);
    assert.equal(Number(result.events[0]!.seq), Number(pause.event.seq) + 1);
    assert.deepEqual(seqs(result.events), range(Number(pause.event.seq) + 1, Number(result.events.at(-1)!.seq)));
  });

  test("edit runs the call with other arguments; reject gives the model the reason", async () => {
    const session = await client.createSession({ agent: "careful" });
    const edited = await client.edit(await paused(session.sessionId, "What is 2 + 2?"), { expression: "20 + 22" });
    assert.equal(edited.text, "2 + 2 = 42.");
    const rejected = await client.reject(await paused(session.sessionId, "What is 9 - 1?"), "not on a Sunday");
    assert.equal(rejected.text, 'The calculator tool failed: "a human reviewer rejected this call: not on a Sunday".');
  });

  test("resolveApproval streams the resumed turn; a plain {sessionId, interruptId} works too", async () => {
    const session = await client.createSession({ agent: "careful" });
    const pause = await paused(session.sessionId, "What is 6 * 7?");
    const events = await collect(client.resolveApproval(session.sessionId, pause.interruptId, "approve"));
    assert.ok(events.some((e) => is(e, "toolCallFinished") && e.payload.value.resultSummary === "42"));
    const last = events.at(-1)!;
    assert.ok(is(last, "final") && last.payload.value.text === "6 * 7 = 42.");
    const again = await paused(session.sessionId, "What is 1 + 1?");
    const result = await client.approve({ sessionId: again.sessionId, interruptId: again.interruptId });
    assert.equal(result.text, "1 + 1 = 2.");
  });

  test("answer user input: the question's pause, then the resumed answer", async () => {
    const session = await client.createSession({ agent: "careful" });
    const pause = await paused(session.sessionId, "@ask_user Which unit?");
    assert.equal(pause.kind, "userInput");
    assert.ok(pause.request && is(pause.request, "userInputRequested"));
    assert.equal(pause.request.payload.value.prompt, "Which unit?");
    const result = await client.answer(pause, "cm");
    assert.equal(result.text, "The ask_user tool returned: cm");
    // The streaming form pauses at the same place and ends there.
    const events = await collect(client.sendMessage(session.sessionId, "@ask_user Which colour?"));
    assert.ok(isPause(events.at(-1)!));
    const id = (events.at(-1)! as { payload: { value: { interruptId: string } } }).payload.value.interruptId;
    const resumed = await collect(client.answerInterrupt(session.sessionId, id, { userInput: "blue" }));
    const last = resumed.at(-1)!;
    assert.ok(is(last, "final") && last.payload.value.text === "The ask_user tool returned: blue");
  });

  test("a paused session refuses new messages: FAILED_PRECONDITION, TURN_IN_PROGRESS, interrupt_id in metadata", async () => {
    const session = await client.createSession({ agent: "careful" });
    const pause = await paused(session.sessionId, "What is 3 * 3?");
    const busy = await rejects(client.ask(session.sessionId, "hello"));
    assert.equal(busy.code, Code.FailedPrecondition);
    assert.equal(busy.codeName, "FAILED_PRECONDITION");
    assert.equal(busy.reason, "TURN_IN_PROGRESS");
    assert.equal(busy.metadata.interrupt_id, pause.interruptId);
    // An answer of the wrong kind is INVALID_ARGUMENT naming the field, and the turn stays paused.
    const wrong = await rejects(
      collect(client.answerInterrupt(session.sessionId, pause.interruptId, { userInput: "9" })),
    );
    assert.equal(wrong.code, Code.InvalidArgument);
    assert.deepEqual(
      wrong.violations.map((v) => v.field),
      ["user_input"],
    );
    const bogus = await rejects(collect(client.resolveApproval(session.sessionId, "int_nope", "approve")));
    assert.equal(bogus.code, Code.NotFound);
    assert.equal((await client.approve(pause)).text, "3 * 3 = 9.");
    // Answering again once the turn resumed and ended: NOT_FOUND, with its reason.
    const late = await rejects(client.approve(pause));
    assert.equal(late.code, Code.NotFound);
    assert.equal(late.reason, "TURN_NOT_FOUND");
  });

  test("bad answers from JavaScript are TypeError / RangeError naming the argument, before any call", async () => {
    const pause = { sessionId: "s", interruptId: "i" };
    await assert.rejects(collect(client.resolveApproval("s", "i", "maybe" as never)), (err: Error) => {
      return (
        err instanceof RangeError && /decision must be "approve", "edit" or "reject", got "maybe"/.test(err.message)
      );
    });
    await assert.rejects(collect(client.resolveApproval("s", "i", 7 as never)), RangeError);
    await assert.rejects(client.edit(pause, [1, 2] as never), /editedArguments must be a JSON object, got an array/);
    await assert.rejects(
      client.edit(pause, { when: new Date() } as never),
      /editedArguments.when must be JSON \(null, string, number, boolean, array or plain object\), got object/,
    );
    await assert.rejects(collect(client.resolveApproval("s", "i", "edit")), /editedArguments is required/);
    await assert.rejects(client.approve(null as never), /approve: interrupt must be a TurnPausedError/);
    await assert.rejects(
      client.answer({ sessionId: "s" } as never, "x"),
      /interruptId must be a string, got undefined/,
    );
    await assert.rejects(
      collect(client.answerInterrupt("s", "i", {} as never)),
      /exactly one of userInput and toolResult/,
    );
    const session = await client.createSession({ agent: "careful" });
    const question = await paused(session.sessionId, "@ask_user Which unit?");
    await assert.rejects(client.approve(question), /approve: the turn waits for user input, not for an approval/);
    assert.equal((await client.answer(question, "m")).text, "The ask_user tool returned: m");
  });
});

describe("subscribe", () => {
  test("replays from a cursor exactly the events after it", async () => {
    const session = await client.createSession();
    const turn = await collect(client.sendMessage(session.sessionId, "What is 6 * 7?"));
    const second = await collect(client.sendMessage(session.sessionId, "hello there"));
    const all = [...turn, ...second];
    const replay = await collect(client.subscribe(session.sessionId, { afterSeq: 3, stopWhenIdle: true }));
    assert.deepEqual(seqs(replay), range(4, all.length));
    assert.deepEqual(
      replay.map((e) => e.payload.case),
      all.slice(3).map((e) => e.payload.case),
    );
    const fromBigint = await collect(client.subscribe(session.sessionId, { afterSeq: 5n, stopWhenIdle: true }));
    assert.equal(fromBigint[0]!.seq, 6n);
  });

  test("follows live turns from another client", async () => {
    const session = await client.createSession();
    const watcher = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.acme });
    try {
      const seen: RuntimeEvent[] = [];
      const following = (async () => {
        for await (const event of watcher.subscribe(session.sessionId)) {
          seen.push(event);
          if (seen.filter(isTerminal).length === 2) break; // leaving the loop ends the stream
        }
      })();
      await client.ask(session.sessionId, "What is 1 + 1?");
      await client.ask(session.sessionId, "What is 2 + 2?");
      await following;
      assert.deepEqual(seqs(seen), range(1, seen.length));
      const finals = seen.filter((e) => is(e, "final")).map((e) => (is(e, "final") ? e.payload.value.text : ""));
      assert.deepEqual(finals, ["1 + 1 = 2.", "2 + 2 = 4."]);
    } finally {
      watcher.close();
    }
  });

  test("a broken Subscribe stream resumes from its last seq: every event once, in order", async () => {
    const session = await client.createSession();
    // A long echo makes hundreds of events, more than fit in flight, so the cut lands mid-replay.
    const words = Array.from({ length: 3000 }, (_, i) => `w${i}`).join(" ");
    const turn = await collect(client.sendMessage(session.sessionId, words));
    assert.ok(turn.length > 500, `only ${turn.length} events`);
    const proxy = await new CuttableProxy(suite.gateway).start();
    const viaProxy = new CogmeshClient({ address: proxy.address, apiKey: suite.keys.acme, backoffMs: 20 });
    try {
      const seen: RuntimeEvent[] = [];
      for await (const event of viaProxy.subscribe(session.sessionId, { stopWhenIdle: true })) {
        seen.push(event);
        if (seen.length === 1) assert.ok(proxy.cut() > 0);
      }
      assert.ok(proxy.accepted >= 2, "the client did not reconnect: the cut did not break the stream");
      assert.deepEqual(seqs(seen), range(1, turn.length));
      assert.ok(is(seen.at(-1)!, "final"));
    } finally {
      viaProxy.close();
      await proxy.stop();
    }
  });

  test("a SendMessage stream that breaks mid-turn finishes the turn through Subscribe", async () => {
    const session = await client.createSession();
    const proxy = await new CuttableProxy(suite.gateway).start();
    const viaProxy = new CogmeshClient({ address: proxy.address, apiKey: suite.keys.acme, backoffMs: 20 });
    try {
      const words = Array.from({ length: 3000 }, (_, i) => `v${i}`).join(" ");
      const seen: RuntimeEvent[] = [];
      for await (const event of viaProxy.sendMessage(session.sessionId, words)) {
        seen.push(event);
        if (seen.length === 1) assert.ok(proxy.cut() > 0);
      }
      assert.ok(proxy.accepted >= 2, "the client did not reconnect: the cut did not break the stream");
      assert.deepEqual(seqs(seen), range(1, seen.length));
      const last = seen.at(-1)!;
      assert.ok(is(last, "final"));
      const text = seen
        .filter((e) => is(e, "assistantDelta"))
        .map((e) => (is(e, "assistantDelta") ? e.payload.value.text : ""));
      assert.equal(text.join(""), last.payload.value.text);
      const logged = await collect(client.subscribe(session.sessionId, { stopWhenIdle: true }));
      assert.deepEqual(seqs(seen), seqs(logged));
    } finally {
      viaProxy.close();
      await proxy.stop();
    }
  });

  test("heartbeats of an idle session reach onHeartbeat (the suite runs with COGMESH_HEARTBEAT_S=1)", async () => {
    const session = await client.createSession();
    const controller = new AbortController();
    let beats = 0;
    const stream = client.subscribe(session.sessionId, {
      signal: controller.signal,
      onHeartbeat: () => {
        beats += 1;
        if (beats === 2) controller.abort();
      },
    });
    const err = await rejects(collect(stream));
    assert.equal(err.code, Code.Canceled);
    assert.equal(beats, 2);
  });
});

describe("errors in Node's idiom", () => {
  test("missing fields are INVALID_ARGUMENT naming the field", async () => {
    const err = await rejects(client.getSession(""));
    assert.equal(err.code, Code.InvalidArgument);
    assert.equal(err.codeName, "INVALID_ARGUMENT");
    assert.equal(err.reason, "INVALID_ARGUMENT");
    assert.deepEqual(
      err.violations.map((v) => v.field),
      ["session_id"],
    );
    const session = await client.createSession();
    const empty = await rejects(collect(client.sendMessage(session.sessionId, "")));
    assert.deepEqual(
      empty.violations.map((v) => v.field),
      ["content"],
    );
  });

  test("a cursor ahead of the log is INVALID_ARGUMENT on after_seq", async () => {
    const session = await client.createSession();
    const err = await rejects(collect(client.subscribe(session.sessionId, { afterSeq: 99 })));
    assert.equal(err.code, Code.InvalidArgument);
    assert.deepEqual(
      err.violations.map((v) => v.field),
      ["after_seq"],
    );
  });

  test("unknown sessions and agents are NOT_FOUND with their reason", async () => {
    const missing = await rejects(client.getSession("no-such-session"));
    assert.equal(missing.code, Code.NotFound);
    assert.equal(missing.reason, "SESSION_NOT_FOUND");
    const agent = await rejects(client.createSession({ agent: "no-such-agent" }));
    assert.equal(agent.reason, "AGENT_NOT_FOUND");
  });

  test("wrong JavaScript types are a TypeError naming the argument, before any call", async () => {
    await assert.rejects(client.getSession(42 as unknown as string), /sessionId must be a string, got number/);
    await assert.rejects(
      collect(client.subscribe("s", { afterSeq: -1 })),
      (err: Error) => err instanceof TypeError && /afterSeq must be a non-negative integer/.test(err.message),
    );
    await assert.rejects(
      collect(client.sendMessage("s", { text: "hi" } as unknown as string)),
      /content must be a string, got object/,
    );
    assert.throws(
      () => new CogmeshClient({ transport: {} as never, apiKey: "k" }),
      /transport cannot be combined with apiKey/,
    );
  });

  test("no key or a wrong key is UNAUTHENTICATED; another tenant's session is NOT_FOUND", async () => {
    const anonymous = new CogmeshClient({ address: suite.gateway, apiKey: "" });
    const wrong = new CogmeshClient({ address: suite.gateway, apiKey: "cm_wrong" });
    const globex = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.globex });
    try {
      const none = await rejects(anonymous.listModels());
      assert.equal(none.code, Code.Unauthenticated);
      assert.equal(none.reason, "UNAUTHENTICATED");
      assert.equal((await rejects(wrong.listAgents())).code, Code.Unauthenticated);
      const session = await client.createSession();
      assert.equal((await rejects(globex.getSession(session.sessionId))).reason, "SESSION_NOT_FOUND");
    } finally {
      for (const c of [anonymous, wrong, globex]) c.close();
    }
  });

  test("an unreachable gateway is UNAVAILABLE: idempotent calls retried, others not", async () => {
    const attempts: string[] = [];
    const down = new CogmeshClient({
      address: `127.0.0.1:${await freePort()}`, // nothing listens there
      maxAttempts: 3,
      backoffMs: 10,
      interceptors: [(next) => (req) => (attempts.push(req.method.name), next(req))],
    });
    try {
      const refused = await rejects(down.listModels());
      assert.equal(refused.code, Code.Unavailable);
      assert.equal(refused.broken, true);
      assert.deepEqual(attempts, ["ListModels", "ListModels", "ListModels"]);
      attempts.length = 0;
      assert.equal((await rejects(down.createSession())).code, Code.Unavailable);
      assert.deepEqual(attempts, ["CreateSession"]);
    } finally {
      down.close();
    }
  });
});

describe("closing and aborting", () => {
  test("abort() ends an open stream with CANCELED, promptly", async () => {
    const session = await client.createSession();
    const controller = new AbortController();
    const stream = client.subscribe(session.sessionId, { signal: controller.signal });
    setTimeout(() => controller.abort(), 100);
    const started = Date.now();
    const err = await rejects(collect(stream));
    assert.equal(err.code, Code.Canceled);
    assert.match(err.message, /aborted by the caller/);
    assert.ok(Date.now() - started < 5_000);
  });

  test("close() ends open streams and later calls with CANCELED", async () => {
    const other = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.acme });
    const session = await other.createSession();
    const open = collect(other.subscribe(session.sessionId));
    await new Promise((ok) => setTimeout(ok, 100));
    other.close();
    const err = await rejects(open);
    assert.equal(err.code, Code.Canceled);
    assert.match(err.message, /client is closed/);
    assert.match((await rejects(other.listModels())).message, /client is closed/);
    assert.equal(other.closed, true);
  });
});

describe("example", () => {
  const example = fileURLToPath(new URL("../examples/chat.js", import.meta.url));
  const run = (env: Record<string, string>, ...args: string[]) =>
    promisify(execFile)(process.execPath, [example, ...args], { env: { ...process.env, ...env }, timeout: 30_000 });

  test("examples/chat runs a turn against the suite and replays it from a cursor", async () => {
    const { stdout } = await run(
      { COGMESH_GATEWAY_ADDR: suite.gateway, COGMESH_API_KEY: suite.keys.acme! },
      "What is 17 * 23?",
    );
    assert.match(stdout, /^session \S+$/m);
    assert.match(stdout, /→ calculator \{"expression":"17 \* 23"\}/);
    assert.match(stdout, /← calculator: 391/);
    assert.match(stdout, /^17 \* 23 = 391\.$/m);
    assert.match(stdout, /✓ 2 model call\(s\) · 1 tool call\(s\) · seq (\d+)/);
    assert.match(stdout, /replayed after seq 2 up to \d+: 3:\w+ 4:/);
  });

  test("examples/chat reports a missing key as UNAUTHENTICATED and exits 1", async () => {
    await assert.rejects(
      run({ COGMESH_GATEWAY_ADDR: suite.gateway, COGMESH_API_KEY: "" }),
      (err: { code: number; stderr: string }) => {
        assert.equal(err.code, 1);
        assert.match(err.stderr, /^UNAUTHENTICATED: .* \(UNAUTHENTICATED\)$/m);
        return true;
      },
    );
  });
});
