// A cogmesh.policy.v1.HookService in Node, for the policy service's tests.
//
// It loads protos/cogmesh/policy/v1/hooks.proto directly, listens on the port
// given as the first argument (0 picks a free one) and prints "LISTENING <port>"
// once bound. Every call it receives is printed as one JSON line, so a test can
// check what reached it. What it answers depends on the call:
//
//   PreToolUse        tool names containing "dangerous" are denied; a "city"
//                     argument is upper-cased (input rewrite); "slow_tool"
//                     answers after 2 s (a timeout); "broken_tool" fails.
//   PostToolUse       results containing "secret" are replaced.
//   UserPromptSubmit  prompts containing "forbidden" are blocked.
//   Stop              acknowledged.
'use strict';

const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTOS = path.resolve(__dirname, '..', '..', 'protos');
const definition = protoLoader.loadSync('cogmesh/policy/v1/hooks.proto', {
  includeDirs: [PROTOS],
  keepCase: true,
  longs: String,
  enums: String,
  defaults: true,
  oneofs: true,
});
const { HookService } = grpc.loadPackageDefinition(definition).cogmesh.policy.v1;

// google.protobuf.Struct <-> plain objects.
function fromValue(value) {
  switch (value.kind) {
    case 'nullValue': return null;
    case 'numberValue': return value.numberValue;
    case 'stringValue': return value.stringValue;
    case 'boolValue': return value.boolValue;
    case 'structValue': return fromStruct(value.structValue);
    case 'listValue': return (value.listValue.values || []).map(fromValue);
    default: return null;
  }
}
function fromStruct(struct) {
  const out = {};
  for (const [key, value] of Object.entries((struct && struct.fields) || {})) out[key] = fromValue(value);
  return out;
}
function toValue(value) {
  if (value === null || value === undefined) return { nullValue: 'NULL_VALUE' };
  if (typeof value === 'number') return { numberValue: value };
  if (typeof value === 'string') return { stringValue: value };
  if (typeof value === 'boolean') return { boolValue: value };
  if (Array.isArray(value)) return { listValue: { values: value.map(toValue) } };
  return { structValue: toStruct(value) };
}
function toStruct(object) {
  const fields = {};
  for (const [key, value] of Object.entries(object)) fields[key] = toValue(value);
  return { fields };
}

function record(rpc, request, extra) {
  const context = request.context || {};
  console.log(JSON.stringify({ rpc, session_id: context.session_id, turn_id: context.turn_id, agent: context.agent, ...extra }));
}

const handlers = {
  PreToolUse(call, callback) {
    const { tool_name: tool } = call.request;
    const input = fromStruct(call.request.tool_input);
    record('PreToolUse', call.request, { tool_name: tool, tool_input: input, tool_call_id: call.request.tool_call_id });
    if (tool === 'slow_tool') {
      setTimeout(() => callback(null, {}), 2000);
      return;
    }
    if (tool === 'broken_tool') {
      callback({ code: grpc.status.INTERNAL, details: 'node hook crashed' });
      return;
    }
    if (tool.includes('dangerous')) {
      callback(null, { deny: true, reason: `node says no to ${tool}` });
      return;
    }
    if (typeof input.city === 'string') {
      callback(null, { updated_input: toStruct({ ...input, city: input.city.toUpperCase() }) });
      return;
    }
    callback(null, {});
  },
  PostToolUse(call, callback) {
    const { tool_name: tool, result, is_error: isError } = call.request;
    record('PostToolUse', call.request, { tool_name: tool, result, is_error: isError });
    if (result.includes('secret')) {
      callback(null, { replace: true, updated_result: '[node redacted]' });
      return;
    }
    callback(null, { replace: false });
  },
  UserPromptSubmit(call, callback) {
    const { prompt } = call.request;
    record('UserPromptSubmit', call.request, { prompt });
    if (prompt.includes('forbidden')) {
      callback(null, { block: true, reason: 'node blocks forbidden topics' });
      return;
    }
    callback(null, { block: false });
  },
  Stop(call, callback) {
    record('Stop', call.request, { final_text: call.request.final_text });
    callback(null, {});
  },
};

const server = new grpc.Server();
server.addService(HookService.service, handlers);
const port = process.argv[2] || '0';
server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (error, bound) => {
  if (error) {
    console.error(`cannot bind 127.0.0.1:${port}: ${error.message}`);
    process.exit(1);
  }
  console.log(`LISTENING ${bound}`);
});

function shutdown() {
  server.tryShutdown(() => process.exit(0));
  setTimeout(() => process.exit(0), 1000).unref();
}
process.on('SIGTERM', shutdown);
process.on('SIGINT', shutdown);
