// Drives the web console in Debian's headless Chromium (playwright-core, never a downloaded
// browser) and prints what it saw as one JSON object; tests/e2e/test_web_console.py checks it
// against the gateway's own replay.
//
//   node console.mjs <console url> <artifacts dir>
//
// Scenarios: the agent picker as first shown; a scope refused, then a calculator turn in a scoped session streamed live,
// then a notice; an approval on the `careful` agent and its decision; one with the agent's prompt and suggested answer; a reload in the middle of a long streaming reply; a turn cancelled
// mid-stream; a turn a guardrail fails. Each turn's card is checked for the question that started it. Every wait is for a condition on the page, bounded by
// STEP_MS so a broken console fails instead of hanging.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [url, artifacts] = process.argv.slice(2);
if (!url || !artifacts) {
  console.error("usage: node console.mjs <console url> <artifacts dir>");
  process.exit(2);
}
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";
const STEP_MS = 60_000;
const FLAGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

const renderedSeqs = (page) =>
  page.$$eval("#events [data-seq]", (els) => els.map((el) => Number(el.getAttribute("data-seq"))));

async function newSession(page, agent, scope = "") {
  const before = await page.evaluate(() => location.hash);
  await page.selectOption("#agent", agent);
  await page.fill("#scope", scope);
  await page.click("#new-session button");
  await page.waitForFunction((old) => /^#\/s\/\w+/.test(location.hash) && location.hash !== old, before, {
    timeout: STEP_MS,
  });
  const id = await page.evaluate(() => location.hash.slice("#/s/".length));
  await page.waitForSelector(`#sessions a[data-session="${id}"]`, { timeout: STEP_MS });
  return id;
}

// The state and question a turn's card shows (the last card: the turn just sent).
const lastTurn = (page) =>
  page.$eval("#events .turn:last-of-type", (card) => ({
    state: card.querySelector(".state")?.textContent ?? null,
    question: card.querySelector(".user")?.textContent ?? null,
  }));

async function send(page, text) {
  await page.fill("#message", text);
  await page.press("#message", "Enter");
}

