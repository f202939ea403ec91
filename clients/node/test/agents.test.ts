// Agents as versioned resources against a live suite (`cogmesh up` as real processes, with API keys):
// versions, aliases and reads; sessions opened on "name@alias" that keep their version until moved;
// sessions listed by agent version; and the gateway's refusals as typed CogmeshErrors.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";

import type { JsonObject } from "@bufbuild/protobuf";

import { Code, CogmeshClient, CogmeshError, type Session } from "../src/index.js";
import { startSuite, type Suite } from "./suite.js";

let suite: Suite;
let admin: CogmeshClient; // acme's key, with agents:write
let other: CogmeshClient; // globex's key: another tenant, read-only

before(async () => {
  suite = await startSuite(["acme", "globex"], undefined, { permissions: { acme: ["agents:write"] } });
  admin = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.acme });
  other = new CogmeshClient({ address: suite.gateway, apiKey: suite.keys.globex });
});

after(async () => {
  admin?.close();
  other?.close();
  await suite?.stop();
});

async function rejects(promise: Promise<unknown>): Promise<CogmeshError> {
  try {
    await promise;
  } catch (err) {
    assert.ok(err instanceof CogmeshError, `expected a CogmeshError, got ${String(err)}`);
    return err;
  }
  assert.fail("expected the call to fail");
}

/** A definition the local model runs like the built-in default: the calculator and an inline prompt. */
function definition(prompt: string, fields: JsonObject = {}): JsonObject {
  return { model: "local", tools: ["calculator"], system_prompt: prompt, ...fields };
}

/** Every session of a filter: a filtered page may be short (even empty) while more pages follow. */
async function allSessions(filter: { agent?: string; agentVersion?: number }): Promise<Session[]> {
  const found: Session[] = [];
  let pageToken = "";
  do {
    const page = await admin.listSessions({ ...filter, pageSize: 100, pageToken });
    found.push(...page.sessions);
    pageToken = page.nextPageToken;
  } while (pageToken);
  return found;
}

describe("agents as versioned resources", () => {
  test("versions, aliases and reads by version or alias", async () => {
    const created = await admin.createAgent("notes", definition("You take notes.", { description: "v1" }));
    assert.equal(created.version, 1n);
    assert.equal(created.createdBy, "acme-node-test");
    assert.equal(created.native, false);
    assert.equal(created.definition?.description, "v1");

    const updated = await admin.updateAgent("notes", definition("You take notes.", { description: "v2" }), {
      expectedVersion: 1,
    });
    assert.equal(updated.version, 2n);
    // Another change came first: the caller read version 1, the agent is at 2.
    const stale = await rejects(admin.updateAgent("notes", definition("stale"), { expectedVersion: 1n }));
    assert.equal(stale.code, Code.Aborted);

    const alias = await admin.setAgentAlias("notes", "prod", 1);
    assert.equal(alias.previousVersion, 0n);
    assert.deepEqual(alias.agent.aliases, ["prod"]);
    assert.equal((await admin.getAgent("notes")).version, 2n);
    assert.equal((await admin.getAgent("notes@prod")).version, 1n);
    assert.equal((await admin.getAgent("notes", { alias: "prod" })).definition?.description, "v1");
    assert.equal((await admin.getAgent("notes", { version: 2 })).definition?.description, "v2");
    assert.equal((await admin.getAgent("notes@1")).version, 1n);

    const page = await admin.listAgentVersions("notes");
    assert.deepEqual(
      page.versions.map((v) => v.version),
      [2n, 1n],
    );
    assert.deepEqual(page.aliases, { prod: 1n });
    assert.equal(page.nextPageToken, "");
    const first = await admin.listAgentVersions("notes", { pageSize: 1 });
    assert.deepEqual(
      first.versions.map((v) => v.version),
      [2n],
    );
    const second = await admin.listAgentVersions("notes", { pageSize: 1, pageToken: first.nextPageToken });
    assert.deepEqual(
      second.versions.map((v) => v.version),
      [1n],
    );

    // ListAgents shows the stored agent with its latest version beside the built-ins (version 0).
    const listed = await admin.listAgents();
    assert.equal(listed.find((a) => a.name === "notes")?.version, 2n);
    assert.equal(listed.find((a) => a.name === "default")?.version, 0n);
    // The built-in reads as native version 0 and refuses changes.
    const builtin = await admin.getAgent("default");
    assert.equal(builtin.native, true);
    assert.equal(builtin.version, 0n);
    assert.equal((await rejects(admin.updateAgent("default", definition("no")))).code, Code.FailedPrecondition);

    assert.equal(await admin.deleteAgentAlias("notes", "prod"), 1n);
    assert.deepEqual((await admin.listAgentVersions("notes")).aliases, {});
    assert.equal(await admin.deleteAgent("notes"), 2n);
    assert.equal((await rejects(admin.getAgent("notes"))).code, Code.NotFound);
  });

  test("a session keeps the version it opened on until moved, and is listed by it", async () => {
    await admin.createAgent("tutor", definition("You are tutor one."));
    await admin.updateAgent("tutor", definition("You are tutor two."));
    await admin.setAgentAlias("tutor", "prod", 1);

    const session = await admin.createSession({ agent: "tutor@prod" });
    assert.equal(session.agent, "tutor");
    assert.equal(session.agentVersion, 1n);
    const turn = await admin.ask(session.sessionId, "What is 2 + 2?");
    assert.match(turn.text, /4/);

    const onOne = (await allSessions({ agent: "tutor", agentVersion: 1 })).map((s) => s.sessionId);
    assert.deepEqual(onOne, [session.sessionId]);

    const moved = await admin.moveSession(session.sessionId, "tutor@2");
    assert.equal(moved.agentVersion, 2n);
    assert.equal((await admin.getSession(session.sessionId)).agentVersion, 2n);
    assert.deepEqual(await allSessions({ agent: "tutor", agentVersion: 1 }), []);
    assert.deepEqual(
      (await allSessions({ agent: "tutor", agentVersion: 2 })).map((s) => s.sessionId),
      [session.sessionId],
    );
    // The next turn runs on version 2.
    assert.match((await admin.ask(session.sessionId, "What is 3 * 3?")).text, /9/);

    const unknown = await rejects(admin.moveSession(session.sessionId, "tutor@9"));
    assert.equal(unknown.code, Code.NotFound);
    assert.match(unknown.message, /no version 9/);
  });

  test("refusals arrive as typed errors naming what is wrong", async () => {
    const bad = await rejects(admin.createAgent("broken", definition("x", { model: "no-such-model-anywhere" })));
    assert.equal(bad.code, Code.InvalidArgument);
    assert.ok(
      bad.violations.some((v) => v.field === "definition.model"),
      JSON.stringify(bad.violations),
    );

    await admin.createAgent("taken", definition("You are taken."));
    assert.equal((await rejects(admin.createAgent("taken", definition("again")))).code, Code.AlreadyExists);

    // globex's key may not write agents, and does not see acme's.
    const denied = await rejects(other.createAgent("mine", definition("x")));
    assert.equal(denied.code, Code.PermissionDenied);
    assert.match(denied.message, /agents:write/);
    assert.equal((await rejects(other.getAgent("taken"))).code, Code.NotFound);

    // Bad arguments are named before anything is sent.
    await assert.rejects(admin.createAgent("x", [] as unknown as JsonObject), /definition must be a JSON object/);
    await assert.rejects(admin.getAgent("taken", { version: -1 }), /version must be a non-negative integer/);
    await assert.rejects(admin.moveSession("s", 7 as unknown as string), /agentRef must be a string/);
  });
});
