// cogmesh's web console: the tenant's sessions, newest first; a session's live event stream; a
// composer; approvals and questions answered in place; the session's turns, to fork or rewind; the
// tenant's stored agents with their versions and aliases. It talks to the browser edge that serves
// it (same origin) over the Connect protocol, with @cogmesh/client's browser transport.
import { AgentMode, Code, CogmeshError, CogmeshWebClient, type Session } from "@cogmesh/client/web";
import { AgentsView, agentRef } from "./agents.js";
import { SessionView } from "./session.js";
import { apiKey, setApiKey } from "./store.js";
import { TurnsPanel } from "./turns.js";

const $ = <T extends HTMLElement>(id: string) => document.getElementById(id) as T;

const ui = {
  banner: $("banner"),
  connection: $("connection"),
  keyForm: $<HTMLFormElement>("key-form"),
  key: $<HTMLInputElement>("api-key"),
  agent: $<HTMLSelectElement>("agent"),
  agentRef: $<HTMLInputElement>("agent-ref"),
  agents: $("agents"),
  scope: $<HTMLInputElement>("scope"),
  newSession: $<HTMLFormElement>("new-session"),
  refresh: $<HTMLButtonElement>("refresh"),
  sessions: $<HTMLOListElement>("sessions"),
  session: $("session"),
  empty: $("empty"),
  title: $("session-title"),
  sessionAgent: $("session-agent"),
  cancel: $<HTMLButtonElement>("cancel-turn"),
  origin: $("session-origin"),
  showTurns: $<HTMLButtonElement>("show-turns"),
  turns: $("turns"),
  events: $("events"),
  composer: $<HTMLFormElement>("composer"),
  message: $<HTMLTextAreaElement>("message"),
};

let client = makeClient();
let view: SessionView | undefined;
let turnsPanel: TurnsPanel | undefined;
let runningTurn: string | undefined;
// The question of the turn a "Fork before" stopped at, put in the fork's composer once it opens.
let draft: string | undefined;

function makeClient(): CogmeshWebClient {
  // baseUrl "": this page's origin, the edge that served it.
  return new CogmeshWebClient({ baseUrl: "", apiKey: apiKey() || undefined, protocol: "connect" });
}

function showError(err: unknown): void {
  const error = err instanceof CogmeshError ? err : CogmeshError.from(err);
  if (error.code === Code.Canceled) return; // we stopped it
  const reason = error.reason ? ` (${error.reason})` : "";
  const fields = error.violations.map((v) => `\n  ${v.field}: ${v.description}`).join("");
  const text = error.message.startsWith(`${error.codeName}: `)
    ? error.message.slice(error.codeName.length + 2)
    : error.message;
  ui.banner.textContent = `${error.codeName}${reason}: ${text}${fields}`;
  ui.banner.hidden = false;
  if (error.code === Code.Unauthenticated) {
    ui.keyForm.hidden = false;
    ui.key.focus();
  }
}

function clearError(): void {
  ui.banner.hidden = true;
}

function sessionLink(session: Session): HTMLLIElement {
  const link = document.createElement("a");
  link.href = `#/s/${session.sessionId}`;
  link.dataset.session = session.sessionId;
  const created = session.createTime ? new Date(Number(session.createTime.seconds) * 1000).toLocaleString() : "";
  const title = document.createElement("div");
  title.textContent = `${agentRef(session.agent, session.agentVersion)} · ${session.sessionId.slice(0, 8)}`;
  const meta = document.createElement("div");
  meta.className = "meta";
  // The scope says on whose behalf the session runs (end user, project...): the application's, shown as set.
  const scope = Object.entries(session.scope)
    .sort(([a], [b]) => a.localeCompare(b))
    .map(([key, value]) => ` · ${key}=${value}`)
    .join("");
  const fork = session.forkedFrom ? ` · fork of ${session.forkedFrom.sessionId.slice(0, 8)}` : "";
  meta.textContent = `${created} · ${session.messageCount} message(s)${scope}${fork}${session.activeTurnId ? " · turn running" : ""}`;
  link.append(title, meta);
  if (session.sessionId === currentSession()) link.classList.add("active");
  const item = document.createElement("li");
  item.append(link);
  return item;
}

