// The dashboard: reads the controller's JSON API and fills the tables.
// Plain script, no build step; refreshes every 5 s (a heartbeat's period).
"use strict";

function el(tag, text, cls) {
  const e = document.createElement(tag);
  if (text !== undefined && text !== null) e.textContent = String(text);
  if (cls) e.className = cls;
  return e;
}

function fill(id, rows, cells) {
  const body = document.querySelector("#" + id + " tbody");
  body.replaceChildren();
  if (rows.length === 0) {
    const tr = el("tr");
    const td = el("td", "none", "quiet");
    td.colSpan = document.querySelectorAll("#" + id + " th").length;
    tr.append(td);
    body.append(tr);
    return;
  }
  for (const row of rows) {
    const tr = el("tr");
    for (const c of cells(row)) tr.append(c instanceof Node ? c : el("td", c));
    body.append(tr);
  }
}

function ago(ms) {
  if (ms === null || ms === undefined) return "never";
  const s = Math.max(0, Math.round((Date.now() - ms) / 1000));
  if (s < 60) return s + "s ago";
  if (s < 3600) return Math.floor(s / 60) + "m ago";
  if (s < 86400) return Math.floor(s / 3600) + "h ago";
  return Math.floor(s / 86400) + "d ago";
}

async function get(path) {
  const r = await fetch(path, { cache: "no-store" });
  if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text()));
  return r.json();
}

// As `mesh deployments` says it.
function deploymentState(s) {
  switch (s.state) {
    case "running": return "running batch " + (s.batch + 1);
    case "paused": return "paused at batch " + (s.batch + 1);
    case "halted": return "halted at " + s.node + ": " + s.reason;
    case "reverted": return "reverted" + (s.node ? " at " + s.node : "") + ": " + s.reason;
    default: return s.state;
  }
}

function list(v) {
  return (v || []).join(", ");
}

async function refresh() {
  const [status, nodes, modules, seats, catalogue, audit, deployments] = await Promise.all([
    get("/api/status"), get("/api/nodes"), get("/api/modules"), get("/api/seats"), get("/api/catalogue"),
    get("/api/audit?limit=20"), get("/api/deployments?limit=10"),
  ]);
  const ready = document.getElementById("ready");
  // Green only when nothing needs action: a failed module is not "ready".
  const pending = status.needs_action.length;
  if (!status.controller.ready) {
    ready.textContent = "not ready: " + status.controller.reason;
    ready.className = "badge bad";
  } else if (pending > 0) {
    ready.textContent = "ready; " + pending + (pending === 1 ? " thing needs" : " things need") + " action";
    ready.className = "badge warn";
  } else {
    ready.textContent = "ready";
    ready.className = "badge ok";
  }

  const actions = document.getElementById("needs-action");
  actions.replaceChildren();
  if (status.needs_action.length === 0) actions.append(el("li", "nothing", "quiet"));
  for (const a of status.needs_action) {
    const li = el("li");
    li.append(el("strong", a.what), document.createTextNode(" — " + a.next));
    actions.append(li);
  }

  fill("nodes", nodes, (n) => [
    n.node, n.state, el("td", n.liveness, n.liveness), ago(n.last_seen_at), el("td", n.host_key || "-", "mono"),
  ]);
  fill("modules", modules, (m) => [
    m.module, m.node, el("td", m.state, m.state), el("td", m.health || "-", m.health || ""), m.version || "-",
    m.restarts, m.sequence === null ? "-" : m.sequence, m.reason || "",
  ]);
  fill("deployments", deployments, (d) => [
    "#" + d.id, d.deployment.spec.module, d.deployment.spec.version, d.deployment.spec.nodes.length,
    el("td", deploymentState(d.deployment.state), d.deployment.state.state), ago(d.updated_at),
  ]);
  fill("seats", seats, (s) => [
    s.seat, s.kind, s.scope, list(s.accepts), list(s.emits),
    s.holders.map((h) => h.module + " on " + h.node).join(", ") || "nobody",
  ]);

  const reports = [];
  for (const n of nodes.filter((n) => n.enrolled_at !== null)) {
    const rs = await get("/api/reports/" + encodeURIComponent(n.node) + "?limit=1");
    for (const r of rs) reports.push({ node: n.node, ...r });
  }
  fill("reports", reports, (r) => [
    r.node, "#" + r.id, r.sequence, ago(r.received_at),
    r.refused !== null
      ? el("td", "refused: " + r.refused, "refused")
      : r.modules.map((m) => m.module + " " + m.state).join(", "),
  ]);

  // The newest changes first; a refusal is shown as one.
  fill("audit", audit, (a) => [
    ago(a.at), a.who, a.operation, el("td", a.arguments, "mono"),
    el("td", a.outcome, a.outcome === "done" ? "" : "refused"), a.revision === null ? "-" : a.revision,
  ]);

  fill("catalogue", catalogue.modules, (m) => {
    const td = el("td");
    m.consumes.forEach((c, i) => {
      if (i > 0) td.append(document.createTextNode(", "));
      td.append(el("span", c.emitter + "." + c.event + (c.dangling ? " (no emitter)" : ""), c.dangling ? "dangling" : ""));
    });
    return [m.module, list(m.holds), list(m.uses), list(m.emits), td];
  });
  document.getElementById("updated").textContent = "updated " + new Date().toLocaleTimeString();
}

async function loop() {
  try {
    await refresh();
  } catch (e) {
    const ready = document.getElementById("ready");
    ready.textContent = "controller not answering: " + e.message;
    ready.className = "badge bad";
  }
  setTimeout(loop, 5000);
}

loop();
