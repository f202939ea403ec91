// Drives the web console's agent versions in Debian's headless Chromium (playwright-core) and prints
// what it saw as one JSON object; tests/e2e/test_console_agents.py checks it against the gateway.
//
//   node agents.mjs <console url> <artifacts dir>
//
// Scenario (the test stored agent "tutor" with versions 1 and 2, alias prod -> 1): the picker offers
// "tutor (v2)"; a session opened on "tutor@prod" typed into the reference field shows tutor@1 in its
// header and in the list; the Agents view lists tutor and, opened, its versions newest first with
// the alias beside version 1. Every wait is for a condition on the page, bounded by STEP_MS.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

import { chromium } from "playwright-core";

const [url, artifacts] = process.argv.slice(2);
if (!url || !artifacts) {
  console.error("usage: node agents.mjs <console url> <artifacts dir>");
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
  page.on("pageerror", (err) =>
    result.errors.push(`pageerror: ${err.message}`),
  );
  page.on("console", (msg) => {
    if (msg.type() === "error") result.errors.push(`console: ${msg.text()}`);
  });
  await page.goto(url);
  await page.waitForSelector("#agent option[value=tutor]", {
    state: "attached",
    timeout: STEP_MS,
  });
  result.picker = await page.$eval(
    "#agent option[value=tutor]",
    (option) => option.textContent,
  );

  // A session on the alias: its header and its list entry name the version it resolved to.
  await page.fill("#agent-ref", "tutor@prod");
  await page.click("#new-session button");
  await page.waitForFunction(() => /^#\/s\/\w+/.test(location.hash), null, {
    timeout: STEP_MS,
  });
  const session = await page.evaluate(() => location.hash.slice("#/s/".length));
  await page.waitForFunction(
    () => document.querySelector("#session-agent")?.textContent !== "",
    null,
    {
      timeout: STEP_MS,
    },
  );
  result.session = {
    id: session,
    header: await page.textContent("#session-agent"),
    listed: await page
      .waitForSelector(`#sessions a[data-session="${session}"]`, {
        timeout: STEP_MS,
      })
      .then((link) => link.textContent()),
    refLeft: await page.inputValue("#agent-ref"),
  };

  // The Agents view: the stored agents, then one agent's versions and aliases.
  await page.click("#agents-link");
  await page.waitForSelector("#agent-list li[data-agent=tutor]", {
    timeout: STEP_MS,
  });
  result.list = await page.$$eval("#agent-list li", (items) =>
    items.map((li) => li.textContent),
  );
  await page.click("#agent-list li[data-agent=tutor] a");
  await page.waitForFunction(
    () => document.querySelectorAll("#agent-versions li").length === 2,
    null,
    {
      timeout: STEP_MS,
    },
  );
  result.agent = {
    hash: await page.evaluate(() => location.hash),
    name: await page.textContent("#agent-name"),
    versions: await page.$$eval("#agent-versions li", (items) =>
      items.map((li) => ({
        version: li.getAttribute("data-version"),
        aliases: [...li.querySelectorAll(".alias")].map((a) => a.textContent),
      })),
    ),
    aliases: await page.$$eval("#agent-aliases li", (items) =>
      items.map((li) => li.textContent),
    ),
    sessionHidden: await page.$eval("#session", (el) => el.hidden),
  };
  await page.screenshot({
    path: join(artifacts, "console-agents.png"),
    fullPage: true,
  });

  // Changes from the console: the next version from the edited definition, an alias moved to it, a
  // definition that is not JSON refused in the banner, and a new agent.
  const edited = JSON.parse(await page.inputValue("#agent-definition"));
  edited.description = "v3 from the console";
  await page.fill("#agent-definition", JSON.stringify(edited));
  await page.click("#agent-edit button");
  await page.waitForFunction(
    () => document.querySelectorAll("#agent-versions li").length === 3,
    null,
    {
      timeout: STEP_MS,
    },
  );
  await page.fill("#alias-name", "prod");
  await page.fill("#alias-version", "3");
  await page.click("#agent-alias button");
  await page.waitForFunction(
    () =>
      document.querySelector("#agent-aliases li[data-alias=prod]")
        ?.textContent === "prod → v3",
    null,
    { timeout: STEP_MS },
  );
  await page.fill("#agent-definition", "{not json");
  await page.click("#agent-edit button");
  await page.waitForFunction(
    () => !document.querySelector("#banner")?.hidden,
    null,
    { timeout: STEP_MS },
  );
  result.refused = await page.textContent("#banner");
  await page.click("#agents-link");
  await page.waitForSelector("#agent-create", { timeout: STEP_MS });
  await page.fill("#new-agent-name", "scribe");
  await page.click("#agent-create button");
  await page.waitForFunction(() => location.hash === "#/agents/scribe", null, {
    timeout: STEP_MS,
  });
  await page.waitForSelector("#agent-versions li[data-version='1']", {
    timeout: STEP_MS,
  });
  result.changed = {
    versions: await page.evaluate(
      () => document.querySelectorAll("#agent-versions li").length,
    ),
  };
} catch (err) {
  result.errors.push(`driver: ${err.stack ?? err}`);
  const page = context.pages()[0];
  if (page)
    await page
      .screenshot({
        path: join(artifacts, "console-agents-failure.png"),
        fullPage: true,
      })
      .catch(() => {});
} finally {
  await context.close();
  rmSync(profile, { recursive: true, force: true });
}
console.log(JSON.stringify(result));
