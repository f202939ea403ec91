// Validates custom resources against the OpenAPI schemas of their CRDs, as shipped by the
// @kubernetes-models packages. Reads a JSON array of resources on stdin and prints one JSON
// line per resource: {"kind", "name", "ok", "error"}. Exit code 1 when any is invalid or has
// no known schema.
const MODELS = {
  "networking.istio.io": "@kubernetes-models/istio/networking.istio.io",
  "security.istio.io": "@kubernetes-models/istio/security.istio.io",
  "telemetry.istio.io": "@kubernetes-models/istio/telemetry.istio.io",
  "gateway.networking.k8s.io": "@kubernetes-models/gateway-api/gateway.networking.k8s.io",
};

async function validate(resource) {
  const [group, version] = resource.apiVersion.split("/");
  const base = MODELS[group];
  const out = { kind: resource.kind, name: resource.metadata?.name ?? "", ok: false, error: "" };
  if (!base) {
    out.error = `no schema for API group ${group}`;
    return out;
  }
  let Model;
  try {
    ({ [resource.kind]: Model } = await import(`${base}/${version}/${resource.kind}`));
  } catch {
    out.error = `no schema for ${resource.apiVersion} ${resource.kind}`;
    return out;
  }
  try {
    new Model(resource).validate();
    out.ok = true;
  } catch (err) {
    out.error = String(err.message ?? err);
  }
  return out;
}

let input = "";
for await (const chunk of process.stdin) input += chunk;
let failed = false;
for (const resource of JSON.parse(input)) {
  const result = await validate(resource);
  failed ||= !result.ok;
  console.log(JSON.stringify(result));
}
process.exit(failed ? 1 : 0);
