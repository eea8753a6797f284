// kvmem's memory inspector. Reads only the JSON API (README "The API": /v1/agents,
// /v1/agents/{id}/memory, /v1/agents/{id}/turns, /v1/policies, /v1/chat/completions, /metrics)
// with the key the user gives it. Agent text is untrusted: it is only ever set as textContent,
// never parsed as HTML.
"use strict";

const state = {
  key: sessionStorage.getItem("kvmem.key") || "",
  agents: [],
  selected: null,       // id of the agent shown
  histories: new Map(), // id -> messages this page sent (agents whose client keeps the history)
  needsKey: false,      // the last call was refused for want of a key: polling waits for one
  samples: [],          // metrics: {t, tokens, ttftSum, ttftCount}
  points: [],           // metrics: {tps, ttft}
};

const $ = (id) => document.getElementById(id);

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, String(v));
  return e;
}

function setStatus(text) { $("status").textContent = text || ""; }

function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (state.key) h["Authorization"] = "Bearer " + state.key;
  return h;
}

// fetch with the key; {ok, status, body (parsed JSON or text)}. A 401 asks for the key.
async function api(path, options) {
  const opts = Object.assign({}, options || {});
  opts.headers = headers(opts.headers);
  const res = await fetch(path, opts);
  const type = res.headers.get("Content-Type") || "";
  const body = type.includes("json") ? await res.json() : await res.text();
  state.needsKey = res.status === 401;
  if (res.status === 401) {
    setStatus("This server needs an API key: enter it above.");
    $("api-key").focus();
  }
  return { ok: res.ok, status: res.status, body };
}

function errorText(r) {
  const msg = r.body && r.body.error && r.body.error.message;
  return "HTTP " + r.status + (msg ? ": " + msg : "");
}

const agentPath = (id) => "/v1/agents/" + encodeURIComponent(id);

function formatBytes(n) {
  if (n < 1024) return n + " B";
  if (n < 1 << 20) return (n / 1024).toFixed(1) + " KiB";
  return (n / (1 << 20)).toFixed(1) + " MiB";
}

function formatTime(unix) {
  return unix ? new Date(unix * 1000).toLocaleTimeString([], { hour: "2-digit", minute: "2-digit" }) : "never";
}

// ---- agents ------------------------------------------------------------------------------------

async function refreshAgents() {
  const r = await api("/v1/agents");
  if (!r.ok) return r.status === 401 ? undefined : setStatus(errorText(r));
  state.agents = r.body.data;
  const tbody = $("agents").querySelector("tbody");
  tbody.replaceChildren();
  for (const a of state.agents) {
    const tr = el("tr");
    tr.dataset.id = a.id;
    if (a.id === state.selected) tr.className = "selected";
    tr.append(el("td", a.id), el("td", a.memory.policy), el("td", a.tier),
              el("td", a.cached_tokens, "num"), el("td", formatBytes(a.bytes), "num"),
              el("td", formatTime(a.last_used_at)));
    tr.addEventListener("click", () => selectAgent(a.id));
    tbody.append(tr);
  }
}

async function loadPolicies() {
  const r = await api("/v1/policies");
  if (!r.ok) return;
  const select = $("new-policy");
  select.replaceChildren();
  for (const p of r.body.data) {
    const o = el("option", p.name);
    o.value = p.name;
    if (p.description) o.title = p.description;
    select.append(o);
  }
  select.value = "full";
}

async function createAgent(event) {
  event.preventDefault();
  const id = $("new-id").value;
  const memory = { policy: $("new-policy").value };
  const config = $("new-config").value.trim();
  if (config) {
    try { memory.config = JSON.parse(config); } catch (e) { return setStatus("config: " + e.message); }
  }
  const body = { id, memory, conversation: $("new-server").checked ? "server" : "client" };
  const r = await api("/v1/agents", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(body) });
  if (!r.ok) return setStatus(errorText(r));
  setStatus("");
  $("new-id").value = "";
  await refreshAgents();
  await selectAgent(id);
}

async function selectAgent(id) {
  state.selected = id;
  for (const tr of $("agents").querySelectorAll("tbody tr")) {
    tr.className = tr.dataset.id === id ? "selected" : "";
  }
  $("agent-pane").hidden = false;
  $("chat-log").replaceChildren();
  for (const m of state.histories.get(id) || []) $("chat-log").append(el("div", m.content, "msg " + m.role));
  await showAgent();
}

