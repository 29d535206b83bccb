// Drive nspy-mcp from outside, as a third-party client would: the official TypeScript MCP
// SDKs over stdio, in both protocol eras. Each SDK's callTool validates every
// structuredContent against the tool's outputSchema and throws on a mismatch, so a run that
// ends "0 schema mismatches" means every answer below matched the schema the server published.
//
//   cd tools/external_client && npm install && node check.mjs [PYTHON]
//
// Clients: "sdk1" (@modelcontextprotocol/sdk 1.x, what most hosts ship: 2025-11-25),
// "legacy" and "modern" (@modelcontextprotocol/client 2.x pinned to the 2025-11-25 handshake
// and to the 2026-07-28 revision). NSPY_CLIENTS=sdk1,modern picks some of them.
// Runs on a CPU host (events backend): the catalogue's reference and two of its candidates,
// one correct and one wrong, then every tool, resource, resource link and prompt.
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";

const root = resolve(process.env.NSPY_ROOT ?? join(import.meta.dirname, "..", ".."));
const python = process.argv[2] ?? "python3";
const clients = (process.env.NSPY_CLIENTS ?? "sdk1,legacy,modern").split(",");

async function connect(kind) {
  const store = mkdtempSync(join(tmpdir(), "nspy-ext-"));
  const params = {
    command: python,
    args: ["-m", "nspy_mcp", "serve", "--store", store],
    env: { ...process.env, PYTHONPATH: root },
    stderr: "ignore",
  };
  const info = { name: "external-check", version: "1.0.0" };
  if (kind === "sdk1") {
    const { Client } = await import("@modelcontextprotocol/sdk/client/index.js");
    const { StdioClientTransport } = await import("@modelcontextprotocol/sdk/client/stdio.js");
    const client = new Client(info);
    await client.connect(new StdioClientTransport(params));
    return { client, era: "2025-11-25 (sdk 1.x)" };
  }
  const { Client } = await import("@modelcontextprotocol/client");
  const { StdioClientTransport } = await import("@modelcontextprotocol/client/stdio");
  const mode = kind === "modern" ? { pin: "2026-07-28" } : "legacy";
  const client = new Client(info, { versionNegotiation: { mode } });
  await client.connect(new StdioClientTransport(params));
  return { client, era: client.getNegotiatedProtocolVersion() ?? "?" };
}

async function check(kind) {
  const { client, era } = await connect(kind);
  const failures = [];
  let mismatches = 0;
  let longest = 0;
  const links = new Set();
  const note = (ok, what) => {
    console.log(`  ${ok ? "ok  " : "FAIL"} ${what}`);
    if (!ok) failures.push(what);
  };
  async function call(name, args, { expectError = false } = {}) {
    try {
      const answer = await client.callTool({ name, arguments: args });
      const text = answer.content?.find((c) => c.type === "text")?.text ?? "";
      for (const c of answer.content ?? []) if (c.type === "resource_link") links.add(c.uri);
      const first = text.split("\n")[0].slice(0, 90);
      longest = Math.max(longest, text.length);
      note(Boolean(answer.isError) === expectError, `${name}${expectError ? " (error expected)" : ""}: ${first}`);
      if (text.length > 16384) note(false, `${name}: text of ${text.length} characters`);
      return answer;
    } catch (err) {
      if (/schema|structured/i.test(err.message)) mismatches += 1;
      note(false, `${name}: ${err.message.slice(0, 300)}`);
      return null;
    }
  }

  console.log(`${kind}: protocol ${era}`);
  const { tools } = await client.listTools();
  for (const t of tools) if (!t.outputSchema) note(false, `${t.name} publishes no outputSchema`);
  console.log(`  tools/list: ${JSON.stringify({ tools }).length} bytes, ${tools.map((t) => t.name).join(", ")}`);
  await call("check_environment", {});
  await call("validate_metrics", { metrics: ["gpu__time_duration.sum", "dram__throughput"], chip: "gh100" });
  await call("validate_metrics", { metrics: ["gpu__time_duration.sum"], chip: "no-such-chip" }, { expectError: true });
  const request = {
    reference: "_reference.py:softmax",
    candidates: ["legit_stable_softmax.py:candidate", "lazy_zeros.py:candidate"],
    inputs: "_reference.py:make_inputs",
    workdir: join(root, "tests", "hacks"),
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
    await call("read_results", { result_id: id, cancel: true });
  }
  await call("read_results", {});
  await call("profile_candidates", { request: { ...request, stages: { screen: "events", top_k: 1 } } }, { expectError: true });
  await call("profile_candidates", { request: { ...request, runs: "5" } }, { expectError: true });
  await call("read_results", { result_id: "../../etc/passwd" }, { expectError: true });

  const { resources } = await client.listResources();
  const { resourceTemplates } = await client.listResourceTemplates();
  const uris = [...resources.map((r) => r.uri), ...links];
  if (id) {
    // A job's files are read through the answer's resource links: only the files it left.
    for (const t of resourceTemplates) {
      if (!t.uriTemplate.includes("/files/")) uris.push(t.uriTemplate.replace("{result_id}", id));
    }
  }
  for (const uri of uris) {
    try {
      const { contents } = await client.readResource({ uri });
      const size = contents.reduce((n, c) => n + (c.text ?? c.blob ?? "").length, 0);
      note(contents.length > 0, `read ${uri} (${size} characters)`);
    } catch (err) {
      note(false, `read ${uri}: ${err.message.slice(0, 200)}`);
    }
  }
  const { prompts } = await client.listPrompts();
  for (const p of prompts) {
    const got = await client.getPrompt({ name: p.name, arguments: {} });
    note(got.messages.length > 0, `prompt ${p.name}`);
  }
  await client.close();
  console.log(`  longest answer text: ${longest} characters; ${links.size} resource link(s) read`);
  console.log(`  ${kind}: ${failures.length} failure(s), ${mismatches} schema mismatch(es)`);
  return failures.length;
}

let failed = 0;
for (const kind of clients) failed += await check(kind);
console.log(failed ? `${failed} failure(s)` : "all answers valid against the published output schemas");
process.exit(failed ? 1 : 0);
