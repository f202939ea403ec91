// What needs no server: decoding error details, classifying broken connections, and
// events from a newer server (unknown payloads and enum values).
import assert from "node:assert/strict";
import { test } from "node:test";

import { create, fromBinary, toBinary } from "@bufbuild/protobuf";
import { ConnectError } from "@connectrpc/connect";

import {
  Code,
  CogmeshError,
  ErrorKind,
  is,
  isTerminal,
  RuntimeEventSchema,
  streamedText,
  toMultitask,
  finalText,
  TurnErrorSchema,
  TurnFailedError,
  voided,
  voidRange,
  withoutVoided,
  type EventOf,
  type RuntimeEvent,
} from "../src/index.js";
import { MultitaskStrategy } from "../src/gen/cogmesh/common/v1/turns_pb.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "../src/gen/google/rpc/error_details_pb.js";

function fromServer(code: Code, message: string, details: ConstructorParameters<typeof ConnectError>[3]): ConnectError {
  return new ConnectError(message, code, { "grpc-status": String(code) }, details);
}

test("CogmeshError decodes ErrorInfo, BadRequest and RetryInfo", () => {
  const err = CogmeshError.from(
    fromServer(Code.ResourceExhausted, "tenant acme is over its rate", [
      { desc: ErrorInfoSchema, value: { reason: "RATE_LIMITED", domain: "cogmesh.dev", metadata: { tenant: "acme" } } },
      { desc: BadRequestSchema, value: { fieldViolations: [{ field: "content", description: "is required" }] } },
      { desc: RetryInfoSchema, value: { retryDelay: { seconds: 1n, nanos: 500_000_000 } } },
    ]),
  );
  assert.equal(err.code, Code.ResourceExhausted);
  assert.equal(err.codeName, "RESOURCE_EXHAUSTED");
  assert.equal(err.message, "RESOURCE_EXHAUSTED: tenant acme is over its rate");
  assert.equal(err.reason, "RATE_LIMITED");
  assert.deepEqual(err.metadata, { tenant: "acme" });
  assert.deepEqual(err.violations, [{ field: "content", description: "is required" }]);
  assert.equal(err.retryDelayMs, 1500);
  assert.equal(err.broken, false);
  assert.equal(err.resumable, false);
  assert.ok(err.cause instanceof ConnectError);
});

test("a connection that fails without a status is UNAVAILABLE and resumable; a server's status is kept", () => {
  for (const code of [Code.Aborted, Code.Canceled, Code.Unavailable]) {
    const broken = CogmeshError.from(new ConnectError("read ECONNRESET", code));
    assert.equal(broken.code, Code.Unavailable);
    assert.equal(broken.broken, true);
    assert.equal(broken.resumable, true);
    assert.match(broken.message, /^UNAVAILABLE: connection broke: read ECONNRESET$/);
  }
  const cancelled = CogmeshError.from(fromServer(Code.Canceled, "turn cancelled", []));
  assert.equal(cancelled.code, Code.Canceled);
  assert.equal(cancelled.resumable, false);
  const internal = CogmeshError.from(new ConnectError("protocol error", Code.Internal));
  assert.equal(internal.code, Code.Internal);
  assert.equal(internal.resumable, false);
  const slow = CogmeshError.from(
    fromServer(Code.ResourceExhausted, "fell behind", [
      { desc: ErrorInfoSchema, value: { reason: "SUBSCRIBER_TOO_SLOW", domain: "cogmesh.dev", metadata: {} } },
    ]),
  );
  assert.equal(slow.resumable, true);
});