async function showAgent() {
  const id = state.selected;
  if (id === null) return;
  const [agent, memory, turns] = await Promise.all([
    api(agentPath(id)), api(agentPath(id) + "/memory"), api(agentPath(id) + "/turns")]);
  if (id !== state.selected) return;  // another agent was chosen meanwhile
  if (!agent.ok) return setStatus(errorText(agent));
  const a = agent.body;
  state.agent = a;
  $("agent-title").textContent = a.id;
  $("agent-summary").textContent =
      "policy " + a.memory.policy + " " + JSON.stringify(a.memory.config) + " · " + a.tier +
      " · " + a.cached_tokens + " tokens · " + formatBytes(a.bytes) + " · kv " + a.kv_format +
      " · conversation kept by the " + a.conversation + " · last use " + formatTime(a.last_used_at);
  if (memory.ok) renderMemory(memory.body); else setStatus(errorText(memory));
  if (turns.ok) renderTurns(turns.body.data); else setStatus(errorText(turns));
}

// ---- memory: the text with its cached spans and the policy's parts -------------------------------

function inRanges(flat, at) {
  for (let i = 0; i + 1 < flat.length; i += 2) {
    if (flat[i] <= at && at < flat[i + 1]) return true;
  }
  return false;
}

function partLabel(p) {
  const fields = Object.entries(p).filter(([k]) => k !== "kind")
      .map(([k, v]) => k + " " + JSON.stringify(v));
  return p.kind + ": " + fields.join(", ");
}

function renderMemory(m) {
  const bytes = new TextEncoder().encode(m.text);
  const parts = (m.parts || []).filter((p) => Array.isArray(p.bytes));
  const cuts = new Set([0, bytes.length]);
  for (let i = 0; i < m.cached.length; i++) cuts.add(Math.min(m.cached[i], bytes.length));
  for (const p of parts) { cuts.add(Math.min(p.bytes[0], bytes.length)); cuts.add(Math.min(p.bytes[1], bytes.length)); }
  const sorted = [...cuts].sort((x, y) => x - y);
  const decoder = new TextDecoder("utf-8");
  const out = $("memory-text");
  out.replaceChildren();
  let part = 0;
  const kinds = new Map();
  for (const p of parts) kinds.set(p.kind, (kinds.get(p.kind) || 0) + 1);
  for (let i = 0; i + 1 < sorted.length; i++) {
    const [a, b] = [sorted[i], sorted[i + 1]];
    const text = decoder.decode(bytes.subarray(a, b), { stream: b < bytes.length });
    if (!text) continue;
    while (part < parts.length && parts[part].bytes[1] <= a) part++;
    const p = part < parts.length && parts[part].bytes[0] <= a ? parts[part] : null;
    const classes = [inRanges(m.cached, a) ? "cached" : "uncached"];
    if (p && p.kind === "dropped") classes.push("dropped");
    else if (p && Number.isInteger(p.episode)) classes.push("ep" + (p.episode % 8));
    else if (p) classes.push(part % 2 ? "part-odd" : "part-even");
    const span = el("span", text, classes.join(" "));
    if (p) span.title = partLabel(p);
    span.dataset.bytes = a + "-" + b;
    out.append(span);
  }
  let cachedBytes = 0;
  for (let i = 0; i + 1 < m.cached.length; i += 2) cachedBytes += m.cached[i + 1] - m.cached[i];
  const partsText = [...kinds].map(([k, n]) => n + " " + k + (n === 1 ? "" : k.endsWith("ed") ? " runs" : "s"))
      .join(", ");
  $("memory-summary").textContent =
      m.rows + " KV rows · " + cachedBytes + " of " + bytes.length + " bytes of text cached" +
      (partsText ? " · " + partsText : "") + (m.note ? " (" + m.note + ")" : "");
}

// ---- turns: what each of the last turns recalled ----------------------------------------------------

function scalarFacts(report) {
  if (!report || typeof report !== "object") return "";
  return Object.entries(report)
      .filter(([, v]) => ["number", "string", "boolean"].includes(typeof v))
      .map(([k, v]) => k + " " + v).join(" · ");
}

