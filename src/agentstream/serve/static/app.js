// The agentstream page: the run list at "/", one run at "/runs/<id>", both live.
//
// Everything from a run is untrusted text: it is put on the page with textContent (through
// setText, which makes invisible characters visible: visibleText in markdown.js) or through
// Markdown.render (which builds nodes the same way), never as HTML.
"use strict";

const LIST_REFRESH_MS = 1500;
const RUN_REFRESH_MS = 2000;
const KNOWN_ROLES = new Set(["user", "assistant", "system", "tool"]);
const WAITING_FOR_RUN = "no such run on this bus yet: waiting for it…";

function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined && text !== null) setText(node, text);
  return node;
}

function setText(node, text) {
  node.textContent = visibleText(text);
}

function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
}

// Streamed text (deltas, a tool's output) grows by one text node per piece: rewriting the
// whole text for every piece is quadratic, and thousands of pieces froze or crashed the tab.
function appendText(node, text) {
  node.appendChild(document.createTextNode(visibleText(text)));
}

async function api(path) {
  const response = await fetch(path, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (response.status === 401) {
    location.reload(); // the server answers with its token form
    throw new Error("token needed");
  }
  return response.json();
}

function formatDuration(ms) {
  if (ms === null || ms === undefined) return "";
  if (ms < 1000) return `${ms} ms`;
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(1)} s`;
  const m = Math.floor(s / 60);
  return `${m} min ${Math.round(s - m * 60)} s`;
}

function formatCost(usd) {
  return usd === null || usd === undefined ? "" : `$${Number(usd).toFixed(4)}`;
}

function formatTime(iso) {
  if (!iso) return "";
  const date = new Date(iso);
  return isNaN(date) ? String(iso) : date.toLocaleString();
}

function statusBadge(status) {
  return el("span", `badge status-${String(status).replace(/[^a-z]/g, "")}`, status);
}

function setConnection(text) {
  setText(document.getElementById("connection"), text);
}

// -- the run list -----------------------------------------------------------------------

function showRunList(main) {
  clear(main);
  main.appendChild(el("h1", null, "Runs"));
  const table = el("table", "runs");
  const head = el("tr");
  for (const title of ["Status", "Run", "Command", "Started", "Duration", "Tokens", "Cost"]) {
    head.appendChild(el("th", null, title));
  }
  table.appendChild(el("thead")).appendChild(head);
  const body = table.appendChild(el("tbody"));
  const empty = el("p", "muted", "No runs on this bus yet.");
  main.appendChild(table);
  main.appendChild(empty);

  async function refresh() {
    try {
      const envelope = await api("/api/runs?limit=100");
      if (!envelope.ok) throw new Error(envelope.error.message);
      clear(body);
      for (const run of envelope.result.runs) body.appendChild(runRow(run));
      empty.hidden = envelope.result.runs.length > 0;
      setConnection("live");
    } catch (error) {
      setConnection(`cannot list runs: ${error.message}`);
    }
  }
  refresh();
  setInterval(refresh, LIST_REFRESH_MS);
}

function runRow(run) {
  const row = el("tr");
  row.dataset.runId = run.run_id;
  row.appendChild(el("td")).appendChild(statusBadge(run.status));
  const link = el("a", "run-link", run.run_id);
  link.href = `/runs/${encodeURIComponent(run.run_id)}`;
  row.appendChild(el("td")).appendChild(link);
  row.appendChild(el("td", "command", run.command));
  row.appendChild(el("td", null, formatTime(run.created)));
  row.appendChild(el("td", "number", formatDuration(run.duration_ms)));
  row.appendChild(el("td", "number", run.tokens ? run.tokens.toLocaleString() : ""));
  row.appendChild(el("td", "number", formatCost(run.cost_usd)));
  return row;
}

// -- one run ------------------------------------------------------------------------------

class RunView {
  constructor(main, runId) {
    this.runId = runId;
    this.lastSeq = -1;
    this.messages = new Map();
    this.reasoning = new Map();
    this.tools = new Map();
    this.steps = new Map();
    this.progress = new Map();
    this.ended = false;
    clear(main);
    const header = el("section", "run-header");
    const back = el("a", null, "← all runs");
    back.href = "/";
    header.appendChild(back);
    header.appendChild(el("h1", "run-id", runId));
    this.summary = header.appendChild(el("dl", "summary"));
    main.appendChild(header);
    this.timeline = main.appendChild(el("section", "timeline"));
    this.timeline.id = "timeline";
  }

  start() {
    this.refreshSummary();
    this.timer = setInterval(() => this.refreshSummary(), RUN_REFRESH_MS);
    // A browser opens at most six connections to one server, and a followed run holds one: a tab that is
    // not shown lets its stream go and takes it up where it stopped once shown, so that a seventh tab (or
    // the run list) is not left waiting for one. A tab opened in the background waits to be shown.
    document.addEventListener("visibilitychange", () => this.onVisibility());
    if (document.hidden) this.pause();
    else this.follow();
  }

  onVisibility() {
    if (this.ended) return;
    if (document.hidden) this.pause();
    else if (this.paused) this.follow();
  }

  pause() {
    this.paused = true;
    if (this.source) this.source.close();
    setConnection("paused while this tab is hidden");
  }

  follow() {
    this.paused = false;
    // A new EventSource sends no Last-Event-ID: it starts after the last seq shown.
    const from = this.lastSeq >= 0 ? `?from_seq=${this.lastSeq + 1}` : "";
    const url = `/api/runs/${encodeURIComponent(this.runId)}/events${from}`;
    // EventSource reconnects by itself after a dropped connection and sends Last-Event-ID
    // (the last seq it saw), so the server resumes right after it; lastSeq drops repeats.
    this.source = new EventSource(url);
    this.source.onmessage = (message) => this.onMessage(message);
    this.source.onopen = () => setConnection("live");
    this.source.onerror = () => {
      if (this.ended) return;
      // CLOSED: the browser gave up (an answer other than an event stream, e.g. a 404).
      if (this.source.readyState === EventSource.CLOSED)
        setConnection(this.missing ? WAITING_FOR_RUN : "disconnected: reload to retry");
      else setConnection("reconnecting…");
    };
  }

  async refreshSummary() {
    try {
      const envelope = await api(`/api/runs/${encodeURIComponent(this.runId)}`);
      if (!envelope.ok) {
        this.showSummary(null, envelope);
        if (envelope.error.code === "RUN_NOT_FOUND") this.notFound();
        return;
      }
      this.showSummary(envelope.result.run, envelope);
      if (this.missing) {
        this.missing = false;
        // Its events were a 404 as well, which an EventSource does not retry: follow it now (once shown).
        if (!this.paused && this.source.readyState === EventSource.CLOSED) this.follow();
      }
      if (this.ended && envelope.result.run.status !== "running") clearInterval(this.timer);
    } catch (error) {
      setConnection(`cannot read the run: ${error.message}`);
    }
  }

  // No such run yet: a producer prints its run id before its first event reaches the bus, and a
  // page opened from that id must not give up. The summary goes on polling until the run is there.
  notFound() {
    this.missing = true;
    setConnection(WAITING_FOR_RUN);
  }

  showSummary(run, envelope) {
    clear(this.summary);
    if (run === null) {
      this.summary.appendChild(el("dt", null, "Error"));
      this.summary.appendChild(el("dd", "error-text", `${envelope.error.code}: ${envelope.error.message}`));
      return;
    }
    const rows = [
      ["Status", statusBadge(run.status)],
      ["Command", run.command],
      ["Started", formatTime(run.created)],
      ["Duration", formatDuration(run.duration_ms)],
      ["Tokens", run.tokens ? run.tokens.toLocaleString() : "0"],
      ["Cost", formatCost(run.cost_usd) || "—"],
    ];
    for (const [name, value] of rows) {
      this.summary.appendChild(el("dt", null, name));
      const dd = this.summary.appendChild(el("dd"));
      if (value instanceof Node) dd.appendChild(value);
      else setText(dd, value);
    }
  }

  onMessage(message) {
    let event;
    try {
      event = JSON.parse(message.data);
      if (event === null || typeof event !== "object") throw new Error("not a JSON object");
    } catch (error) {
      this.add(el("div", "event error", `unreadable event: ${error.message}`));
      return;
    }
    // The run's own lines carry their seq as id. A line the server made up (the ending of a stream it had to
    // stop, in a session of its own) has none and repeats the last one, so only the run's lines are checked.
    const seq = event.session_id === this.runId ? Number(message.lastEventId) : NaN;
    if (Number.isInteger(seq)) {
      if (seq <= this.lastSeq) return; // already shown
      this.lastSeq = seq;
    }
    try {
      const handler = this[`on_${event.type}`];
      if (typeof handler === "function") handler.call(this, event);
      else this.onOther(event);
    } catch (error) {
      // A bug in showing one event must not hide it or keep the stream open: show it as text.
      const node = this.add(el("div", "event unrendered plain", message.data), event.seq);
      node.title = `could not render this event: ${error.message}`;
    }
    if (event.type === "result") {
      this.ended = true;
      this.source.close();
      setConnection("finished");
      this.refreshSummary();
    }
  }

  add(node, seq) {
    if (seq !== undefined) node.dataset.seq = seq;
    this.timeline.appendChild(node);
    return node;
  }

  on_start(event) {
    const parts = [event.command, event.model, event.provider, event.cwd].filter(Boolean);
    this.add(el("div", "event start muted", `started: ${parts.join(" · ")}`), event.seq);
  }

  messageBlock(event) {
    let block = this.messages.get(event.message_id);
    if (!block) {
      const role = event.role || "assistant";
      // The role is untrusted: an unknown one must not add classes of its own.
      const node = this.add(el("article", `message role-${KNOWN_ROLES.has(role) ? role : "other"}`), event.seq);
      node.appendChild(el("div", "role", role));
      block = { node, body: node.appendChild(el("div", "content")) };
      this.messages.set(event.message_id, block);
    }
    return block;
  }

  on_message_delta(event) {
    const block = this.messageBlock(event);
    appendText(block.body, event.content); // plain while it streams, Markdown once complete
    block.node.classList.add("streaming");
  }

  on_message(event) {
    const block = this.messageBlock(event);
    clear(block.body);
    if (event.role === "assistant") block.body.appendChild(Markdown.render(event.content));
    else block.body.appendChild(el("div", "plain", event.content));
    block.node.classList.remove("streaming");
  }

  reasoningBlock(event) {
    let block = this.reasoning.get(event.reasoning_id);
    if (!block) {
      const details = this.add(el("details", "reasoning"), event.seq);
      details.appendChild(el("summary", null, "Reasoning"));
      block = { body: details.appendChild(el("div", "plain")) };
      this.reasoning.set(event.reasoning_id, block);
    }
    return block;
  }

  on_reasoning_delta(event) {
    appendText(this.reasoningBlock(event).body, event.content);
  }

  on_reasoning(event) {
    setText(this.reasoningBlock(event).body, event.content);
  }

  on_tool_call(event) {
    const node = this.add(el("article", "tool running"), event.seq);
    const head = node.appendChild(el("div", "tool-head"));
    head.appendChild(el("span", "tool-name", event.name));
    const state = head.appendChild(el("span", "tool-state", "running…"));
    const args = node.appendChild(el("details", "tool-args"));
    args.open = true;
    args.appendChild(el("summary", null, "arguments"));
    args.appendChild(el("pre", "code", JSON.stringify(event.arguments || {}, null, 2)));
    const output = node.appendChild(el("pre", "tool-output"));
    output.hidden = true;
    this.tools.set(event.call_id, { node, state, output });
  }

  toolFor(event) {
    if (!this.tools.has(event.call_id)) this.on_tool_call({ ...event, arguments: {} });
    return this.tools.get(event.call_id);
  }

  on_tool_progress(event) {
    const tool = this.toolFor(event);
    tool.output.hidden = false;
    appendText(tool.output, event.content);
  }

  on_tool_result(event) {
    const tool = this.toolFor(event);
    tool.node.classList.remove("running");
    tool.node.classList.add(`status-${String(event.status).replace(/[^a-z]/g, "")}`);
    // 0 is what a reader writes when the input gave no duration: none is shown, rather than "0 ms"
    setText(tool.state, `${event.status}${event.duration_ms ? ` · ${formatDuration(event.duration_ms)}` : ""}`);
    const text = event.output !== undefined ? event.output : "";
    if (text) {
      tool.output.hidden = false;
      setText(tool.output, text + (event.truncated ? "\n… (truncated)" : ""));
    }
    if (event.error) tool.node.appendChild(el("div", "error-text", event.error));
  }

  progressBar(key, label, seq) {
    let bar = this.progress.get(key);
    if (!bar) {
      const node = this.add(el("div", "progress-row"), seq);
      const name = node.appendChild(el("span", "progress-name", label));
      const meter = node.appendChild(el("progress"));
      const note = node.appendChild(el("span", "progress-note muted"));
      bar = { node, name, meter, note };
      this.progress.set(key, bar);
    }
    return bar;
  }

  on_step(event) {
    const bar = this.progressBar(`step:${event.name}`, `step ${event.name}`, event.seq);
    bar.node.classList.add("step", `step-${String(event.status).replace(/[^a-z]/g, "")}`);
    if (event.status === "started") {
      bar.meter.removeAttribute("value");
      setText(bar.note, "running…");
    } else {
      bar.meter.max = 1;
      bar.meter.value = 1;
      setText(bar.note, `${event.status}${event.duration_ms !== undefined ? ` · ${formatDuration(event.duration_ms)}` : ""}`);
      if (event.error) bar.node.appendChild(el("div", "error-text", event.error));
    }
  }

  on_progress(event) {
    const bar = this.progressBar(`progress:${event.name}`, event.name, event.seq);
    let fraction = null;
    if (typeof event.percent === "number") fraction = event.percent / 100;
    else if (typeof event.current === "number" && typeof event.total === "number" && event.total > 0)
      fraction = event.current / event.total;
    if (fraction === null) bar.meter.removeAttribute("value");
    else {
      bar.meter.max = 1;
      bar.meter.value = Math.max(0, Math.min(1, fraction));
    }
    const parts = [];
    if (fraction !== null) parts.push(`${Math.round(fraction * 100)}%`);
    if (event.message) parts.push(event.message);
    setText(bar.note, parts.join(" · "));
  }

  on_error(event) {
    const node = this.add(el("div", `event error ${event.recoverable ? "recoverable" : "fatal"}`), event.seq);
    node.appendChild(el("strong", null, event.code));
    node.appendChild(el("span", null, ` ${event.message}`));
    if (event.fix) node.appendChild(el("div", "fix", `fix: ${event.fix}`));
  }

  on_log(event) {
    this.add(el("div", `event log level-${String(event.level).replace(/[^a-z]/g, "")}`, `[${event.level}] ${event.message}`), event.seq);
  }

  on_status(event) {
    this.add(el("div", "event status muted", `${event.status}${event.message ? `: ${event.message}` : ""}`), event.seq);
  }

  on_usage(event) {
    const tokens = (event.input_tokens || 0) + (event.output_tokens || 0);
    this.add(el("div", "event usage muted", `${event.model}: ${tokens.toLocaleString()} tokens${event.cost_usd !== undefined ? ` · ${formatCost(event.cost_usd)}` : ""}`), event.seq);
  }

  on_event(event) {
    const node = this.add(el("div", "event generic muted"), event.seq);
    node.appendChild(el("span", null, `${event.name} `));
    node.appendChild(el("code", null, JSON.stringify(event.data)));
  }

  onOther(event) {
    this.add(el("div", "event other muted", `${event.type}: ${JSON.stringify(event)}`), event.seq);
  }

  on_result(event) {
    const node = this.add(el("section", `result ${event.ok ? "ok" : "failed"}`), event.seq);
    node.id = "result";
    const head = node.appendChild(el("h2"));
    setText(head, event.ok ? "Finished" : `Ended: ${event.subtype}`);
    const facts = [`exit ${event.exit_code}`];
    if (event.duration_ms) facts.push(formatDuration(event.duration_ms)); // 0: as for a tool result
    const usage = event.usage || {};
    const tokens = (usage.input_tokens || 0) + (usage.output_tokens || 0);
    if (tokens) facts.push(`${tokens.toLocaleString()} tokens`);
    if (usage.cost_usd !== undefined) facts.push(formatCost(usage.cost_usd));
    node.appendChild(el("div", "muted", facts.join(" · ")));
    if (typeof event.result === "string" && event.result) {
      node.appendChild(el("div", "content final-answer")).appendChild(Markdown.render(event.result));
    }
    if (event.error) {
      const error = node.appendChild(el("div", "event error fatal"));
      error.appendChild(el("strong", null, event.error.code));
      error.appendChild(el("span", null, ` ${event.error.message}`));
      if (event.error.fix) error.appendChild(el("div", "fix", `fix: ${event.error.fix}`));
    }
    const actions = event.next_actions || [];
    if (actions.length) {
      node.appendChild(el("h3", null, "Next actions"));
      const list = node.appendChild(el("ul", "next-actions"));
      for (const action of actions) {
        const item = list.appendChild(el("li"));
        item.appendChild(el("code", null, action.command));
        if (action.description) item.appendChild(el("span", "muted", ` ${action.description}`));
      }
    }
  }
}

function route() {
  const main = document.getElementById("main");
  const match = /^\/runs\/([^/]+)$/.exec(location.pathname);
  if (match) {
    let runId;
    try {
      runId = decodeURIComponent(match[1]);
    } catch {
      clear(main); // a malformed %-escape: no run id can be read from this address
      main.appendChild(el("h1", null, "Bad run address"));
      main.appendChild(el("p", "error-text", `The run id in this address is not valid percent-encoding: ${match[1]}`));
      setConnection("bad address");
      return;
    }
    document.title = visibleText(`${runId} · agentstream`);
    new RunView(main, runId).start();
  } else {
    showRunList(main);
  }
}

route();
