// Generates src/gen/ (TypeScript, committed) from ../../protos with buf and
// protoc-gen-es (pinned in package.json).
//
//   node scripts/generate.mjs          regenerate src/gen
//   node scripts/generate.mjs --check  exit 1 when src/gen is stale
//
// buf is the repository's (`make lint` installs it in .tools/, version pinned in the
// Makefile) or $BUF: the npm registry reachable here serves no buf binary for other
// platforms, so pinning it in this package's lock file would break `npm ci`.
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const bin = join(root, "node_modules", ".bin");
const genDir = "src/gen";
const bufPath = process.env.BUF ?? join(root, "..", "..", ".tools", "node_modules", ".bin", "buf");

function buf(outBase) {
  if (!existsSync(bufPath)) {
    console.error(`buf not found at ${bufPath}: run \`make lint\` at the repository root, or set BUF`);
    process.exit(2);
  }
  // protoc-gen-es is found on PATH, like npm scripts do.
  execFileSync(bufPath, ["generate", "--template", "buf.gen.yaml", "-o", outBase], {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, PATH: `${bin}:${process.env.PATH ?? ""}` },
  });
}

function files(dir) {
  const out = new Map();
  const walk = (d) => {
    for (const name of readdirSync(d)) {
      const path = join(d, name);
      if (statSync(path).isDirectory()) walk(path);
      else out.set(relative(dir, path), readFileSync(path, "utf8"));
    }
  };
  try {
    walk(dir);
  } catch (err) {
    if (err.code !== "ENOENT") throw err;
  }
  return out;
}

if (process.argv.includes("--check")) {
  const tmp = mkdtempSync(join(tmpdir(), "cogmesh-node-gen-"));
  try {
    buf(tmp);
    const want = files(join(tmp, genDir));
    const have = files(join(root, genDir));
    const stale = [...new Set([...want.keys(), ...have.keys()])]
      .filter((path) => want.get(path) !== have.get(path))
      .sort();
    if (stale.length > 0) {
      console.error(`generated code is stale; run \`npm run generate\` in clients/node:\n  ${stale.join("\n  ")}`);
      process.exit(1);
    }
    console.log(`generated code is up to date (${want.size} files)`);
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
} else {
  rmSync(join(root, genDir), { recursive: true, force: true });
  buf(root);
  console.log(`generated ${files(join(root, genDir)).size} files under ${genDir}`);
}
