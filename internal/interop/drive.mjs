#!/usr/bin/env node
// drive.mjs: the official MCP TypeScript SDK as a client of `retrysafe
// guard`, for the interop run (interop_test.go).
//
//   node drive.mjs --config guard.json --plan plan.json [--guard CMD]
//   node drive.mjs --url http://127.0.0.1:PORT/ --token TOKEN --plan plan.json
//
// Over stdio it launches CMD guard -config FILE (CMD: --guard, else
// $RETRYSAFE_BIN); with --url it reaches a guard that serves streamable
// HTTP, with the bearer token. It lists the tools, then makes the plan's
// calls in order, each to its end, and prints one JSON line per step:
//
//   {"listed": [{"name", "inputSchema", "outputSchema", "annotations"}]}
//   {"step": i, "tool", "arguments", "meta", "isError", "envelope",
//    "textEnvelope", "structuredContent", "text", "error"}
//
// envelope is the retrysafe envelope in _meta; textEnvelope is the one
// the text carries (a failure answers with the envelope as text); error
// is what the SDK threw (a protocol error, a timeout, a result the SDK
// refused). plan.json is {"calls": [{"tool", "arguments", "meta",
// "batch", "timeout_ms", "sleep_ms"}]}: calls with the same batch, one
// after another in the plan, are sent at once.

import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const META_ENVELOPE = "io.github.retrysafe/envelope";

const { values: opts } = parseArgs({
  options: {
    guard: { type: "string", default: process.env.RETRYSAFE_BIN ?? "" },
    config: { type: "string", default: "" },
    url: { type: "string", default: "" },
    token: { type: "string", default: "" },
    plan: { type: "string" },
    timeout: { type: "string", default: "30000" }, // milliseconds, per request
  },
});

function usage(msg) {
  process.stderr.write(`drive.mjs: ${msg}\n`);
  process.exit(2);
}

if (!opts.plan) usage("name the plan: --plan plan.json");
if (!opts.url && (!opts.guard || !opts.config)) {
  usage("name the guard's command (--guard CMD or $RETRYSAFE_BIN) and its configuration (--config FILE), or a --url");
}
const plan = JSON.parse(readFileSync(opts.plan, "utf8"));
const timeout = Number(opts.timeout);

function out(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

// textEnvelope reads the envelope a failure carries as its text.
function textEnvelope(result) {
  for (const c of result.content ?? []) {
    if (c.type !== "text") continue;
    try {
      const v = JSON.parse(c.text);
      if (v && typeof v === "object" && "status" in v && "next" in v) return v;
    } catch {
      // not the envelope
    }
  }
  return null;
}

function text(result) {
  return (result.content ?? [])
    .filter((c) => c.type === "text")
    .map((c) => c.text)
    .join("\n");
}

const transport = opts.url
  ? new StreamableHTTPClientTransport(new URL(opts.url), {
      requestInit: { headers: { Authorization: `Bearer ${opts.token}` } },
    })
  : new StdioClientTransport({
      command: opts.guard,
      args: ["guard", "-config", opts.config],
      env: { ...process.env },
      stderr: "inherit",
    });

const client = new Client({ name: "interop-ts-sdk", version: "1" });

// callOne makes one call of the plan, after sleep_ms, and returns its
// line. A call's timeout_ms is the client's own timeout for it: the SDK
// then cancels the request (notifications/cancelled) and throws.
async function callOne(step, call) {
  if (call.sleep_ms) await new Promise((resolve) => setTimeout(resolve, call.sleep_ms));
  const line = { step, tool: call.tool, arguments: call.arguments ?? {}, meta: call.meta ?? null };
  try {
    const params = { name: call.tool, arguments: call.arguments ?? {} };
    if (call.meta) params._meta = call.meta;
    const result = await client.callTool(params, undefined, { timeout: call.timeout_ms ?? timeout });
    line.isError = result.isError === true;
    line.envelope = result._meta?.[META_ENVELOPE] ?? null;
    line.textEnvelope = line.isError ? textEnvelope(result) : null;
    line.structuredContent = result.structuredContent ?? null;
    line.text = text(result);
  } catch (e) {
    line.error = e instanceof Error ? `${e.name}: ${e.message}` : String(e);
  }
  return line;
}

try {
  await client.connect(transport, { timeout });
  const { tools } = await client.listTools(undefined, { timeout });
  out({
    listed: tools.map((t) => ({
      name: t.name,
      inputSchema: t.inputSchema,
      outputSchema: t.outputSchema ?? null,
      annotations: t.annotations ?? null,
    })),
  });
  // Calls of one batch (consecutive, with the same "batch" value) are
  // sent together, as a model's parallel tool calls are; the rest one by
  // one. Lines come out in the plan's order.
  const calls = plan.calls ?? [];
  for (let i = 0; i < calls.length; ) {
    let j = i + 1;
    while (calls[i].batch != null && j < calls.length && calls[j].batch === calls[i].batch) j++;
    const lines = await Promise.all(calls.slice(i, j).map((call, n) => callOne(i + n, call)));
    lines.forEach(out);
    i = j;
  }
} catch (e) {
  process.stderr.write(`drive.mjs: ${e instanceof Error ? e.stack : e}\n`);
  process.exitCode = 1;
} finally {
  await client.close().catch(() => {});
}