async function loadSessions(): Promise<void> {
  const { sessions } = await client.listSessions({ pageSize: 100 }); // newest first
  ui.sessions.replaceChildren(...sessions.map(sessionLink));
}

/** The agent a new session starts on: the shipped `default` when there is one. */
const DEFAULT_AGENT = "default";

async function loadAgents(): Promise<void> {
  // A subagent only takes tasks from other agents: CreateSession refuses it as a session's agent.
  const agents = (await client.listAgents()).filter((agent) => agent.mode !== AgentMode.SUBAGENT);
  const chosen = ui.agent.value; // a refresh keeps the user's choice
  ui.agent.replaceChildren(
    ...agents.map((agent) => {
      const option = document.createElement("option");
      option.value = agent.name;
      // A stored agent shows its latest version, which a session opened on the bare name gets.
      option.textContent = agent.version > 0n ? `${agent.name} (v${agent.version})` : agent.name;
      option.title = agent.description;
      return option;
    }),
  );
  const names = agents.map((agent) => agent.name);
  ui.agent.value = [chosen, DEFAULT_AGENT].find((name) => names.includes(name)) ?? names[0] ?? "";
}

function currentSession(): string | undefined {
  return /^#\/s\/([\w-]+)$/.exec(location.hash)?.[1];
}

/** The Agents view's route: "" for the list, an agent's name for its versions; undefined elsewhere. */
function currentAgentsRoute(): string | undefined {
  const match = /^#\/agents(?:\/([\w-]+))?$/.exec(location.hash);
  return match ? (match[1] ?? "") : undefined;
}

/** The session's agent at the version it runs (a stored agent's), e.g. "tutor@2". */
function showAgent(session: Session): void {
  ui.sessionAgent.textContent = agentRef(session.agent, session.agentVersion);
  ui.sessionAgent.title =
    session.agentVersion > 0n ? `version ${session.agentVersion} of ${session.agent}` : "built-in agent";
}

/** Where a fork came from: a link to the original and the last turn the fork holds. */
function showOrigin(session: Session): void {
  const origin = session.forkedFrom;
  ui.origin.hidden = !origin;
  if (!origin) return;
  const link = document.createElement("a");
  link.href = `#/s/${origin.sessionId}`;
  link.textContent = origin.sessionId.slice(0, 8);
  const at = origin.turnId ? `after turn ${origin.turnId.slice(0, 8)}` : "before its first turn";
  ui.origin.replaceChildren("fork of ", link, ` ${at}`);
}

function openTurns(id: string): void {
  turnsPanel = undefined;
  ui.turns.hidden = ui.showTurns.getAttribute("aria-pressed") !== "true";
  ui.turns.replaceChildren();
  if (ui.turns.hidden) return;
  turnsPanel = new TurnsPanel(client, id, ui.turns, {
    error: showError,
    confirm: (question) => window.confirm(question),
    forked: (fork, question) => {
      draft = question;
      location.hash = `#/s/${fork.sessionId}`;
      loadSessions().catch(showError);
    },
  });
  void turnsPanel.refresh();
}

