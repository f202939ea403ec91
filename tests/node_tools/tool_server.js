// A cogmesh.tools.v1.ToolService in Node: proof that any language can serve tools.
//
//   node tool_server.js [port]     (port 0 or none: any free port)
//
// Prints "LISTENING <port>" on stdout once it serves. Tools:
//   word_count {text}         -> number of words
//   reverse {text}            -> the text reversed
//   flaky {key, failures}     -> UNAVAILABLE for the first `failures` calls with that key, then "ok after N"
//   slow {ms}                 -> answers after ms milliseconds
//   refuse {reason}           -> a tool-level error (is_error)
//   whoami {}                 -> the call id, session id and tenant id it was called with
"use strict";

const path = require("path");
const grpc = require("@grpc/grpc-js");
const protoLoader = require("@grpc/proto-loader");

const PROTOS = path.resolve(__dirname, "..", "..", "protos");
const definition = protoLoader.loadSync("cogmesh/tools/v1/tools.proto", {
  includeDirs: [PROTOS],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const tools = grpc.loadPackageDefinition(definition).cogmesh.tools.v1;

// google.protobuf.Struct <-> plain JSON. protobufjs bundles struct.proto with camelCase
// field names (numberValue, ...), whatever keepCase says for our own protos.
function fromValue(v) {
  if (v === null || v === undefined) return null;
  switch (v.kind) {
    case "nullValue": return null;
    case "numberValue": return v.numberValue;
    case "stringValue": return v.stringValue;
    case "boolValue": return v.boolValue;
    case "structValue": return fromStruct(v.structValue);
    case "listValue": return (v.listValue.values || []).map(fromValue);
    default: return null;
  }
}
function fromStruct(s) {
  const out = {};
  for (const [k, v] of Object.entries((s && s.fields) || {})) out[k] = fromValue(v);
  return out;
}
function toValue(x) {
  if (x === null || x === undefined) return { nullValue: "NULL_VALUE" };
  if (typeof x === "number") return { numberValue: x };
  if (typeof x === "string") return { stringValue: x };
  if (typeof x === "boolean") return { boolValue: x };
  if (Array.isArray(x)) return { listValue: { values: x.map(toValue) } };
  return { structValue: toStruct(x) };
}
function toStruct(o) {
  const fields = {};
  for (const [k, v] of Object.entries(o)) fields[k] = toValue(v);
  return { fields };
}

const TEXT = { type: "object", properties: { text: { type: "string" } }, required: ["text"] };
const SPECS = [
  { name: "word_count", description: "Count the words of a text.", parameters: toStruct(TEXT) },
  { name: "reverse", description: "Reverse a text.", parameters: toStruct(TEXT) },
  {
    name: "flaky",
    description: "Fails as unavailable for the first `failures` calls with the same key.",
    parameters: toStruct({
      type: "object",
      properties: { key: { type: "string" }, failures: { type: "number" } },
      required: ["key", "failures"],
    }),
  },
  {
    name: "slow",
    description: "Answers after `ms` milliseconds.",
    parameters: toStruct({ type: "object", properties: { ms: { type: "number" } }, required: ["ms"] }),
  },
  {
    name: "refuse",
    description: "Always reports a tool error.",
    parameters: toStruct({ type: "object", properties: { reason: { type: "string" } } }),
  },
  { name: "whoami", description: "Who called.", parameters: toStruct({ type: "object", properties: {} }) },
];

const flakyCalls = new Map();

function callTool(call, callback) {
  const req = call.request;
  const args = fromStruct(req.arguments);
  const ok = (content, structured) =>
    callback(null, { content, is_error: false, structured_content: structured ? toStruct(structured) : null });
  switch (req.name) {
    case "word_count": {
      const words = String(args.text || "").split(/\s+/).filter(Boolean).length;
      return ok(String(words), { words });
    }
    case "reverse":
      return ok(String(args.text || "").split("").reverse().join(""));
    case "flaky": {
      const seen = (flakyCalls.get(args.key) || 0) + 1;
      flakyCalls.set(args.key, seen);
      if (seen <= Number(args.failures || 0)) {
        return callback({ code: grpc.status.UNAVAILABLE, details: `flaky: failure ${seen} of ${args.failures}` });
      }
      return ok(`ok after ${seen - 1} failure(s)`);
    }
    case "slow":
      return setTimeout(() => ok(`waited ${args.ms} ms`), Number(args.ms || 0));
    case "refuse":
      return callback(null, { content: `refused: ${args.reason || "no reason"}`, is_error: true });
    case "whoami":
      return ok(JSON.stringify({ call_id: req.call_id, session_id: req.session_id, tenant_id: req.tenant_id }));
    default:
      return callback({ code: grpc.status.NOT_FOUND, details: `no tool named ${JSON.stringify(req.name)}` });
  }
}

const server = new grpc.Server();
server.addService(tools.ToolService.service, {
  ListTools: (call, callback) => callback(null, { tools: SPECS }),
  CallTool: callTool,
});
const port = process.argv[2] || "0";
server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, bound) => {
  if (err) {
    console.error(err.message);
    process.exit(1);
  }
  console.log(`LISTENING ${bound}`);
});
for (const signal of ["SIGTERM", "SIGINT"]) {
  process.on(signal, () => server.tryShutdown(() => process.exit(0)));
}
