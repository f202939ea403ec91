// Bundles the console into dist/ (served by the browser edge at /console/): src/main.ts with the
// Node client's browser entry (@cogmesh/client/web, mapped to its sources by tsconfig.json's
// paths) and its generated code, plus the static page and style sheet. dist/ is not committed.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(fileURLToPath(import.meta.url));
const out = join(root, "dist");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });
const result = await build({
  entryPoints: [join(root, "src", "main.ts")],
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  minify: true,
  sourcemap: true,
  outfile: join(out, "app.js"),
  tsconfig: join(root, "tsconfig.json"),
  metafile: true,
  logLevel: "warning",
});
for (const file of ["index.html", "style.css"]) copyFileSync(join(root, file), join(out, file));
const bytes = result.metafile.outputs["dist/app.js"]?.bytes ?? 0;
console.log(`console built in ${out} (app.js ${(bytes / 1024).toFixed(0)} KiB)`);
