// Drives one MCP server over stdio with the Vercel AI SDK's MCP client (@ai-sdk/mcp), an MCP
// client written apart from the official SDKs, and prints what it saw as one JSON object.
//
// Usage: node ai_sdk_client.cjs PLAN_JSON, with NODE_PATH naming the node_modules folder that
// scripts/install-clients.sh fills. The package is an ES module only; require.resolve finds it
// through NODE_PATH (ES module resolution does not honour NODE_PATH) and import() loads it.
// PLAN_JSON is
//   {"mode": "auto" | "legacy", "waitForProbe": true | false,
//    "server": {"command": ..., "args": [...], "env": {...}, "cwd": ...},
//    "calls": [{"name": ..., "arguments": {...}}, ...],
//    "abort": {"name": ..., "arguments": {...}}}
// "auto" is the client's default: it probes server/discover on the session's own process and
// falls back to initialize when the probe fails. Over stdio the client also falls back when
// the answer takes over a second, which a loaded test machine's Python start-up can exceed;
// with "waitForProbe" the transport is marked as one that waits for the probe's answer, as
// the client's own HTTP transport is, and the session is otherwise the default one. "legacy"
// sets protocolVersionDiscovery: false, the 2025-11-25 handshake. The client lists the tools, then
// makes each call through the AI SDK tool that client.tools() builds, the way generateText
// runs a tool call: execute() for the result, toModelOutput() for what the model is shown.
// Then it makes the abort call and aborts it at once, as an application does when a user
// stops a generation.
//
// Output: {"protocolVersion", "serverInfo", "tools", "calls": [outcome...], "modelOutputs":
// [...], "aborted": outcome}, each outcome {"result": ...} or {"error": {"name", "code",
// "message"}}. The process fails (exit 1, the reason on stderr)
// only when the client cannot connect or list the tools; the test judges everything else.
'use strict';

const { pathToFileURL } = require('node:url');

function load(specifier) {
  return import(pathToFileURL(require.resolve(specifier)).href);
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
  const { createMCPClient } = await load('@ai-sdk/mcp');
  const { Experimental_StdioMCPTransport } = await load('@ai-sdk/mcp/mcp-stdio');
  const transport = new Experimental_StdioMCPTransport({ ...plan.server, stderr: 'inherit' });
  transport.waitsForProtocolVersionDiscovery = plan.waitForProbe;
  const client = await createMCPClient({
    transport,
    clientName: 'mcp-server-suite-tests',
    protocolVersionDiscovery: plan.mode !== 'legacy',
  });
  try {
    const { tools } = await client.listTools();
    const aiTools = await client.tools();
    const calls = [];
    const modelOutputs = [];
    for (const [index, call] of plan.calls.entries()) {
      const tool = aiTools[call.name];
      const toolCallId = `call-${index}`;
      const result = await outcome(tool.execute(call.arguments, { toolCallId, messages: [] }));
      calls.push(result);
      modelOutputs.push(
        'result' in result
          ? await tool.toModelOutput({ toolCallId, input: call.arguments, output: result.result })
          : null,
      );
    }
    const controller = new AbortController();
    const pending = client.callTool({
      name: plan.abort.name,
      arguments: plan.abort.arguments,
      options: { signal: controller.signal },
    });
    controller.abort();
    const aborted = await outcome(pending);
    const report = {
      protocolVersion: client.initializeResult.protocolVersion,
      serverInfo: client.serverInfo,
      tools,
      calls,
      modelOutputs,
      aborted,
    };
    process.stdout.write(JSON.stringify(report) + '\n');
  } finally {
    await client.close();
  }
}

main().catch((error) => {
  process.stderr.write(`ai_sdk_client: ${error && error.stack ? error.stack : error}\n`);
  process.exitCode = 1;
});