// A block's rank in each layer as a small line (MemArt's Figure 9: lower is better, log scale).
function trajectory(ranks) {
  const w = Math.max(60, ranks.length * 12), h = 28;  // about the width of the rank strip
  const g = svg("svg", { width: w, height: h, viewBox: "0 0 " + w + " " + h, class: "trajectory-chart" });
  const scored = ranks.filter((r) => r > 0);
  if (scored.length < 2) return g;
  const worst = Math.log(Math.max(...scored) + 1);
  const pts = [];
  ranks.forEach((r, l) => {
    if (r <= 0) return;
    const x = (l / Math.max(1, ranks.length - 1)) * (w - 4) + 2;
    const y = 2 + (Math.log(r) / Math.max(worst, 1e-9)) * (h - 4);
    pts.push(x.toFixed(1) + "," + y.toFixed(1));
  });
  g.append(svg("polyline", { points: pts.join(" "), class: "trajectory" }));
  return g;
}

function recalledBlocks(report, detail) {
  const byBlock = new Map();
  for (const r of (detail && detail.ranks) || []) byBlock.set(r.block, r);
  const blocks = report.blocks.filter((b) => typeof b.text === "string")
      .sort((x, y) => (y.layers || 0) - (x.layers || 0)).slice(0, 12);
  const table = el("table", null, "recall");
  const head = el("tr");
  head.append(el("th", "block"), el("th", "layers read"), el("th", "text"),
              el("th", "rank in each layer (green: read; k: always kept)"));
  table.append(head);
  for (const b of blocks) {
    const tr = el("tr", null, "recalled-block");
    const info = byBlock.get(b.block);
    const cell = el("td");
    if (info) {
      const strip = el("div", null, "ranks");
      const read = new Set(info.layers);
      info.ranks.forEach((r, l) => {
        const s = el("span", r > 0 ? r : "k", read.has(l) ? "read" : "");
        s.title = "layer " + l + (r > 0 ? ": rank " + r : ": always kept") + (read.has(l) ? ", read" : "");
        strip.append(s);
      });
      cell.append(strip, trajectory(info.ranks));
    }
    const snippet = el("td", b.text.length > 240 ? b.text.slice(0, 240) + "…" : b.text, "snippet");
    snippet.title = b.text;
    tr.append(el("td", b.block), el("td", b.layers), snippet, cell);
    table.append(tr);
  }
  return table;
}

function renderTurns(turns) {
  const out = $("turns");
  out.replaceChildren();
  if (turns.length === 0) out.append(el("p", "No turn yet since the server started."));
  for (const t of [...turns].reverse()) {
    const div = el("div", null, "turn");
    div.append(el("strong", "turn " + t.turn + " · " + new Date(t.created_ms).toLocaleTimeString()),
               el("div", t.prompt_tokens + " prompt tokens, " + t.cached_tokens + " cached · memory " +
                  t.tier + (t.tier === "warm" ? " (loaded in " + t.load_ms.toFixed(1) + " ms)" : ""),
                  "facts"),
               el("div", scalarFacts(t.report), "facts"));
    const r = t.report || {};
    if (Number.isInteger(r.episode)) {
      div.append(el("div", r.episode >= 0 ? "routed to episode " + r.episode + " of " + r.episodes
                                          : "no episode yet: the turn read the uncompressed history", "routed-episode"));
    }
    if (t.detail && Array.isArray(t.detail.live_prompt_bytes)) {
      const live = t.detail.live_prompt_bytes;
      let n = 0;
      for (let i = 0; i + 1 < live.length; i += 2) n += live[i + 1] - live[i];
      div.append(el("div", n + " bytes of the prompt live after pruning (" + live.length / 2 +
                    " spans); dropped rows are struck through in the memory", "live-rows"));
    }
    if (Array.isArray(r.blocks) && r.blocks.length > 0) div.append(recalledBlocks(r, t.detail));
    out.append(div);
  }
}

// ---- chat --------------------------------------------------------------------------------------

