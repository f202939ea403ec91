// The tenant's stored agents (AgentService, docs/agent-versions.md): the agents with their latest
// version and a form to create one; one agent's versions, newest first, with the aliases pointing at
// each, a form that stores an edited definition as the next version and one that points an alias.
// Built-ins (the suite's agents folder, version 0) are not versioned and not listed here. The
// gateway checks every change (a field at fault is named) and needs the key's agents:write.
import {
  AgentMode,
  type AgentVersion,
  type CogmeshClientBase,
  type JsonObject,
  type Timestamp,
} from "@cogmesh/client/web";
import { h } from "./session.js";

export interface AgentsHooks {
  error(err: unknown): void;
}

// A new agent's starting point: the built-in local model with the calculator.
const EXAMPLE: JsonObject = { model: "local", tools: ["calculator"], system_prompt: "You are a helpful assistant." };

/** The definition typed into a form, or an Error naming what is wrong with it. */
function definitionOf(text: string): JsonObject {
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch (err) {
    throw new Error(`definition: not JSON (${(err as Error).message})`);
  }
  if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) {
    throw new Error("definition: must be a JSON object of an agent file's fields");
  }
  return parsed as JsonObject;
}

/** A form whose submit runs `action` (its errors go to the console's error line). */
function form(id: string, hooks: AgentsHooks, action: () => Promise<void>, ...children: Node[]): HTMLFormElement {
  const element = h("form", { id }, ...children);
  element.addEventListener("submit", (event) => {
    event.preventDefault();
    action().catch((err: unknown) => hooks.error(err));
  });
  return element;
}

const PAGE = 200; // ListAgentVersions' largest page

/** "tutor@3" for version 3 of a stored agent; the bare name for a built-in (version 0). */
export function agentRef(name: string, version: bigint): string {
  return version > 0n ? `${name}@${version}` : name;
}

const when = (time: Timestamp | undefined) =>
  time ? new Date(Number(time.seconds) * 1000 + time.nanos / 1e6).toLocaleString() : "";

function versionRow(version: AgentVersion): HTMLLIElement {
  const description = typeof version.definition?.description === "string" ? version.definition.description : "";
  const model = typeof version.definition?.model === "string" ? version.definition.model : "";
  const aliases = version.aliases.map((alias) => h("span", { class: "alias" }, alias));
  const definition = h(
    "details",
    {},
    h("summary", {}, "definition"),
    h("pre", {}, JSON.stringify(version.definition ?? {}, null, 2)),
  );
  return h(
    "li",
    { class: "agent-version", "data-version": String(version.version) },
    h(
      "div",
      { class: "agent-version-head" },
      h("strong", {}, `v${version.version}`),
      ...aliases,
      h("span", { class: "meta" }, [when(version.createTime), version.createdBy, model].filter(Boolean).join(" · ")),
    ),
    ...(description ? [h("div", {}, description)] : []),
    definition,
  );
}

export class AgentsView {
  constructor(
    private readonly client: CogmeshClientBase,
    private readonly container: HTMLElement,
    private readonly hooks: AgentsHooks,
  ) {}

  /** The stored agents, each a link to its versions. */
  async showList(): Promise<void> {
    const agents = (await this.client.listAgents()).filter((agent) => agent.version > 0n);
    const rows = agents.map((agent) =>
      h(
        "li",
        { "data-agent": agent.name },
        h("a", { href: `#/agents/${agent.name}` }, agent.name),
        h(
          "span",
          { class: "meta" },
          ` latest v${agent.version}${agent.mode === AgentMode.SUBAGENT ? " · subagent" : ""}${agent.description ? ` · ${agent.description}` : ""}`,
        ),
      ),
    );
    const empty = h(
      "p",
      { class: "meta" },
      "No stored agents: create them with AgentService (docs/agent-versions.md).",
    );
    const name = h("input", { id: "new-agent-name", placeholder: "name", required: "" });
    const text = h("textarea", { id: "new-agent-definition", rows: "6" });
    text.value = JSON.stringify(EXAMPLE, null, 2);
    const create = form(
      "agent-create",
      this.hooks,
      async () => {
        await this.client.createAgent(name.value.trim(), definitionOf(text.value));
        location.hash = `#/agents/${name.value.trim()}`;
      },
      h("h3", {}, "New agent"),
      name,
      text,
      h("button", { type: "submit" }, "Create version 1"),
    );
    this.container.replaceChildren(
      h("h2", {}, "Agents"),
      rows.length ? h("ul", { id: "agent-list" }, ...rows) : empty,
      create,
    );
  }

  /** One agent's versions, newest first, and its aliases. */
  async showAgent(name: string): Promise<void> {
    const versions: AgentVersion[] = [];
    let aliases: Record<string, bigint> = {};
    let pageToken = "";
    do {
      const page = await this.client.listAgentVersions(name, { pageSize: PAGE, pageToken });
      versions.push(...page.versions);
      aliases = page.aliases;
      pageToken = page.nextPageToken;
    } while (pageToken);
    const aliasRows = Object.entries(aliases)
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([alias, version]) => h("li", { "data-alias": alias }, `${alias} → v${version}`));
    this.container.replaceChildren(
      h("p", {}, h("a", { href: "#/agents" }, "← Agents")),
      h("h2", { id: "agent-name" }, name),
      h("h3", {}, "Aliases"),
      aliasRows.length ? h("ul", { id: "agent-aliases" }, ...aliasRows) : h("p", { class: "meta" }, "none"),
      h("h3", {}, "Versions"),
      h("ol", { id: "agent-versions", class: "agent-versions" }, ...versions.map(versionRow)),
      ...this.editors(name, versions[0]),
    );
  }

  /** The forms that change the agent: its next version from an edited definition, and an alias. */
  private editors(name: string, latest: AgentVersion | undefined): HTMLElement[] {
    if (!latest) return [];
    const text = h("textarea", { id: "agent-definition", rows: "10" });
    text.value = JSON.stringify(latest.definition ?? {}, null, 2);
    const next = form(
      "agent-edit",
      this.hooks,
      async () => {
        // The version read is the one expected: a change made meanwhile is ABORTED, not overwritten.
        await this.client.updateAgent(name, definitionOf(text.value), { expectedVersion: latest.version });
        await this.showAgent(name);
      },
      h("h3", {}, "Next version"),
      text,
      h("button", { type: "submit" }, `Save as v${latest.version + 1n}`),
    );
    const alias = h("input", { id: "alias-name", placeholder: "alias, e.g. prod", required: "" });
    const version = h("input", {
      id: "alias-version",
      type: "number",
      min: "1",
      value: String(latest.version),
    });
    const point = form(
      "agent-alias",
      this.hooks,
      async () => {
        await this.client.setAgentAlias(name, alias.value.trim(), BigInt(version.value || "0"));
        await this.showAgent(name);
      },
      h("h3", {}, "Point an alias"),
      alias,
      version,
      h("button", { type: "submit" }, "Set alias"),
    );
    return [next, point];
  }

  show(name: string | undefined): void {
    (name ? this.showAgent(name) : this.showList()).catch((err: unknown) => this.hooks.error(err));
  }
}
