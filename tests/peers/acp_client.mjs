// An ACP client built with the official TypeScript SDK, used as the oracle for `agentstream acp`.
//
// usage: node acp_client.mjs PLAN_JSON -- AGENT_CMD [ARGS...]
// PLAN_JSON: {"cwd": "/abs", "load": "ses_..."?, "mcpServers": [...]?, "permission": "allow"|"reject"|"leave"?,
//             ("leave": close the agent's stdin instead of answering, and keep reading what it says)
//             "prompts": ["..."], "cancelOn": "sent"|"tool_call"|"tool_start"|"message"|"permission"?,
//             ("sent": right after the prompt request is written, before anything comes back)
//             "cancelBy": "notification" (session/cancel, the default) | "request" (the SDK's
//             cancellationSignal on the prompt request, which sends $/cancel_request)}
// Prints one JSON object per line on stdout: what the SDK delivered, in order.
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const split = process.argv.indexOf("--");
const plan = JSON.parse(process.argv[2]);
const [command, ...args] = process.argv.slice(split + 1);
const out = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");

const child = spawn(command, args, { stdio: ["pipe", "pipe", "inherit"] });
const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

let sessionId = null;
let context = null;
let cancelSent = false;
let promptAbort = null;
const cancel = () => {
  if (!cancelSent && sessionId && context) {
    cancelSent = true;
    out({ kind: "cancel_sent" });
    if (plan.cancelBy === "request") promptAbort.abort();
    else context.notify(acp.methods.agent.session.cancel, { sessionId });
  }
};

const app = acp
  .client({ name: "agentstream-test-client" })
  .onRequest(acp.methods.client.session.requestPermission, async ({ params }) => {
    out({ kind: "permission", params });
    if (plan.permission === "leave") {
      child.stdin.end();
      return new Promise(() => {});
    }
    if (plan.cancelOn === "permission") {
      cancel();
      return { outcome: { outcome: "cancelled" } };
    }
    const pick = plan.permission === "allow" ? "allow_once" : "reject_once";
    const option = params.options.find((o) => o.kind === pick);
    return { outcome: { outcome: "selected", optionId: option.optionId } };
  })
  .onNotification(acp.methods.client.session.update, async ({ params }) => {
    out({ kind: "update", sessionId: params.sessionId, update: params.update });
    const kind = params.update.sessionUpdate;
    if (plan.cancelOn === "tool_call" && kind === "tool_call_update") cancel();
    if (plan.cancelOn === "message" && kind === "agent_message_chunk") cancel();
    if (plan.cancelOn === "tool_start" && kind === "tool_call") setTimeout(cancel, 300);
  });

try {
  await app.connectWith(stream, async (ctx) => {
    context = ctx;
    const init = await ctx.request(acp.methods.agent.initialize, {
      protocolVersion: acp.PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
    });
    out({ kind: "initialize", result: init });
    if (plan.load) {
      sessionId = plan.load;
      const loaded = await ctx.request(acp.methods.agent.session.load, {
        sessionId: plan.load,
        cwd: plan.cwd,
        mcpServers: plan.mcpServers ?? [],
      });
      out({ kind: "loaded", result: loaded ?? null });
    } else {
      const created = await ctx.request(acp.methods.agent.session.new, { cwd: plan.cwd, mcpServers: plan.mcpServers ?? [] });
      sessionId = created.sessionId;
      out({ kind: "session", sessionId });
    }
    for (const text of plan.prompts ?? []) {
      try {
        promptAbort = new AbortController();
        const answer = ctx.request(
          acp.methods.agent.session.prompt,
          { sessionId, prompt: [{ type: "text", text }] },
          { cancellationSignal: promptAbort.signal },
        );
        if (plan.cancelOn === "sent") cancel();
        const response = await answer;
        out({ kind: "stop", stopReason: response.stopReason });
      } catch (error) {
        out({ kind: "error", code: error.code, message: error.message, data: error.data ?? null });
      }
    }
  });
} catch (error) {
  out({ kind: "connection_error", message: String(error?.message ?? error) });
}
child.stdin.end();
await new Promise((resolve) => child.once("exit", resolve));
out({ kind: "exit", code: child.exitCode });
