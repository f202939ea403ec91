// Time travel against a live suite (`cogmesh up` as real processes, with API keys): a session's
// turns and conversation as they were, forks at a turn (after it or before it), and rewinds whose
// `rewound` event voids the dropped turns' events for every watcher.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import {
  Code,
  CogmeshClient,
  CogmeshError,
  is,
  Role,
  TurnOutcome,
  TurnPausedError,
  TurnStepKind,
  voided,
  withoutVoided,
  type Message,
  type RuntimeEvent,
  type TurnRecord,
} from "../src/index.js";
import { startSuite, type Suite } from "./suite.js";

let suite: Suite;
let client: CogmeshClient;
let other: CogmeshClient; // another tenant

before(async () => {
  suite = await startSuite(["acme", "globex"]);
  client = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.acme });
  other = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.globex });
});

after(async () => {
  client?.close();
  other?.close();
  await suite?.stop();
});

const QUESTIONS = ["What is 2 + 2?", "What is 3 * 3?", "What is 10 - 4?"];

async function rejects(promise: Promise<unknown>): Promise<CogmeshError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof CogmeshError, `expected a CogmeshError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected the call to fail");
}

/** A session of the default agent with one completed calculator turn per question. */
async function sessionWithTurns(): Promise<{ sessionId: string; answers: string[] }> {
  const session = await client.createSession();
  const answers: string[] = [];
  for (const question of QUESTIONS) answers.push((await client.ask(session.sessionId, question)).text);
  return { sessionId: session.sessionId, answers };
}

async function allTurns(sessionId: string, pageSize = 0): Promise<TurnRecord[]> {
  const turns: TurnRecord[] = [];
  let pageToken = "";
  do {
    const page = await client.listTurns(sessionId, { pageSize, pageToken, includeSteps: true });
    turns.push(...page.turns);
    pageToken = page.nextPageToken;
  } while (pageToken);
  return turns;
}

async function allMessages(sessionId: string, throughTurnId?: string): Promise<Message[]> {
  const messages: Message[] = [];
  let pageToken = "";
  do {
    const page = await client.listMessages(sessionId, { pageToken, throughTurnId });
    messages.push(...page.messages);
    pageToken = page.nextPageToken;
  } while (pageToken);
  return messages;
}

const said = (messages: Message[]) => messages.map((m) => `${Role[m.role]}: ${m.content}`);

async function replay(sessionId: string): Promise<RuntimeEvent[]> {
  const events: RuntimeEvent[] = [];
  for await (const event of client.subscribe(sessionId, { stopWhenIdle: true })) events.push(event);
  return events;
}

describe("history", () => {
  test("listTurns: each turn's question, outcome, seq range and steps, oldest first, paged", async () => {
    const { sessionId } = await sessionWithTurns();
    const turns = await allTurns(sessionId, 2);
    assert.deepEqual(
      turns.map((t) => t.userMessage),
      QUESTIONS,
    );
    assert.deepEqual(
      turns.map((t) => t.index),
      [1, 2, 3],
    );
    const first = await client.listTurns(sessionId, { pageSize: 2 });
    assert.equal(first.turns.length, 2);
    assert.notEqual(first.nextPageToken, "");
    assert.ok(
      first.turns.every((t) => t.steps.length === 0),
      "steps only when asked for",
    );

    const events = await replay(sessionId);
    let previous = 0n;
    for (const turn of turns) {
      assert.equal(turn.outcome, TurnOutcome.COMPLETED);
      assert.equal(turn.agent, "default");
      assert.ok(turn.firstSeq > previous && turn.lastSeq >= turn.firstSeq, `${turn.firstSeq}..${turn.lastSeq}`);
      previous = turn.lastSeq;
      const own = events.filter((e) => e.turnId === turn.turnId).map((e) => e.seq);
      assert.deepEqual([own[0], own.at(-1)], [turn.firstSeq, turn.lastSeq]);
      const kinds = new Set(turn.steps.map((s) => s.kind));
      for (const kind of [TurnStepKind.REQUEST, TurnStepKind.MODEL_CALL, TurnStepKind.TOOL_CALL]) {
        assert.ok(kinds.has(kind), `turn ${turn.index} lacks a ${TurnStepKind[kind]} step: ${[...kinds]}`);
      }
      assert.ok(turn.steps.some((s) => s.summary.includes("calculator")));
      assert.ok(turn.messageCount > 0);
    }
  });

  test("listMessages: the whole conversation, or as it was after a turn", async () => {
    const { sessionId, answers } = await sessionWithTurns();
    const turns = await allTurns(sessionId);
    const whole = await allMessages(sessionId);
    assert.equal(
      whole.length,
      turns.reduce((n, t) => n + t.messageCount, 0),
    );
    const afterFirst = await allMessages(sessionId, turns[0]!.turnId);
    assert.equal(afterFirst.length, turns[0]!.messageCount);
    assert.deepEqual(said(afterFirst), said(whole).slice(0, afterFirst.length));
    assert.equal(afterFirst[0]!.content, QUESTIONS[0]);
    assert.equal(afterFirst.at(-1)!.content, answers[0]);
    const small = await client.listMessages(sessionId, { pageSize: 1 });
    assert.equal(small.messages.length, 1);
    assert.notEqual(small.nextPageToken, "");

    const unknown = await rejects(client.listMessages(sessionId, { throughTurnId: "no-such-turn" }));
    assert.equal(unknown.code, Code.NotFound);
  });
});

describe("fork", () => {
  test("forkSession after a turn: the conversation up to it, where it came from, the original untouched", async () => {
    const { sessionId, answers } = await sessionWithTurns();
    const turns = await allTurns(sessionId);
    const { session: fork, messageCount } = await client.forkSession(sessionId, {
      turnId: turns[0]!.turnId,
      labels: { experiment: "b" },
    });
    assert.notEqual(fork.sessionId, sessionId);
    assert.equal(fork.forkedFrom?.sessionId, sessionId);
    assert.equal(fork.forkedFrom?.turnId, turns[0]!.turnId);
    assert.ok(fork.forkedFrom?.forkTime);
    assert.deepEqual(fork.labels, { experiment: "b" });
    assert.equal(fork.agent, "default");
    const upToFirst = await allMessages(sessionId, turns[0]!.turnId);
    assert.equal(messageCount, upToFirst.length);
    assert.deepEqual(said(await allMessages(fork.sessionId)), said(upToFirst));

    // The fork goes on on its own; the original keeps its three turns.
    const next = await client.ask(fork.sessionId, "What is 6 * 7?");
    assert.equal(next.text, "6 * 7 = 42.");
    assert.equal((await allTurns(sessionId)).length, 3);
    assert.equal((await allMessages(sessionId)).at(-1)!.content, answers[2]);

    const { sessions } = await client.listSessions({ forkedFrom: sessionId, pageSize: 100 });
    assert.deepEqual(
      sessions.map((s) => s.sessionId),
      [fork.sessionId],
    );
  });

  test("forkSession before a turn, to another agent: the turn can be sent again there", async () => {
    const { sessionId } = await sessionWithTurns();
    const turns = await allTurns(sessionId);
    const { session: fork, messageCount } = await client.forkSession(sessionId, {
      turnId: turns[1]!.turnId,
      beforeTurn: true,
      agent: "careful",
    });
    assert.equal(fork.agent, "careful");
    // The origin names the last turn the fork holds: the one before.
    assert.equal(fork.forkedFrom?.turnId, turns[0]!.turnId);
    assert.equal(messageCount, turns[0]!.messageCount);
    // The careful agent asks before it calculates: the turn sent again pauses for an approval.
    const paused = await client.ask(fork.sessionId, turns[1]!.userMessage).then(
      () => assert.fail("the careful agent should pause"),
      (err: unknown) => err,
    );
    assert.ok(paused instanceof TurnPausedError);
    assert.equal((await client.approve(paused)).text, "3 * 3 = 9.");
  });

  test("forkSession before the first turn: an empty conversation, no turn in its origin", async () => {
    const { sessionId } = await sessionWithTurns();
    const turns = await allTurns(sessionId);
    const { session: fork, messageCount } = await client.forkSession(sessionId, {
      turnId: turns[0]!.turnId,
      beforeTurn: true,
    });
    assert.equal(messageCount, 0);
    assert.equal(fork.forkedFrom?.sessionId, sessionId);
    assert.equal(fork.forkedFrom?.turnId, "");
    assert.deepEqual(await allMessages(fork.sessionId), []);
  });

  test("forkSession with no turn forks after the last; errors name what is wrong", async () => {
    const { sessionId } = await sessionWithTurns();
    const whole = await allMessages(sessionId);
    const { session: fork, messageCount } = await client.forkSession(sessionId);
    assert.equal(messageCount, whole.length);
    assert.equal(fork.forkedFrom?.turnId, (await allTurns(sessionId)).at(-1)!.turnId);

    assert.equal((await rejects(client.forkSession(sessionId, { turnId: "no-such-turn" }))).code, Code.NotFound);
    assert.equal((await rejects(client.forkSession("no-such-session"))).code, Code.NotFound);
    // Another tenant's session is not there for this key.
    assert.equal((await rejects(other.forkSession(sessionId))).code, Code.NotFound);
    await assert.rejects(
      client.forkSession(sessionId, { beforeTurn: "yes" as never }),
      (err: Error) => err instanceof TypeError && /beforeTurn must be a boolean/.test(err.message),
    );
    await assert.rejects(
      client.forkSession(sessionId, { labels: { team: 7 } as never }),
      (err: Error) => err instanceof TypeError && /labels.team must be a string/.test(err.message),
    );
  });
});

describe("rewind", () => {
  test("rewindSession drops the turn and every later one; watchers get the rewound event and its void range", async () => {
    const { sessionId, answers } = await sessionWithTurns();
    const turns = await allTurns(sessionId);
    const watcher = new AbortController();
    const seen: RuntimeEvent[] = [];
    const watching = (async () => {
      for await (const event of client.subscribe(sessionId, { signal: watcher.signal })) {
        seen.push(event);
        if (is(event, "rewound")) return;
      }
    })();

    const { session, event } = await client.rewindSession(sessionId, turns[1]!.turnId);
    const rewound = event.payload.value;
    assert.equal(rewound.turnId, turns[1]!.turnId);
    assert.deepEqual(rewound.droppedTurnIds, [turns[1]!.turnId, turns[2]!.turnId]);
    assert.equal(rewound.voidAfterSeq, turns[1]!.firstSeq - 1n);
    assert.equal(rewound.voidThroughSeq, turns[2]!.lastSeq);
    assert.equal(rewound.droppedMessageCount, turns[1]!.messageCount + turns[2]!.messageCount);
    assert.equal(rewound.reason, "rewind");
    assert.ok(event.seq > turns[2]!.lastSeq);
    assert.equal(session.messageCount, BigInt(turns[0]!.messageCount));

    await watching;
    watcher.abort();
    assert.equal(seen.at(-1)!.seq, event.seq);
    // The log keeps everything; what still counts is the first turn and the rewind.
    const counted = withoutVoided(seen);
    assert.deepEqual(
      new Set(counted.map((e) => e.turnId).filter((id) => id !== event.turnId)),
      new Set([turns[0]!.turnId]),
    );
    assert.equal(voided(seen).size, Number(rewound.voidThroughSeq - rewound.voidAfterSeq));

    const left = await allTurns(sessionId);
    assert.deepEqual(
      left.map((t) => t.turnId),
      [turns[0]!.turnId],
    );
    const conversation = await allMessages(sessionId);
    assert.equal(conversation.at(-1)!.content, answers[0]);
    assert.ok(!said(conversation).some((line) => line.includes(QUESTIONS[1]!)));

    // The session goes on from the first turn.
    assert.equal((await client.ask(sessionId, "What is 5 + 5?")).text, "5 + 5 = 10.");
    assert.deepEqual(
      (await allTurns(sessionId)).map((t) => t.userMessage),
      [QUESTIONS[0], "What is 5 + 5?"],
    );
  });

  test("rewindSession is refused while a turn is paused; unknown turns are NOT_FOUND", async () => {
    const session = await client.createSession({ agent: "careful" });
    const paused = async (question: string): Promise<TurnPausedError> => {
      const err = await client.ask(session.sessionId, question).then(
        () => assert.fail("the careful agent should pause"),
        (e: unknown) => e,
      );
      assert.ok(err instanceof TurnPausedError);
      return err;
    };
    const first = await client.approve(await paused("What is 12 * 12?"));
    const waiting = await paused("What is 2 * 3?");
    const busy = await rejects(client.rewindSession(session.sessionId, first.turnId));
    assert.equal(busy.code, Code.FailedPrecondition);
    assert.equal(busy.reason, "TURN_IN_PROGRESS");
    await client.approve(waiting);

    assert.equal((await rejects(client.rewindSession(session.sessionId, "no-such-turn"))).code, Code.NotFound);
    const missing = await rejects(client.rewindSession(session.sessionId, ""));
    assert.equal(missing.code, Code.InvalidArgument);
    assert.deepEqual(
      missing.violations.map((v) => v.field),
      ["turn_id"],
    );
    await assert.rejects(
      client.rewindSession(session.sessionId, undefined as never),
      (err: Error) => err instanceof TypeError && /turnId must be a string/.test(err.message),
    );
  });
});
