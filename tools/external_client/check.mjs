// Drive nspy-mcp from outside, as a third-party client would: the official TypeScript MCP
// SDK over stdio. The SDK's callTool validates every structuredContent against the tool's
// outputSchema and throws on a mismatch, so a run that ends "all answers valid" means every
// answer below matched the schema the server published.
//
//   cd tools/external_client && npm install && node check.mjs [PYTHON]
//
// Runs on a CPU host (events backend, CPU torch): the catalogue's reference and two of its
// candidates, one correct and one wrong, then the answers an agent reads next.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(import.meta.dirname, "..", "..");
const python = process.argv[2] ?? "python3";
const store = mkdtempSync(join(tmpdir(), "nspy-ext-"));
const transport = new StdioClientTransport({
  command: python,
  args: ["-m", "nspy_mcp", "serve", "--store", store],
  env: { ...process.env, PYTHONPATH: root },
  stderr: "ignore",
});
const client = new Client({ name: "external-check", version: "1.0.0" });
await client.connect(transport);

const failures = [];
async function call(name, args, { expectError = false } = {}) {
  try {
    const answer = await client.callTool({ name, arguments: args });
    const ok = Boolean(answer.isError) === expectError;
    const first = (answer.content?.[0]?.text ?? "").split("\n")[0].slice(0, 110);
    console.log(`${ok ? "ok  " : "FAIL"} ${name}${expectError ? " (error expected)" : ""}: ${first}`);
    if (!ok) failures.push(`${name}: isError=${answer.isError}`);
    return answer;
  } catch (err) {
    console.log(`FAIL ${name}: ${err.message.slice(0, 300)}`);
    failures.push(`${name}: ${err.message}`);
    return null;
  }
}

const { tools } = await client.listTools();
for (const t of tools) {
  if (!t.outputSchema) failures.push(`${t.name} publishes no outputSchema`);
}
console.log(`tools: ${tools.map((t) => t.name).join(", ")}`);
await call("check_environment", {});
await call("validate_metrics", { metrics: ["gpu__time_duration.sum"], chip: "gh100" });
await call("validate_metrics", { metrics: ["gpu__time_duration.sum"], chip: "no-such-chip" }, { expectError: true });
const hacks = join(root, "tests", "hacks");
const request = {
  reference: "_reference.py:softmax",
  candidates: ["legit_stable_softmax.py:candidate", "lazy_zeros.py:candidate"],
  inputs: "_reference.py:make_inputs",
  workdir: hacks,
  configs: [{ rows: 32, cols: 64 }],
  backend: "events",
  runs: 3,
  wait_s: 120,
};
const done = await call("profile_candidates", { request });
const id = done?.structuredContent?.result_id;
if (id) {
  await call("read_results", { result_id: id });
  await call("read_results", { result_id: id, detail: "full" });
  await call("read_results", { result_id: id, annotation: "lazy_zeros.py:candidate" });
}
await call("read_results", {});
await call("profile_candidates", { request: { ...request, stages: { screen: "events", top_k: 1 } } }, { expectError: true });
await call("profile_candidates", { request: { ...request, runs: "5" } }, { expectError: true });
await call("read_results", { result_id: "../../etc/passwd" }, { expectError: true });
const { resources } = await client.listResources();
const { prompts } = await client.listPrompts();
console.log(`resources: ${resources.length}, prompts: ${prompts.length}`);
await client.close();
if (failures.length) {
  console.log(`${failures.length} failure(s):\n  ${failures.join("\n  ")}`);
  process.exit(1);
}
console.log("all answers valid against the published output schemas");
