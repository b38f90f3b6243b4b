// A scripted ACP agent built with the official TypeScript SDK, for testing `wrap --from acp`.
//
// usage: node acp_agent.mjs MODE
//   text        two message chunks, a thought, a plan, a tool call that completes, end_turn
//   permission  a tool call, session/request_permission, then completed (allowed) or failed (rejected)
//   cancel      a chunk, then waits for session/cancel and answers stopReason "cancelled"
//   max_turns   a chunk, then stopReason "max_turn_requests"
//   error       the prompt fails with a JSON-RPC error whose data.code is RATE_LIMITED
//   crash       a chunk and an open tool call, then exits with status 3
//   hang        a chunk, then never answers
//   garbage     a non-JSON line and a response with an unknown stopReason
//   messages    two messages told apart only by their messageId, and an image block in a message
//   future      initialize answers a protocol version newer than the client's
//   streamed    a tool call whose output comes in an in_progress update; the completing update has no content
//   late_ask    a chunk, then (after session/cancel) a permission request; says its outcome, answers cancelled
//   sessions    a chunk for another session of the agent's, then its own answer
import { Readable, Writable } from "node:stream";
import * as acp from "@agentclientprotocol/sdk";

const mode = process.argv[2] ?? "text";
const SESSION = "fake-acp-session-1";
let cancelled = null;

const app = acp
  .agent({ name: "agentstream-test-agent" })
  .onRequest(acp.methods.agent.initialize, async () => ({
    protocolVersion: mode === "future" ? acp.PROTOCOL_VERSION + 1 : acp.PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    authMethods: [],
  }))
  .onRequest(acp.methods.agent.session.new, async () => ({ sessionId: SESSION }))
  .onNotification(acp.methods.agent.session.cancel, async () => {
    if (cancelled) cancelled();
  })
  .onRequest(acp.methods.agent.session.prompt, async ({ params, client }) => {
    const update = (u) => client.notify(acp.methods.client.session.update, { sessionId: params.sessionId, update: u });
    const say = (text) => update({ sessionUpdate: "agent_message_chunk", content: { type: "text", text } });
    const prompt = params.prompt.map((b) => b.text).join(" ");
    if (mode === "text") {
      await update({ sessionUpdate: "agent_thought_chunk", content: { type: "text", text: "thinking about it" } });
      await say("You said: ");
      await say(prompt);
      await update({
        sessionUpdate: "plan",
        entries: [
          { content: "read the file", priority: "high", status: "completed" },
          { content: "answer", priority: "medium", status: "pending" },
        ],
      });
      await update({
        sessionUpdate: "tool_call",
        toolCallId: "tc-1",
        title: "Read notes.txt",
        kind: "read",
        status: "pending",
        rawInput: { path: "notes.txt" },
      });
      await update({
        sessionUpdate: "tool_call_update",
        toolCallId: "tc-1",
        status: "completed",
        content: [{ type: "content", content: { type: "text", text: "the notes" } }],
      });
      await say("All done.");
      return { stopReason: "end_turn" };
    }
    if (mode === "permission") {
      await update({
        sessionUpdate: "tool_call",
        toolCallId: "tc-2",
        title: "rm -rf build",
        kind: "execute",
        status: "pending",
        rawInput: { command: "rm -rf build" },
      });
      const answer = await client.request(acp.methods.client.session.requestPermission, {
        sessionId: params.sessionId,
        toolCall: { toolCallId: "tc-2" },
        options: [
          { optionId: "yes", name: "Allow", kind: "allow_once" },
          { optionId: "no", name: "Reject", kind: "reject_once" },
        ],
      });
      const allowed = answer.outcome.outcome === "selected" && answer.outcome.optionId === "yes";
      await update({
        sessionUpdate: "tool_call_update",
        toolCallId: "tc-2",
        status: allowed ? "completed" : "failed",
        content: [{ type: "content", content: { type: "text", text: allowed ? "removed" : "rejected by the user" } }],
      });
      await say(allowed ? "Removed it." : "I did not remove it.");
      return { stopReason: "end_turn" };
    }
    if (mode === "streamed") {
      await update({ sessionUpdate: "tool_call", toolCallId: "tc-4", title: "make", kind: "execute", status: "pending" });
      const output = [{ type: "content", content: { type: "text", text: "compiled 3 files" } }];
      await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-4", status: "in_progress", content: output });
      await update({ sessionUpdate: "tool_call_update", toolCallId: "tc-4", status: "completed" });
      return { stopReason: "end_turn" };
    }
    if (mode === "late_ask") {
      await say("working");
      await new Promise((resolve) => (cancelled = resolve));
      const answer = await client.request(acp.methods.client.session.requestPermission, {
        sessionId: params.sessionId,
        toolCall: { toolCallId: "tc-5", title: "rm -rf build", kind: "execute", status: "pending" },
        options: [
          { optionId: "yes", name: "Allow", kind: "allow_once" },
          { optionId: "no", name: "Reject", kind: "reject_once" },
        ],
      });
      await say(`asked after the cancel: ${answer.outcome.outcome}`);
      return { stopReason: "cancelled" };
    }
    if (mode === "cancel") {
      await say("working");
      await new Promise((resolve) => (cancelled = resolve));
      return { stopReason: "cancelled" };
    }
    if (mode === "max_turns") {
      await say("going round");
      return { stopReason: "max_turn_requests" };
    }
    if (mode === "error") {
      throw new acp.RequestError(-32603, "the model is rate limited", { code: "RATE_LIMITED" });
    }
    if (mode === "crash") {
      await say("about to crash");
      await update({ sessionUpdate: "tool_call", toolCallId: "tc-3", title: "build", kind: "execute", status: "in_progress" });
      setTimeout(() => process.exit(3), 50);
      return new Promise(() => {});
    }
    if (mode === "hang") {
      await say("thinking forever");
      return new Promise(() => {});
    }
    if (mode === "messages") {
      const chunk = (messageId, content) => update({ sessionUpdate: "agent_message_chunk", messageId, content });
      await chunk("m1", { type: "text", text: "first " });
      await chunk("m1", { type: "text", text: "message." });
      await chunk("m2", { type: "text", text: "second message." });
      await chunk("m2", { type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" });
      await chunk("m2", { type: "image", data: "iVBORw0KGgo=", mimeType: "image/png" });
      return { stopReason: "end_turn" };
    }
    if (mode === "sessions") {
      await client.notify(acp.methods.client.session.update, {
        sessionId: "another-session",
        update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: "NOT THIS TURN " } },
      });
      await say("mine");
      return { stopReason: "end_turn" };
    }
    if (mode === "garbage") {
      process.stdout.write("this is not json\n");
      return { stopReason: "because" };
    }
    throw new Error(`unknown mode ${mode}`);
  });

const connection = app.connect(acp.ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin)));
await connection.closed;
process.exit(0);
