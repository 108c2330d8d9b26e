// The official TypeScript SDK client (the one the MCP Inspector is built on) against a running
// AppDeck: lists the tools, then makes each call read as JSON from stdin and prints, per call,
// the result or what the client threw. Client.callTool validates every result's
// structuredContent against the tool's outputSchema (ajv, error results included in the 1.x
// line), so a result that does not fit comes back as `threw`.
//
//   node sdk_client.mjs <url> <token> < calls.json     calls: [{"name": ..., "arguments": ...}]
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, token] = process.argv.slice(2);
const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const calls = JSON.parse(Buffer.concat(chunks).toString() || "[]");

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const client = new Client({ name: "appdeck-sdk-check", version: "1.0.0" });
await client.connect(transport);
const tools = (await client.listTools()).tools.map((t) => t.name);
const results = [];
for (const call of calls) {
  try {
    const result = await client.callTool(call);
    results.push({ name: call.name, isError: result.isError === true, structuredContent: result.structuredContent });
  } catch (error) {
    results.push({ name: call.name, threw: String(error && error.message ? error.message : error) });
  }
}
await client.close();
process.stdout.write(JSON.stringify({ sdk: "typescript", tools, results }));