const result = { errors: [] };
const profile = mkdtempSync(join(tmpdir(), "cogmesh-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  headless: true,
  args: FLAGS,
  viewport: { width: 1280, height: 900 },
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => result.errors.push(`pageerror: ${err.message}`));
  // Step 0's refused CreateSession is an HTTP 400 (Connect's INVALID_ARGUMENT), which the browser logs as an error.
  const refused = (msg) => /status of 400/.test(msg.text()) && msg.location().url.endsWith("/CreateSession");
  page.on("console", (msg) => {
    if (msg.type() === "error" && !refused(msg)) result.errors.push(`console: ${msg.text()}`);
  });
  await page.goto(url);
  await page.waitForSelector("#agent option[value=careful]", { state: "attached", timeout: STEP_MS });
  // The picker as a new user first sees it: what is offered and what is selected.
  result.picker = {
    selected: await page.$eval("#agent", (select) => select.value),
    offered: await page.$$eval("#agent option", (options) => options.map((o) => o.value)),
  };

  // 0. A scope the gateway refuses is shown, naming the entry; nothing is created.
  const listed = await page.$$eval("#sessions a", (links) => links.length);
  await page.selectOption("#agent", "default");
  await page.fill("#scope", "Team=red");
  await page.click("#new-session button");
  await page.waitForSelector("#banner:not([hidden])", { timeout: STEP_MS });
  result.badScope = {
    banner: await page.textContent("#banner"),
    listedBefore: listed,
    listedAfter: await page.$$eval("#sessions a", (links) => links.length),
  };

  // 1. The calculator turn, in a session with a scope.
  const calc = await newSession(page, "default", "end_user=alice, project=p1");
  await page.waitForSelector("#banner", { state: "hidden", timeout: STEP_MS });
  await send(page, "What is 17 * 23?");
  await page.waitForSelector("[data-kind=toolCallStarted]:has-text('calculator')", { timeout: STEP_MS });
  await page.waitForSelector("[data-kind=final]", { timeout: STEP_MS });
  result.calculator = {
    session: calc,
    listedScope: await page.textContent(`#sessions a[data-session="${calc}"] .meta`),
    rendered: await renderedSeqs(page),
    toolCall: await page.textContent("[data-kind=toolCallStarted]"),
    toolResult: await page.textContent("[data-kind=toolCallFinished]"),
    answer: await page.textContent(".assistant"),
    final: await page.textContent("[data-kind=final]"),
    timelineBars: await page.$$eval(".timeline rect", (rects) => rects.map((r) => r.getAttribute("data-row"))),
  };
  // A notice in the stream: a /model command the strict catalogue refuses says so in a native_notice.
  await send(page, "/model nosuch-model");
  await page.waitForSelector("[data-kind=nativeNotice]", { timeout: STEP_MS });
  await page.waitForFunction(() => document.querySelectorAll("[data-kind=final]").length === 2, null, {
    timeout: STEP_MS,
  });
  result.calculator.notice = await page.textContent("[data-kind=nativeNotice]");
  result.calculator.renderedWithNotice = await renderedSeqs(page);
  await page.screenshot({ path: join(artifacts, "console-calculator.png"), fullPage: true });

  // 2. An approval on the careful agent, answered with the button.
  const careful = await newSession(page, "careful");
  await send(page, "What is 12 * 12?");
  await page.click("[data-kind=approvalRequired] button[data-decision=approve]", { timeout: STEP_MS });
  await page.waitForSelector("[data-kind=final]", { timeout: STEP_MS });
  result.approval = {
    session: careful,
    rendered: await renderedSeqs(page),
    answer: await page.textContent(".assistant"),
    answered: await page.$eval("[data-kind=approvalRequired]", (el) => el.classList.contains("answered")),
    waitBars: await page.$$eval(".timeline rect[data-row=wait]", (rects) => rects.length),
    decided: await page.textContent("[data-kind=approvalDecided]"),
  };
  await page.screenshot({ path: join(artifacts, "console-approval.png"), fullPage: true });

  // 2b. An agent whose approvals give the reviewer a prompt and a suggested answer: take the suggestion.
  const reviewed = await newSession(page, "reviewed");
  await send(page, "What is 7 * 6?");
  const asked = "[data-kind=approvalRequired]";
  await page.waitForSelector(`${asked} .prompt`, { timeout: STEP_MS });
  result.reviewed = {
    session: reviewed,
    prompt: await page.textContent(`${asked} .prompt`),
    suggested: await page.$eval(`${asked} button[data-suggested]`, (b) => b.getAttribute("data-decision")),
    reason: await page.$eval(`${asked} input[aria-label=reason]`, (input) => input.value),
  };
  await page.click(`${asked} button[data-suggested]`, { timeout: STEP_MS });
  await page.waitForSelector("[data-kind=final]", { timeout: STEP_MS });
  result.reviewed.decided = await page.textContent("[data-kind=approvalDecided]");
  result.reviewed.rendered = await renderedSeqs(page);

  // 3. Reload in the middle of a long streaming reply: the page shows what it had, then resumes.
  const long = await newSession(page, "default");
  await send(page, "Tell me a long story.");
  await page.waitForFunction(() => document.querySelectorAll("[data-kind=assistantDelta]").length >= 10, null, {
    timeout: STEP_MS,
  });
  const beforeReload = await renderedSeqs(page);
  const runningTurn = await lastTurn(page);
  const resumedFrom = new Promise((resolve) => {
    page.on("request", (request) => {
      // A server stream's request is one Connect envelope: 5 bytes of flags and length, then JSON.
      if (request.url().endsWith("/Subscribe")) resolve(JSON.parse(request.postDataBuffer().subarray(5).toString()));
    });
  });
  await page.reload();
  const subscribe = await resumedFrom;
  const restored = await renderedSeqs(page); // what sessionStorage gave back, before any new event
  const restoredTurn = await lastTurn(page);
  await page.waitForSelector("[data-kind=final]", { timeout: STEP_MS });
  result.reload = {
    session: long,
    beforeReload,
    restoredAtLeast: restored,
    runningTurn,
    restoredTurn,
    subscribe,
    rendered: await renderedSeqs(page),
    finalTurnDeltas: await page.$$eval("[data-kind=assistantDelta]", (els) => els.length),
  };
  await page.screenshot({ path: join(artifacts, "console-reload.png"), fullPage: true });

  // 4. A turn cancelled mid-stream with the Cancel button.
  const cancelled = await newSession(page, "default");
  await send(page, "Tell me another long story.");
  await page.waitForFunction(() => document.querySelectorAll("[data-kind=assistantDelta]").length >= 3, null, {
    timeout: STEP_MS,
  });
  await page.click("#cancel-turn", { timeout: STEP_MS });
  await page.waitForSelector("[data-kind=error]", { timeout: STEP_MS });
  result.cancelled = {
    session: cancelled,
    turn: await lastTurn(page),
    error: await page.textContent("[data-kind=error]"),
  };
  await page.screenshot({ path: join(artifacts, "console-cancelled.png"), fullPage: true });

  // 5. A turn that fails: the fixture's content filter blocks the word "forbidden" with a guardrail error.
  const failed = await newSession(page, "default");
  await send(page, "Say the forbidden word.");
  await page.waitForSelector("[data-kind=error]", { timeout: STEP_MS });
  result.failed = {
    session: failed,
    turn: await lastTurn(page),
    error: await page.textContent("[data-kind=error]"),
  };
  await page.screenshot({ path: join(artifacts, "console-failed.png"), fullPage: true });
} catch (err) {
  result.errors.push(`driver: ${err.stack ?? err}`);
  const page = context.pages()[0];
  if (page) await page.screenshot({ path: join(artifacts, "console-failure.png"), fullPage: true }).catch(() => {});
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(result));
