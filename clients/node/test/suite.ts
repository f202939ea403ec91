// Test harness: the real suite as users run it, `cogmesh up --json` on free ports
// with an API keys file, stopped with SIGTERM like a user's Ctrl-C.
import { spawn, type ChildProcess } from "node:child_process";
import { createHash, randomBytes } from "node:crypto";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { createServer, type Server, type Socket, connect } from "node:net";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";

// dist/test/suite.js -> clients/node -> repository root
const packageRoot = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
const repoRoot = resolve(packageRoot, "..", "..");
// Every process `cogmesh up` starts, each on a free port (web: the browser edge, HTTP).
const SERVICES = ["models", "policy", "context", "sessions", "memory", "runtime", "gateway", "web"];

export async function freePort(): Promise<number> {
  const [port] = await freePorts(1);
  if (port === undefined) throw new Error("no port");
  return port;
}

/** `count` distinct free loopback ports, as tests/support/ports.py picks them: below the kernel's ephemeral
 * range when there is room (a port from listen(0) is one that outgoing connections and other port-0 servers
 * draw from too), each checked bindable and held until all are picked, so that they are distinct. */
export async function freePorts(count: number): Promise<number[]> {
  const ceiling = ephemeralFloor();
  const servers: Server[] = [];
  try {
    while (servers.length < count) {
      const port = ceiling > LOW_PORT + 1000 ? LOW_PORT + Math.floor(Math.random() * (ceiling - LOW_PORT)) : 0;
      const server = await new Promise<Server | null>((ok) => {
        const candidate = createServer();
        candidate.once("error", () => ok(null)); // taken: pick again
        candidate.listen(port, "127.0.0.1", () => ok(candidate));
      });
      if (server) servers.push(server);
    }
    return servers.map((server) => {
      const address = server.address();
      if (typeof address !== "object" || !address) throw new Error("no port");
      return address.port;
    });
  } finally {
    await Promise.all(servers.map((server) => new Promise<void>((ok) => server.close(() => ok()))));
  }
}

const LOW_PORT = 20000;

/** The first port of the kernel's ephemeral range (Linux's default 32768), or 0 when unknown. */
function ephemeralFloor(): number {
  try {
    return Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0]) || 0;
  } catch {
    return 0;
  }
}

export interface Suite {
  gateway: string;
  /** The browser edge's base URL (Connect and gRPC-Web), e.g. http://127.0.0.1:41234. */
  web: string;
  /** An API key per tenant, as the gateway's keys file maps them. */
  keys: Record<string, string>;
  stop(): Promise<void>;
}

export interface SuiteOptions {
  /** Key permissions per tenant, e.g. `{ acme: ["agents:write"] }`; a tenant not named gets none. */
  permissions?: Record<string, string[]>;
}

