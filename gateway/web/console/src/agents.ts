// The tenant's stored agents (AgentService, docs/agent-versions.md), read-only: the agents with
// their latest version, and one agent's versions, newest first, with the aliases pointing at each.
// Built-ins (the suite's agents folder, version 0) are not versioned and not listed here.
import { AgentMode, type AgentVersion, type CogmeshClientBase, type Timestamp } from "@cogmesh/client/web";
import { h } from "./session.js";

export interface AgentsHooks {
  error(err: unknown): void;
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
    this.container.replaceChildren(h("h2", {}, "Agents"), rows.length ? h("ul", { id: "agent-list" }, ...rows) : empty);
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
    );
  }

  show(name: string | undefined): void {
    (name ? this.showAgent(name) : this.showList()).catch((err: unknown) => this.hooks.error(err));
  }
}
