// Drives the web console's turns panel in Debian's headless Chromium (playwright-core) and prints
// what it saw as one JSON object; tests/e2e/test_console_time_travel.py checks it against the
// gateway's own replay and conversation.
//
//   node time_travel.mjs <console url> <artifacts dir>
//
// Scenario: three calculator turns in a session; the Turns panel lists them with their questions,
// outcomes and steps; Fork after the first turn opens the fork (its origin shown); Fork before the
// second opens a fork with that question in the composer, sent again there; back on the original,
// a Rewind refused at the confirm changes nothing, and one accepted drops turns 2 and 3 from the
// panel and their events from the page; a reload shows the same. Every wait is for a condition on
// the page, bounded by STEP_MS so a broken console fails instead of hanging.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [url, artifacts] = process.argv.slice(2);
if (!url || !artifacts) {
  console.error("usage: node time_travel.mjs <console url> <artifacts dir>");
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
const QUESTIONS = ["What is 2 + 2?", "What is 3 * 3?", "What is 10 - 4?"];

const renderedSeqs = (page) =>
  page.$$eval("#events [data-seq]", (els) => els.map((el) => Number(el.getAttribute("data-seq"))));

const currentSession = (page) => page.evaluate(() => location.hash.slice("#/s/".length));

async function waitCount(page, selector, count) {
  await page.waitForFunction(([s, n]) => document.querySelectorAll(s).length === n, [selector, count], {
    timeout: STEP_MS,
  });
}

/** Wait until the page shows another session than `old`, and return its id. */
async function opened(page, old) {
  await page.waitForFunction((o) => /^#\/s\/\w+/.test(location.hash) && location.hash !== `#/s/${o}`, old, {
    timeout: STEP_MS,
  });
  return currentSession(page);
}

async function open(page, sessionId) {
  await page.evaluate((id) => (location.hash = `#/s/${id}`), sessionId);
  await page.waitForFunction((id) => location.hash === `#/s/${id}`, sessionId, { timeout: STEP_MS });
}

// The turns panel as drawn: each record's question, outcome and step kinds.
const records = (page) =>
  page.$$eval("#turns .turn-record", (items) =>
    items.map((item) => ({
      turnId: item.getAttribute("data-turn"),
      outcome: item.getAttribute("data-outcome"),
      question: item.querySelector(".question")?.textContent ?? null,
      steps: [...item.querySelectorAll(".steps li")].map((li) => li.getAttribute("data-step")),
    })),
  );

const turnButton = (index, action) => `#turns .turn-record:nth-child(${index}) button[data-action=${action}]`;

const result = { errors: [] };
const profile = mkdtempSync(join(tmpdir(), "cogmesh-chromium-"));
const context = await chromium.launchPersistentContext(profile, {
  executablePath: CHROMIUM,
  headless: true,
  args: FLAGS,
  viewport: { width: 1400, height: 900 },
});
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.on("pageerror", (err) => result.errors.push(`pageerror: ${err.message}`));
  page.on("console", (msg) => {
    if (msg.type() === "error") result.errors.push(`console: ${msg.text()}`);
  });
  const rewinds = [];
  page.on("request", (request) => {
    if (request.url().endsWith("/RewindSession")) rewinds.push(JSON.parse(request.postData() ?? "{}"));
  });
  await page.goto(url);
  await page.waitForSelector("#agent option[value=default]", { state: "attached", timeout: STEP_MS });

  // Three turns in a new session.
  await page.selectOption("#agent", "default");
  await page.click("#new-session button");
  const original = await opened(page, "");
  for (const [i, question] of QUESTIONS.entries()) {
    await page.fill("#message", question);
    await page.press("#message", "Enter");
    await waitCount(page, "#events [data-kind=final]", i + 1);
  }

  // The panel: three turns, oldest first, with their steps.
  await page.click("#show-turns");
  await waitCount(page, "#turns .turn-record", 3);
  await page.waitForFunction(
    () => [...document.querySelectorAll("#turns .turn-record")].every((r) => r.dataset.outcome === "completed"),
    null,
    { timeout: STEP_MS },
  );
  result.original = { session: original, turns: await records(page), rendered: await renderedSeqs(page) };
  await page.screenshot({ path: join(artifacts, "console-turns.png"), fullPage: true });

  // Fork after the first turn: the fork opens and says where it came from.
  await page.click(turnButton(1, "fork-after"));
  const after = await opened(page, original);
  await page.waitForSelector("#session-origin:not([hidden])", { timeout: STEP_MS });
  result.forkAfter = {
    session: after,
    origin: await page.textContent("#session-origin"),
    listed: await page
      .waitForSelector(`#sessions a[data-session="${after}"]`, { timeout: STEP_MS })
      .then((link) => link.textContent()),
  };

  // Fork before the second turn: its question waits in the composer; sent again, it is answered there.
  await open(page, original);
  await waitCount(page, "#turns .turn-record", 3);
  await page.click(turnButton(2, "fork-before"));
  const before = await opened(page, original);
  await page.waitForFunction((q) => document.querySelector("#message").value === q, QUESTIONS[1], {
    timeout: STEP_MS,
  });
  result.forkBefore = { session: before, draft: await page.inputValue("#message") };
  await page.press("#message", "Enter");
  await page.waitForFunction(
    (q) => {
      const card = document.querySelector("#events .turn:last-of-type");
      return (
        card?.querySelector(".user")?.textContent === q && card.querySelector(".state")?.textContent === "completed"
      );
    },
    QUESTIONS[1],
    { timeout: STEP_MS },
  );
  result.forkBefore.answer = await page.textContent("#events .turn:last-of-type .assistant");
  result.forkBefore.origin = await page.textContent("#session-origin");

  // Back on the original: a rewind refused at the confirm does nothing.
  await open(page, original);
  await waitCount(page, "#turns .turn-record", 3);
  await waitCount(page, "#events [data-kind=final]", 3);
  const dismissed = new Promise((resolve) =>
    page.once("dialog", async (dialog) => {
      await dialog.dismiss();
      resolve(dialog.message());
    }),
  );
  await page.click(turnButton(3, "rewind"));
  result.refused = { question: await dismissed };

  // Accepted: turns 2 and 3 leave the panel, and their events the page.
  const accepted = new Promise((resolve) =>
    page.once("dialog", async (dialog) => {
      await dialog.accept();
      resolve(dialog.message());
    }),
  );
  await page.click(turnButton(2, "rewind"));
  const question = await accepted;
  await page.waitForSelector("#events [data-kind=rewound]", { timeout: STEP_MS });
  await waitCount(page, "#turns .turn-record", 1);
  result.rewind = {
    question,
    requests: rewinds,
    turns: await records(page),
    rendered: await renderedSeqs(page),
    cards: await page.$$eval("#events .turn", (cards) => cards.map((c) => c.getAttribute("data-turn"))),
    notice: await page.textContent("#events [data-kind=rewound]"),
  };
  await page.screenshot({ path: join(artifacts, "console-rewound.png"), fullPage: true });

  // A reload shows the same: the kept rewound event drops the voided events again.
  await page.reload();
  await page.waitForSelector("#events [data-kind=rewound]", { timeout: STEP_MS });
  result.reloaded = {
    rendered: await renderedSeqs(page),
    cards: await page.$$eval("#events .turn", (cards) => cards.map((c) => c.getAttribute("data-turn"))),
  };
} catch (err) {
  result.errors.push(`driver: ${err.stack ?? err}`);
  const page = context.pages()[0];
  if (page) await page.screenshot({ path: join(artifacts, "console-failure.png"), fullPage: true }).catch(() => {});
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(result));
