// What one browser tab keeps across a reload (sessionStorage): the API key, per session the
// events it has shown, and the question of each turn this tab started. A reload shows them again and resumes Subscribe after the last seq, so the
// page neither repeats nor misses an event. One key per event keeps each write small.
import { fromJson, RuntimeEventSchema, toJson, type RuntimeEvent } from "@cogmesh/client/web";

const KEY = "cogmesh.apiKey";
const MAX_KEPT = 5000; // events per session; older ones are dropped (the page then says so)

const eventKey = (sessionId: string, seq: bigint) => `cogmesh.event.${sessionId}.${seq}`;
const lastKey = (sessionId: string) => `cogmesh.last.${sessionId}`;
const questionKey = (sessionId: string, turnId: string) => `cogmesh.question.${sessionId}.${turnId}`;

export function apiKey(): string {
  return sessionStorage.getItem(KEY) ?? "";
}

export function setApiKey(key: string): void {
  sessionStorage.setItem(KEY, key);
}

/** The last seq this tab has shown for the session (0: none). */
export function lastSeq(sessionId: string): bigint {
  return BigInt(sessionStorage.getItem(lastKey(sessionId)) ?? "0");
}

/** The events kept for the session, in seq order. */
export function keptEvents(sessionId: string): RuntimeEvent[] {
  const prefix = `cogmesh.event.${sessionId}.`;
  const events: RuntimeEvent[] = [];
  for (let i = 0; i < sessionStorage.length; i++) {
    const key = sessionStorage.key(i);
    if (!key?.startsWith(prefix)) continue;
    const json = sessionStorage.getItem(key);
    if (json) events.push(fromJson(RuntimeEventSchema, JSON.parse(json)));
  }
  const last = lastSeq(sessionId);
  // An event written after its seq was recorded as shown cannot exist; one written before can (a reload
  // between the two writes): it was never shown, so it is dropped and Subscribe delivers it again.
  return events.filter((e) => e.seq <= last).sort((a, b) => (a.seq < b.seq ? -1 : a.seq > b.seq ? 1 : 0));
}

let storageFull = false;

/**
 * Record an event as shown: the event first, then the cursor, so the cursor never runs ahead of what
 * is kept. Once storage is full the cursor stays where it is: after a reload, Subscribe delivers the
 * events from there again instead of the page missing them.
 */
export function keep(event: RuntimeEvent): void {
  if (storageFull) return;
  try {
    sessionStorage.setItem(eventKey(event.sessionId, event.seq), JSON.stringify(toJson(RuntimeEventSchema, event)));
    sessionStorage.setItem(lastKey(event.sessionId), event.seq.toString());
  } catch {
    storageFull = true;
    return;
  }
  const old = event.seq - BigInt(MAX_KEPT);
  if (old > 0n) sessionStorage.removeItem(eventKey(event.sessionId, old));
}

/**
 * The question that started a turn this tab sent. Every turn's accepted status carries its question
 * (StatusUpdate.content), but this tab keeps only its last events: after a reload, a long turn's card
 * may no longer have that status, and this still names what the turn answers.
 */
export function question(sessionId: string, turnId: string): string | undefined {
  return sessionStorage.getItem(questionKey(sessionId, turnId)) ?? undefined;
}

export function keepQuestion(sessionId: string, turnId: string, text: string): void {
  try {
    sessionStorage.setItem(questionKey(sessionId, turnId), text);
  } catch {
    // Storage full: the question is still shown until a reload.
  }
}