test("events from a newer server: an unknown payload has no case, an unknown enum value stays a number", () => {
  const known = create(RuntimeEventSchema, { sessionId: "s", turnId: "t", seq: 7n });
  // Field 99, length-delimited and empty (tag varint 0x9a 0x06, length 0): a payload kind these stubs do not know yet.
  const wire = new Uint8Array([...toBinary(RuntimeEventSchema, known), 0x9a, 0x06, 0x00]);
  const event = fromBinary(RuntimeEventSchema, wire);
  assert.equal(event.seq, 7n);
  assert.equal(event.payload.case, undefined);
  assert.equal(isTerminal(event), false);
  assert.equal(is(event, "final"), false);

  const failed = create(RuntimeEventSchema, {
    turnId: "t1",
    payload: { case: "error", value: create(TurnErrorSchema, { kind: 999 as ErrorKind, message: "new kind" }) },
  });
  const decoded = fromBinary(RuntimeEventSchema, toBinary(RuntimeEventSchema, failed));
  assert.ok(is(decoded, "error") && isTerminal(decoded));
  const error = new TurnFailedError(decoded as EventOf<"error">);
  assert.equal(error.kind, "999");
  assert.equal(error.message, "turn t1 failed (999): new kind");
  const cancelled = create(RuntimeEventSchema, {
    turnId: "t2",
    payload: { case: "error", value: create(TurnErrorSchema, { kind: ErrorKind.CANCELLED, partialText: "17 *" }) },
  });
  const byName = new TurnFailedError(cancelled as EventOf<"error">);
  assert.equal(byName.kind, "CANCELLED");
  assert.equal(byName.partialText, "17 *");
});

test("a step_retried notice voids the deltas of the redone step: streamedText shows the text once", () => {
  const delta = (seq: bigint, text: string): RuntimeEvent =>
    create(RuntimeEventSchema, { seq, payload: { case: "assistantDelta", value: { text } } });
  const retried = create(RuntimeEventSchema, {
    seq: 4n,
    payload: {
      case: "nativeNotice",
      value: {
        kind: "step_retried",
        metadata: { void_after_seq: 1, void_through_seq: 3 },
      },
    },
  });
  const events = [delta(1n, "The "), delta(2n, "ans"), delta(3n, "wer"), retried, delta(5n, "answer is 42")];
  assert.deepEqual(voided(events), new Set([2n, 3n]));
  assert.equal(streamedText(events), "The answer is 42");
  assert.equal(streamedText(events.slice(0, 3)), "The answer");
  const final = (value: { text?: string; textOmitted?: boolean }) =>
    create(RuntimeEventSchema, { seq: 6n, payload: { case: "final", value } });
  const done = final({ text: "final" });
  assert.equal(finalText(done.payload.value as never, [...events, done]), "final");
  const long = final({ textOmitted: true }); // a reply over 512 KiB: the final event leaves it out
  assert.equal(finalText(long.payload.value as never, [...events, long]), "The answer is 42");
});

test("a rewound event voids the dropped turns' events, as a step_retried notice voids its range", () => {
  const delta = (seq: bigint, turnId: string, text: string): RuntimeEvent =>
    create(RuntimeEventSchema, { seq, turnId, payload: { case: "assistantDelta", value: { text } } });
  const rewound = create(RuntimeEventSchema, {
    seq: 5n,
    payload: {
      case: "rewound",
      value: { turnId: "t2", droppedTurnIds: ["t2", "t3"], voidAfterSeq: 1n, voidThroughSeq: 3n, reason: "rewind" },
    },
  });
  const events = [
    delta(1n, "t1", "kept "),
    delta(2n, "t2", "dropped "),
    delta(3n, "t3", "too "),
    delta(4n, "t4", "late"),
  ];
  assert.deepEqual(voidRange(rewound), { after: 1n, through: 3n });
  assert.equal(voidRange(events[0]!), undefined);
  // The range is applied wherever the rewound event sits: it comes after the events it voids.
  const all = [...events, rewound];
  assert.deepEqual(voided(all), new Set([2n, 3n]));
  assert.deepEqual(
    withoutVoided(all).map((e) => e.seq),
    [1n, 4n, 5n],
  );
  assert.equal(streamedText(all), "kept late");
});

test("a multitask strategy is named or an enum value; anything else is refused before sending", () => {
  assert.equal(toMultitask("rollback"), MultitaskStrategy.ROLLBACK);
  assert.equal(toMultitask("enqueue"), MultitaskStrategy.ENQUEUE);
  assert.equal(toMultitask(MultitaskStrategy.INTERRUPT), MultitaskStrategy.INTERRUPT);
  assert.equal(toMultitask(undefined), MultitaskStrategy.UNSPECIFIED);
  assert.throws(() => toMultitask("later"), /multitaskStrategy must be .* got "later"/);
  assert.throws(() => toMultitask(42), RangeError);
});
