// Parses PromQL expressions with Prometheus' own grammar (@prometheus-io/lezer-promql).
// Reads a JSON array of strings on stdin; prints one JSON line per expression:
// {"expr", "ok", "error"}. Exit code 1 when any does not parse. Grafana variables must be
// substituted by the caller first.
import { parser } from "@prometheus-io/lezer-promql";

let input = "";
for await (const chunk of process.stdin) input += chunk;
let failed = false;
for (const expr of JSON.parse(input)) {
  let at = -1;
  parser.parse(expr).iterate({
    enter: (node) => {
      if (node.type.isError && at < 0) at = node.from;
    },
  });
  const ok = at < 0 && expr.trim().length > 0;
  failed ||= !ok;
  const error = ok ? "" : `syntax error at offset ${Math.max(at, 0)}: ${expr.slice(Math.max(at, 0), at + 20)}`;
  console.log(JSON.stringify({ expr, ok, error }));
}
process.exit(failed ? 1 : 0);
