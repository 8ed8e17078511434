// Drives one MCP server over stdio with the official TypeScript client
// (@modelcontextprotocol/client 2.x) and prints what the client saw as one JSON object.
//
// Usage: node ts_client.cjs PLAN_JSON, with NODE_PATH naming the node_modules folder that
// scripts/install-clients.sh fills (CommonJS resolution honours NODE_PATH; ES modules do
// not, hence .cjs). PLAN_JSON is
//   {"mode": "2026-07-28" | "auto" | "legacy",
//    "server": {"command": ..., "args": [...], "env": {...}, "cwd": ...},
//    "calls": [{"name": ..., "arguments": {...}}, ...],
//    "control": {"name": ..., "arguments": {...}}}
// "2026-07-28" pins the client to that revision (versionNegotiation mode {pin}), "auto"
// probes server/discover and falls back, "legacy" runs the 2025 handshake. The client lists
// the tools, then makes each call; callTool validates a result's structuredContent against
// the listed outputSchema itself and fails the call when it does not conform. The control
// call proves that check is live: it is made with the tool's definition narrowed by a member
// the result cannot have, and must be refused by the client.
//
// Output: {"protocolVersion", "era", "serverVersion", "tools", "calls": [outcome...],
// "control": outcome}, each outcome {"result": ...} or {"error": {"name", "code",
// "message"}}. The process fails (exit 1, the reason on stderr) only when the client cannot
// connect or list the tools; the test judges everything else from the output.
'use strict';

const { Client } = require('@modelcontextprotocol/client');
const { StdioClientTransport } = require('@modelcontextprotocol/client/stdio');

// The member the control call's narrowed output schema requires; no tool result has it.
const ABSENT_MEMBER = 'member_no_result_has';

function negotiation(mode) {
  if (mode === 'auto' || mode === 'legacy') return { mode };
  return { mode: { pin: mode } };
}

function outcome(promise) {
  return promise.then(
    (result) => ({ result }),
    (error) => ({
      error: { name: error.constructor.name, code: error.code ?? null, message: String(error.message) },
    }),
  );
}

async function main() {
  const plan = JSON.parse(process.argv[2]);
  const client = new Client(
    { name: 'mcp-server-suite-tests', version: '1.0.0' },
    { versionNegotiation: negotiation(plan.mode) },
  );
  const transport = new StdioClientTransport({ ...plan.server, stderr: 'inherit' });
  await client.connect(transport);
  try {
    const { tools } = await client.listTools();
    const calls = [];
    for (const call of plan.calls) {
      calls.push(await outcome(client.callTool({ name: call.name, arguments: call.arguments })));
    }
    const tool = tools.find((candidate) => candidate.name === plan.control.name);
    const narrowed = {
      ...tool,
      outputSchema: { ...tool.outputSchema, required: [...(tool.outputSchema.required ?? []), ABSENT_MEMBER] },
    };
    const control = await outcome(
      client.callTool({ name: plan.control.name, arguments: plan.control.arguments }, { toolDefinition: narrowed }),
    );
    const report = {
      protocolVersion: client.getNegotiatedProtocolVersion() ?? null,
      era: client.getProtocolEra() ?? null,
      serverVersion: client.getServerVersion() ?? null,
      tools,
      calls,
      control,
    };
    process.stdout.write(JSON.stringify(report) + '\n');
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  process.stderr.write(`ts_client: ${error && error.stack ? error.stack : error}\n`);
  process.exitCode = 1;
});
