// What the TypeScript SDK (@modelcontextprotocol/client 2.x, 2026-07-28) does with nspy-mcp's
// tasks extension (io.modelcontextprotocol/tasks, SEP-2663), over stdio:
//
//   cd tools/external_client && npm install && node tasks_probe.mjs [PYTHON]
//
// The client declares the extension (capabilities.extensions), calls profile_candidates, and
// reports what the SDK does with the task answer; then it follows the task with raw
// tasks/get requests (the SDK lets extension methods through with a caller's schema) and
// cancels it with tasks/cancel. Exits 1 if the server side of the flow fails; how the SDK
// treats `resultType: "task"` on tools/call is printed, not judged.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { z } from "zod";
import { Client } from "@modelcontextprotocol/client";
import { StdioClientTransport } from "@modelcontextprotocol/client/stdio";

const root = resolve(process.env.NSPY_ROOT ?? join(import.meta.dirname, "..", ".."));
const python = process.argv[2] ?? "python3";
const TASKS = "io.modelcontextprotocol/tasks";
const store = mkdtempSync(join(tmpdir(), "nspy-tasks-"));
const client = new Client(
  { name: "tasks-probe", version: "1.0.0" },
  { versionNegotiation: { mode: { pin: "2026-07-28" } }, capabilities: { extensions: { [TASKS]: {} } } },
);
await client.connect(
  new StdioClientTransport({
    command: python,
    args: ["-m", "nspy_mcp", "serve", "--store", store],
    env: { ...process.env, PYTHONPATH: root },
    stderr: "ignore",
  }),
);
const problems = [];
const advertised = client.getServerCapabilities()?.extensions ?? {};
console.log(`protocol ${client.getNegotiatedProtocolVersion()}; server advertises ${TASKS}: ${TASKS in advertised}`);
if (!(TASKS in advertised)) problems.push("the server does not advertise the extension");

const request = {
  reference: "_reference.py:softmax",
  candidates: ["legit_stable_softmax.py:candidate"],
  inputs: "_reference.py:make_inputs",
  workdir: join(root, "tests", "hacks"),
  configs: [{ rows: 32, cols: 64 }],
  backend: "events",
  runs: 3,
};
try {
  const answer = await client.callTool({ name: "profile_candidates", arguments: { request } });
  console.log(`callTool with the extension declared: answered (${JSON.stringify(answer).slice(0, 80)})`);
} catch (err) {
  console.log(`callTool with the extension declared: the SDK refuses the task answer: ${err.message}`);
}

// The task was created before the answer; its id is the newest result's.
const listing = await client.callTool({ name: "read_results", arguments: { limit: 1 } });
const taskId = listing.structuredContent.results[0]?.result_id;
const Task = z.object({ status: z.string(), statusMessage: z.string().optional() }).passthrough();
let task = { status: "working" };
for (let polls = 0; task.status === "working" && polls < 120; polls += 1) {
  task = await client.request({ method: "tasks/get", params: { taskId } }, Task);
  console.log(`tasks/get: ${task.status}: ${(task.statusMessage ?? "").slice(0, 90)}`);
  if (task.status === "working") await new Promise((ok) => setTimeout(ok, task.pollIntervalMs ?? 1000));
}
if (task.status !== "completed" || !task.result?.structuredContent) problems.push(`task ended ${task.status}`);
else console.log(`completed: result ${task.result.structuredContent.result_id}, status ${task.result.structuredContent.status}`);
await client.request({ method: "tasks/cancel", params: { taskId } }, z.object({}).passthrough());
console.log("tasks/cancel: acknowledged");
await client.close();
console.log(problems.length ? `FAIL: ${problems.join("; ")}` : "server side of the tasks flow: ok");
process.exit(problems.length ? 1 : 0);