/** Start `cogmesh up` with authentication on: one fresh API key for each of `tenants`. */
export async function startSuite(
  tenants: string[],
  readyTimeoutMs = 240_000,
  options: SuiteOptions = {},
): Promise<Suite> {
  const keys = Object.fromEntries(tenants.map((t) => [t, `cm_test_${randomBytes(18).toString("hex")}`]));
  const dir = mkdtempSync(join(tmpdir(), "cogmesh-node-test-"));
  const keysFile = join(dir, "keys.yaml");
  const lines = Object.entries(keys).map(([tenant, key]) => {
    const sha = createHash("sha256").update(key).digest("hex");
    const permissions = options.permissions?.[tenant] ?? [];
    return `  - {sha256: ${sha}, tenant: ${tenant}, principal: ${tenant}-node-test, permissions: [${permissions.join(", ")}]}`;
  });
  writeFileSync(keysFile, `keys:\n${lines.join("\n")}\n`);
  try {
    const { gateway, web, stop } = await spawnSuite(keysFile, readyTimeoutMs);
    return {
      gateway,
      web,
      keys,
      stop: async () => {
        await stop();
        rmSync(dir, { recursive: true, force: true });
      },
    };
  } catch (err) {
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
}

async function spawnSuite(
  keysFile: string,
  readyTimeoutMs: number,
): Promise<{ gateway: string; web: string; stop(): Promise<void> }> {
  const bin = process.env.COGMESH_BIN ?? join(repoRoot, ".venv", "bin", "cogmesh");
  if (!existsSync(bin)) throw new Error(`${bin} not found: run \`make\` at the repository root (or set COGMESH_BIN)`);
  const env: NodeJS.ProcessEnv = { ...process.env };
  const ports = await freePorts(SERVICES.length + 1);
  for (const [i, name] of SERVICES.entries()) env[`COGMESH_${name.toUpperCase()}_ADDR`] = `127.0.0.1:${ports[i]}`;
  // Two runtime workers, as `cogmesh up` runs by default; the second would otherwise take port + 10.
  env.COGMESH_RUNTIME_ADDR += `,127.0.0.1:${ports[SERVICES.length]}`;
  delete env.COGMESH_DEV_MODE;
  env.COGMESH_API_KEYS_FILE = keysFile;
  env.COGMESH_HEARTBEAT_S = "1"; // so a test sees idle heartbeats quickly
  const child = spawn(bin, ["up", "--json", "--ready-timeout", "90"], {
    cwd: repoRoot,
    env,
    stdio: ["ignore", "pipe", "inherit"],
  });
  const lines: string[] = [];
  const ready = await new Promise<{ gateway: string; console: string }>((ok, fail) => {
    const timer = setTimeout(
      () => fail(new Error(`suite not ready in ${readyTimeoutMs} ms: ${lines.join("\n")}`)),
      readyTimeoutMs,
    );
    child.once("exit", (code) => fail(new Error(`cogmesh up exited with ${code}: ${lines.join("\n")}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      lines.push(line);
      const item = JSON.parse(line) as { event?: string; gateway?: string; console?: string };
      if (item.event === "ready" && item.gateway && item.console) {
        clearTimeout(timer);
        ok({ gateway: item.gateway, console: item.console });
      }
    });
  }).catch(async (err: unknown) => {
    await stopProcess(child);
    throw err;
  });
  return { gateway: ready.gateway, web: new URL(ready.console).origin, stop: () => stopProcess(child) };
}

async function stopProcess(child: ChildProcess): Promise<void> {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = new Promise<void>((ok) => child.once("exit", () => ok()));
  child.kill("SIGTERM");
  const timer = setTimeout(() => child.kill("SIGKILL"), 30_000);
  await exited;
  clearTimeout(timer);
}

/**
 * A TCP proxy in front of the gateway whose connections the test can cut, to
 * break streams the way a network or a load balancer does.
 */
export class CuttableProxy {
  private readonly sockets = new Set<Socket>();
  private server?: Server;
  address = "";
  /** Connections accepted so far: a reconnecting client opens a new one. */
  accepted = 0;

  constructor(private readonly target: string) {}

  async start(): Promise<this> {
    const [host, port] = this.target.split(":") as [string, string];
    this.server = createServer((inbound) => {
      this.accepted += 1;
      const outbound = connect(Number(port), host);
      for (const s of [inbound, outbound]) {
        this.sockets.add(s);
        s.once("close", () => this.sockets.delete(s));
        s.on("error", () => {});
      }
      inbound.pipe(outbound).pipe(inbound);
      inbound.once("close", () => outbound.destroy());
      outbound.once("close", () => inbound.destroy());
    });
    await new Promise<void>((ok) => this.server!.listen(0, "127.0.0.1", ok));
    const address = this.server.address();
    if (typeof address !== "object" || !address) throw new Error("proxy has no address");
    this.address = `127.0.0.1:${address.port}`;
    return this;
  }

  /** Reset every open connection (new ones are still accepted). Returns how many were cut. */
  cut(): number {
    const n = this.sockets.size;
    for (const s of this.sockets) s.resetAndDestroy();
    return n;
  }

  async stop(): Promise<void> {
    this.cut();
    await new Promise<void>((ok) => (this.server ? this.server.close(() => ok()) : ok()));
  }
}