async function sendChat(event) {
  event.preventDefault();
  const id = state.selected, text = $("chat-input").value;
  if (id === null || !text.trim()) return;
  $("chat-input").value = "";
  $("chat-send").disabled = true;
  const history = state.histories.get(id) || [];
  const user = { role: "user", content: text };
  const body = { model: "kvmem", user: id, stream: true, stream_options: { include_usage: true },
                 max_tokens: Number($("chat-max").value) || 48 };
  if (state.agent && state.agent.conversation === "server") {
    body.messages = [user];
  } else {
    body.messages = history.concat([user]);
    body.on_diverge = "reject";  // never fork or drop a conversation this page did not see
  }
  $("chat-log").append(el("div", text, "msg user"));
  const reply = el("div", "", "msg assistant");
  $("chat-log").append(reply);
  try {
    const res = await fetch("/v1/chat/completions", {
      method: "POST", headers: headers({ "Content-Type": "application/json" }), body: JSON.stringify(body) });
    if (!res.ok) {
      const r = { status: res.status, body: await res.json().catch(() => null) };
      reply.remove();
      setStatus(errorText(r));
    } else {
      const usage = await readStream(res, reply);
      history.push(user, { role: "assistant", content: reply.textContent });
      state.histories.set(id, history);
      setStatus("");
      if (usage) {
        const cached = (usage.prompt_tokens_details || {}).cached_tokens || 0;
        $("chat-log").append(el("div", usage.prompt_tokens + " prompt tokens (" + cached +
                                " cached), " + usage.completion_tokens + " generated", "msg note"));
      }
    }
  } finally {
    $("chat-send").disabled = false;
    $("chat-log").scrollTop = $("chat-log").scrollHeight;
    await refreshAgents();
    await showAgent();
  }
}

// Server-sent events of a streamed chat completion into `target`; the usage, when sent.
async function readStream(res, target) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder("utf-8");
  let buffer = "", usage = null;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") continue;
        const chunk = JSON.parse(data);
        if (chunk.error) setStatus("error: " + chunk.error.message);
        if (chunk.usage) usage = chunk.usage;
        const delta = chunk.choices && chunk.choices[0] && chunk.choices[0].delta;
        if (delta && delta.content) target.textContent += delta.content;
      }
    }
  }
  return usage;
}

// ---- /metrics at a glance ----------------------------------------------------------------------

function parseMetrics(text) {
  const sums = {};
  for (const line of text.split("\n")) {
    if (!line || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)/.exec(line);
    if (m) sums[m[1]] = (sums[m[1]] || 0) + Number(m[3]);
  }
  return sums;
}

async function pollMetrics() {
  const res = await fetch("/metrics", { headers: headers() });
  if (!res.ok) return;
  const m = parseMetrics(await res.text());
  const s = { t: performance.now() / 1000, tokens: m.kvmem_generation_tokens_total || 0,
              ttftSum: m.kvmem_time_to_first_token_seconds_sum || 0,
              ttftCount: m.kvmem_time_to_first_token_seconds_count || 0 };
  const prev = state.samples[state.samples.length - 1];
  state.samples.push(s);
  if (state.samples.length > 2) state.samples.shift();
  if (!prev) return;
  const dc = s.ttftCount - prev.ttftCount;
  const point = { tps: (s.tokens - prev.tokens) / Math.max(1e-3, s.t - prev.t),
                  ttft: dc > 0 ? (s.ttftSum - prev.ttftSum) / dc : null };
  state.points.push(point);
  if (state.points.length > 60) state.points.shift();
  $("metric-tps").textContent = point.tps.toFixed(1) + " tok/s";
  if (point.ttft !== null) $("metric-ttft").textContent = "TTFT " + (point.ttft * 1000).toFixed(0) + " ms";
  drawChart();
}

function drawChart() {
  const chart = $("metric-chart");
  chart.replaceChildren();
  const w = 220, h = 40, n = 60;
  const line = (values, cls) => {
    const max = Math.max(1e-9, ...values.filter((v) => v !== null));
    const pts = [];
    values.forEach((v, i) => {
      if (v === null) return;
      const x = ((i + n - values.length) / (n - 1)) * w;
      pts.push(x.toFixed(1) + "," + (h - 2 - (v / max) * (h - 4)).toFixed(1));
    });
    if (pts.length > 1) chart.append(svg("polyline", { points: pts.join(" "), class: cls }));
  };
  line(state.points.map((p) => p.tps), "tps");
  line(state.points.map((p) => p.ttft), "ttft");
}

// ---- start -----------------------------------------------------------------------------------------

async function start() {
  $("api-key").value = state.key;
  $("key-form").addEventListener("submit", async (e) => {
    e.preventDefault();
    state.key = $("api-key").value;
    sessionStorage.setItem("kvmem.key", state.key);
    setStatus("");
    await loadPolicies();
    await refreshAgents();
    if (state.selected !== null) await showAgent();
  });
  $("create-form").addEventListener("submit", createAgent);
  $("chat-form").addEventListener("submit", sendChat);
  await loadPolicies();
  if (!state.needsKey) await refreshAgents();
  setInterval(() => { if (!state.needsKey) refreshAgents().catch(() => {}); }, 5000);
  setInterval(() => { if (!state.needsKey) pollMetrics().catch(() => {}); }, 2000);
}

start();