function openSession(): void {
  view?.close();
  view = undefined;
  const id = currentSession();
  const agentsRoute = currentAgentsRoute();
  ui.agents.hidden = agentsRoute === undefined;
  ui.session.hidden = !id;
  ui.empty.hidden = Boolean(id) || agentsRoute !== undefined;
  if (agentsRoute !== undefined) new AgentsView(client, ui.agents, { error: showError }).show(agentsRoute || undefined);
  ui.sessions.querySelectorAll("a").forEach((a) => a.classList.toggle("active", a.dataset.session === id));
  if (!id) return;
  ui.title.textContent = `session ${id}`;
  ui.origin.hidden = true;
  ui.sessionAgent.textContent = "";
  client
    .getSession(id)
    .then((session) => {
      if (id !== currentSession()) return;
      showOrigin(session);
      showAgent(session);
    })
    .catch(showError);
  view = new SessionView(client, id, ui.events, {
    error: showError,
    running: (turnId) => {
      const changed = runningTurn !== turnId;
      const ended = runningTurn !== undefined && turnId === undefined;
      runningTurn = turnId;
      ui.cancel.hidden = !turnId;
      if (changed) void turnsPanel?.refresh(); // a turn started or ended
      if (ended) loadSessions().catch(showError); // message counts and "turn running" changed
    },
    rewound: () => {
      void turnsPanel?.refresh();
      loadSessions().catch(showError);
    },
  });
  openTurns(id);
  view.start();
  if (draft !== undefined) ui.message.value = draft;
  draft = undefined;
  ui.message.focus();
}

async function refresh(): Promise<void> {
  clearError();
  try {
    await Promise.all([loadAgents(), loadSessions()]);
    ui.connection.textContent = `Connect · ${location.origin}${apiKey() ? " · key set" : ""}`;
  } catch (err) {
    showError(err);
  }
}

ui.keyForm.addEventListener("submit", (e) => {
  e.preventDefault();
  setApiKey(ui.key.value.trim());
  ui.key.value = "";
  ui.keyForm.hidden = true;
  client = makeClient();
  void refresh().then(openSession);
});

/** "end_user=alice, project=p1" as a scope; the gateway checks keys and values and names a bad one. */
function parseScope(text: string): Record<string, string> {
  const scope: Record<string, string> = {};
  for (const entry of text.split(",").map((part) => part.trim())) {
    if (!entry) continue;
    const at = entry.indexOf("=");
    if (at <= 0) {
      const violations = [{ field: "scope", description: `"${entry}" is not key=value` }];
      throw new CogmeshError(Code.InvalidArgument, "the scope is comma-separated key=value pairs", { violations });
    }
    scope[entry.slice(0, at).trim()] = entry.slice(at + 1).trim();
  }
  return scope;
}

ui.newSession.addEventListener("submit", (e) => {
  e.preventDefault();
  clearError();
  let scope: Record<string, string>;
  try {
    scope = parseScope(ui.scope.value);
  } catch (err) {
    showError(err);
    return;
  }
  // "name@version" or "name@alias" typed in takes precedence over the picker's latest version.
  const agent = ui.agentRef.value.trim() || ui.agent.value;
  client
    .createSession({ agent, scope })
    .then(async (session) => {
      ui.agentRef.value = "";
      location.hash = `#/s/${session.sessionId}`;
      await loadSessions();
    })
    .catch(showError);
});

ui.refresh.addEventListener("click", () => void refresh());

ui.composer.addEventListener("submit", (e) => {
  e.preventDefault();
  const text = ui.message.value.trim();
  if (!text || !view) return;
  clearError();
  ui.message.value = "";
  view.send(text);
});

ui.message.addEventListener("keydown", (e) => {
  if (e.key === "Enter" && !e.shiftKey) {
    e.preventDefault();
    ui.composer.requestSubmit();
  }
});

ui.showTurns.addEventListener("click", () => {
  const shown = ui.showTurns.getAttribute("aria-pressed") === "true";
  ui.showTurns.setAttribute("aria-pressed", String(!shown));
  const id = currentSession();
  if (id) openTurns(id);
});

ui.cancel.addEventListener("click", () => {
  const id = currentSession();
  if (id) client.cancelTurn(id, runningTurn).catch(showError);
});

window.addEventListener("hashchange", openSession);
void refresh();
openSession();
