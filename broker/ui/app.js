// app.js: the mqlite dashboard. Every piece of data comes from the /v1
// endpoints (api.js) with the key the user entered; the broker enforces
// roles whatever this page shows or hides.

import { api, getKey, setKey, clearKey } from "./api.js";
import { Rates, Series, draw, fmtRate } from "./chart.js";

const pollMS = 2000;
const pageSize = 50;
const states = ["active", "scheduled", "locked", "deferred", "dead_lettered"];

const $ = (id) => document.getElementById(id);

// el builds an element; children are nodes or strings (text, never HTML:
// message bodies and names are untrusted).
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, String(v));
  }
  for (const c of children) e.append(c instanceof Node ? c : String(c ?? ""));
  return e;
}

const state = {
  who: null,          // the whoami response
  stats: new Map(),   // queue → last stats
  options: new Map(), // queue → its options (admin keys only)
  rates: new Rates(),
  rate: new Map(),    // queue → {sent, completed} or null
  series: new Series(60),
  countersSeen: false,
  timer: 0,
  polling: false,
  view: "queues",
  peekFrom: 0,
  filter: {},         // the message browser's search (find's parameters)
  armedDelete: "",    // the queue whose delete button asks for a second click
  peekLast: 0,
};

const isAdmin = () => state.who && state.who.key.role === "admin";
const coversAll = () => state.who && state.who.key.queues.includes("*");

function showError(err) {
  const p = $("error");
  if (!err) { p.hidden = true; p.textContent = ""; return; }
  p.textContent = err.message || String(err);
  p.hidden = false;
  if (err.status === 401) signOut("The key is unknown or revoked: enter another.");
}

// guard runs an async action and shows its error.
async function guard(fn) {
  try { showError(null); await fn(); } catch (err) { showError(err); }
}

// --- session -------------------------------------------------------------

async function signIn() {
  const who = await api.whoami();
  if (who.key.role === "producer") {
    // Stats, peeks and everything else here need a consumer or an admin.
    signOut(`Key ${who.key.id} is a producer key: it may only send. Enter a consumer or admin key.`);
    return;
  }
  state.who = who;
  $("login").hidden = true;
  $("nav").hidden = false;
  $("who").hidden = false;
  $("who-key").textContent = `key ${state.who.key.id} · ${state.who.key.role} · ${state.who.key.queues.join(", ")}`;
  for (const a of document.querySelectorAll("#nav a")) {
    a.hidden = (a.hasAttribute("data-admin") && !isAdmin()) || (a.hasAttribute("data-keys") && !(isAdmin() && coversAll()));
  }
  for (const b of document.querySelectorAll(".admin-action")) b.hidden = !isAdmin();
  setQueues(who.queues, true);
  document.body.dataset.role = state.who.key.role;
  clearInterval(state.timer);
  state.timer = setInterval(() => guard(poll), pollMS);
  await poll();
  await route();
}

function signOut(message) {
  clearKey();
  clearInterval(state.timer);
  state.who = null;
  state.stats.clear();
  state.rate.clear();
  state.rates = new Rates();
  state.series = new Series(60);
  state.countersSeen = false;
  delete document.body.dataset.role;
  // Leave nothing of the last key's data in the page.
  for (const id of ["queues-body", "messages-body", "dlq-body", "topics-body", "schedules-body", "keys-body", "key-secret-value", "message-detail", "dlq-status"]) {
    $(id).replaceChildren();
  }
  $("key-secret").hidden = true;
  $("nav").hidden = true;
  $("who").hidden = true;
  for (const v of document.querySelectorAll(".view")) v.hidden = true;
  $("login").hidden = false;
  if (message) { $("error").textContent = message; $("error").hidden = false; }
}

$("login-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const input = $("login-key");
  const key = input.value.trim();
  input.value = "";
  if (!key) return;
  setKey(key);
  guard(signIn);
});
$("signout").addEventListener("click", () => { showError(null); signOut(); });

// --- routing -------------------------------------------------------------

const views = {
  queues: () => renderQueues(),
  messages: () => loadMessages(),
  "dead-letters": () => loadDeadLetters(),
  topics: () => loadTopics(),
  schedules: () => loadSchedules(),
  keys: () => loadKeys(),
};

async function route() {
  if (!state.who) return;
  let name = location.hash.slice(1) || "queues";
  // A view the key may not use (its link is hidden) falls back to queues.
  const link = document.querySelector(`#nav a[data-view="${CSS.escape(name)}"]`);
  if (!views[name] || !link || link.hidden) name = "queues";
  state.view = name;
  for (const v of document.querySelectorAll(".view")) v.hidden = v.id !== "view-" + name;
  for (const a of document.querySelectorAll("#nav a")) a.classList.toggle("current", a.dataset.view === name);
  await views[name]();
}
window.addEventListener("hashchange", () => guard(route));

// --- queues, rates and the chart ----------------------------------------

// setQueues takes the queue names the key covers (queues come and go while
// the page is open) into the lists, keeping each list's choice.
function setQueues(queues, force) {
  if (!force && queues.join("\n") === state.who.queues.join("\n")) return;
  state.who.queues = queues;
  for (const id of ["messages-queue", "dlq-queue"]) {
    const sel = $(id);
    const chosen = sel.value;
    sel.replaceChildren(...queues.map((q) => el("option", { value: q }, q)));
    if (queues.includes(chosen)) sel.value = chosen;
  }
}

async function poll() {
  if (!state.who || state.polling) return;
  state.polling = true;
  try {
    const who = await api.whoami();
    if (state.who?.key.id !== who.key.id) return; // signed out meanwhile
    setQueues(who.queues);
    const now = performance.now();
    // One request for every queue the key covers: the counts the store
    // keeps in memory, cheap however large the queues.
    const counts = await api.counts();
    if (state.who?.key.id !== who.key.id) return;
    if (who.key.role === "admin") {
      const list = await api.queues();
      state.options = new Map(list.queues.map((q) => [q.name, q.options]));
    }
    let sent = 0, completed = 0, known = false;
    for (const s of counts.queues) {
      const q = s.queue;
      state.stats.set(q, s);
      if (s.counters) state.countersSeen = true;
      const r = state.rates.update(q, s.counters, now);
      state.rate.set(q, r);
      if (r) { known = true; sent += r.sent; completed += r.completed; }
    }
    if (known) state.series.push({ sent, completed });
    renderQueues();
  } finally {
    state.polling = false;
  }
}

function renderQueues() {
  const rows = state.who.queues.map((q) => {
    const s = state.stats.get(q);
    const r = state.rate.get(q);
    const cell = (st) => el("td", { class: "n", "data-queue": q, "data-state": st }, s ? s[st] : "");
    const total = s ? states.reduce((n, st) => n + s[st], 0) : "";
    return el("tr", { "data-queue": q, "data-paused": s && s.paused ? "true" : "false" },
      el("td", {}, q, s && s.paused ? el("span", { class: "paused", "data-paused": q }, " (paused)") : ""),
      ...states.map(cell),
      el("td", { class: "n", "data-queue": q, "data-state": "total" }, total),
      el("td", { class: "n", "data-queue": q, "data-gauge": "bytes" }, s ? fmtBytes(s.bytes) : ""),
      el("td", { class: "n", "data-queue": q, "data-gauge": "oldest" }, s ? fmtAge(s.oldest_age_ms) : ""),
      el("td", { class: "n", "data-queue": q, "data-gauge": "oldest-dead" }, s ? fmtAge(s.oldest_dead_letter_age_ms) : ""),
      el("td", { class: "n", "data-queue": q, "data-gauge": "consumers",
        title: s ? `${s.waiting} receives waiting, ${s.locks} leases held` : "" }, s ? String(s.consumers ?? "") : ""),
      el("td", { class: "n", "data-queue": q, "data-rate": "sent" }, fmtRate(r ? r.sent : null)),
      el("td", { class: "n", "data-queue": q, "data-rate": "completed" }, fmtRate(r ? r.completed : null)),
      el("td", { "data-queue": q, "data-option": "dedup" }, fmtDedup(state.options.get(q))),
      el("td", {}, ...(isAdmin() ? queueActions(q, s) : [])));
  });
  $("queues-body").replaceChildren(...rows);
  draw($("chart"), state.series);
  $("chart-note").textContent = state.countersSeen ? "" :
    "This broker reports no counters: rates and the chart stay empty.";
}

// fmtBytes writes a byte count in B, KiB, MiB or GiB.
function fmtBytes(n) {
  if (n == null) return "";
  const units = ["B", "KiB", "MiB", "GiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return i === 0 ? `${n} B` : `${n.toFixed(1)} ${units[i]}`;
}

// fmtAge writes an age in milliseconds as s, m, h or d; "" for none.
function fmtAge(ms) {
  if (!ms) return "";
  const s = ms / 1000;
  if (s < 60) return `${s.toFixed(0)}s`;
  if (s < 3600) return `${(s / 60).toFixed(0)}m`;
  if (s < 86400) return `${(s / 3600).toFixed(1)}h`;
  return `${(s / 86400).toFixed(1)}d`;
}

// queueActions are an admin's buttons of one queue row: pause or resume,
// and delete (two clicks). The server enforces the role: a key that is not
// an admin over the queue gets 403 whatever the page shows.
function queueActions(q, s) {
  const paused = s && s.paused;
  return [
    el("button", { type: "button", class: "pause", "data-queue": q,
      onclick: () => guard(async () => {
        await (paused ? api.resume(q) : api.pause(q));
        $("queues-status").textContent = `${paused ? "Resumed" : "Paused"} ${q}.`;
        await poll();
      }) }, paused ? "Resume" : "Pause"),
    // The table is rebuilt at every poll: the armed delete is kept in
    // state, not on the button, so the second click finds it armed.
    el("button", { type: "button", class: "delete danger" + (state.armedDelete === q ? " armed" : ""), "data-queue": q,
      onclick: () => {
        if (state.armedDelete !== q) {
          state.armedDelete = q;
          renderQueues();
          return;
        }
        state.armedDelete = "";
        guard(async () => {
          await api.deleteQueue(q);
          $("queues-status").textContent = `Deleted ${q}.`;
          await poll();
        });
      } }, state.armedDelete === q ? "Click again to delete" : "Delete"),
  ];
}

// queueFormOptions reads the queue form's options over base (the queue's
// current options for an update: PUT replaces them all). An empty field
// keeps what base has (the default, on a create); -1 turns a bound off.
function queueFormOptions(base) {
  const o = { ...(base || {}) };
  o.dlq = { ...(o.dlq || {}) };
  const num = (id, set) => { const v = $(id).value; if (v !== "") set(Number(v)); };
  const ms = (s) => (s < 0 ? s : s * 1000); // -1 stays -1: off
  const yes = (id, set) => { const v = $(id).value; if (v) set(v === "yes"); };
  num("queue-max-delivery", (v) => { o.max_delivery_count = v; });
  num("queue-lock", (v) => { o.lock_duration_ms = v * 1000; });
  num("queue-dedup-window", (v) => { o.dedup_window_ms = ms(v); });
  num("queue-ttl", (v) => { o.default_ttl_ms = v * 1000; });
  num("queue-dlq-age", (v) => { o.dlq.max_age_ms = ms(v); });
  num("queue-dlq-count", (v) => { o.dlq.max_count = v; });
  num("queue-dlq-bytes", (v) => { o.dlq.max_bytes = v; });
  yes("queue-dedup-body", (v) => { o.dedup_by_body = v; });
  yes("queue-expire-dlq", (v) => { o.dead_letter_on_expire = v; });
  const ordering = $("queue-ordering").value;
  if (ordering) o.ordering = ordering;
  return o;
}

$("queue-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  guard(async () => {
    const name = $("queue-name").value.trim();
    await api.createQueue(name, queueFormOptions());
    $("queues-status").textContent = `Created ${name}.`;
    await poll();
  });
});
$("queue-update").addEventListener("click", () => guard(async () => {
  const name = $("queue-name").value.trim();
  const cur = await api.queue(name);
  await api.updateQueue(name, queueFormOptions(cur.options));
  $("queues-status").textContent = `Updated ${name}.`;
  await poll();
}));

// fmtDedup says what a queue deduplicates, and for how long: "" when the
// key may not read the queue's options.
function fmtDedup(o) {
  if (!o) return "";
  if (o.dedup_window_ms === -1) return "off";
  const key = o.dedup_by_body ? "message id or body" : "message id";
  const s = o.dedup_window_ms / 1000;
  return `${key}, ${s % 3600 === 0 ? `${s / 3600}h` : s % 60 === 0 ? `${s / 60}m` : `${s}s`}`;
}

// fresh starts a load of name and returns a check that stays true until
// the next load of name starts: a slow answer never overwrites a newer one.
const loads = {};
function fresh(name) {
  const n = (loads[name] = (loads[name] || 0) + 1);
  return () => loads[name] === n;
}

// --- messages --------------------------------------------------------------

// decodeBody returns the body as text when it is UTF-8 (pretty JSON when it
// parses), and as hex otherwise.
function decodeBody(b64) {
  const bin = atob(b64 || "");
  const bytes = Uint8Array.from(bin, (c) => c.charCodeAt(0));
  try {
    const text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
    try { return { text: JSON.stringify(JSON.parse(text), null, 2), kind: "json" }; } catch { /* not JSON */ }
    return { text, kind: "text" };
  } catch {
    const hex = Array.from(bytes.slice(0, 512), (x) => x.toString(16).padStart(2, "0")).join(" ");
    return { text: hex + (bytes.length > 512 ? " …" : ""), kind: "hex" };
  }
}

function preview(b64) {
  const { text } = decodeBody(b64);
  const one = text.replace(/\s+/g, " ");
  return one.length > 80 ? one.slice(0, 80) + "…" : one;
}

const fmtTime = (t) => (t ? new Date(t).toISOString().replace("T", " ").replace(/\.\d+Z$/, "Z") : "");

async function loadMessages() {
  const queue = $("messages-queue").value;
  const body = $("messages-body");
  $("message-detail").hidden = true;
  if (!queue) { body.replaceChildren(); return; }
  const current = fresh("messages");
  // The browser's search runs on the server: it examines a bounded number
  // of messages per page and says where the next one starts.
  const res = await api.find(queue, { ...state.filter, from_seq: state.peekFrom, max: pageSize });
  if (!current()) return;
  const msgs = res.messages;
  state.peekLast = res.next_seq ? res.next_seq - 1 : (msgs.length ? msgs[msgs.length - 1].seq : 0);
  body.replaceChildren(...msgs.map((m) => el("tr", { class: "clickable", "data-seq": m.seq, onclick: (ev) => showMessage(m, ev.currentTarget) },
    el("td", { class: "n" }, m.seq), el("td", {}, m.state), el("td", { class: "n" }, m.priority || 0),
    el("td", { class: "n" }, m.delivery_count),
    el("td", {}, m.message_id || ""), el("td", {}, m.subject || ""),
    el("td", { class: "preview" }, preview(m.body)))));
  if (!msgs.length) body.replaceChildren(el("tr", {}, el("td", { colspan: 7, class: "note" }, "No messages.")));
  body.dataset.loaded = queue;
}

// lastErrorPair is the detail's "last error" pair: why the last delivery
// came back (the handler's or the sink's error), when one was kept.
function lastErrorPair(m) {
  if (!m.last_error) return [];
  return [el("dt", {}, "last error"), el("dd", { id: "message-last-error" }, m.last_error)];
}

// attemptsSection is the detail's history of failed deliveries, oldest
// first (when, who held it, why), or nothing for a message that never
// failed.
function attemptsSection(m) {
  const as = m.attempts || [];
  if (!as.length) return [];
  return [el("h2", {}, `Failed attempts (${as.length})`),
    el("table", { id: "message-attempts" },
      el("thead", {}, el("tr", {}, el("th", {}, "at"), el("th", {}, "worker"), el("th", {}, "error"))),
      el("tbody", {}, ...as.map((a) => el("tr", {},
        el("td", {}, fmtTime(a.at)), el("td", {}, a.worker || "—"), el("td", {}, a.error || "—")))))];
}

// attemptsText is the history of failed deliveries as one line per
// attempt, for the dead letters' tooltip.
function attemptsText(m) {
  return (m.attempts || []).map((a) => `${fmtTime(a.at)} ${a.worker || "—"}: ${a.error || "—"}`).join("\n");
}

function showMessage(m, row) {
  for (const r of document.querySelectorAll("#messages-body tr")) r.classList.toggle("selected", r === row);
  const { text, kind } = decodeBody(m.body);
  const props = Object.entries(m.properties || {}).sort(([a], [b]) => a.localeCompare(b));
  const pair = (k, v) => [el("dt", {}, k), el("dd", {}, v)];
  const d = $("message-detail");
  d.replaceChildren(
    el("h2", {}, `${m.queue} #${m.seq}`),
    el("dl", {},
      ...pair("state", m.state), ...pair("priority", m.priority || 0), ...pair("delivery count", m.delivery_count),
      ...pair("message id", m.message_id || "—"), ...pair("group", m.group_id || "—"),
      ...pair("subject", m.subject || "—"), ...pair("enqueued", fmtTime(m.enqueued_at)),
      ...lastErrorPair(m),
      ...(m.visible_at ? pair("visible at", fmtTime(m.visible_at)) : []),
      ...(m.locked_until ? pair("locked until", fmtTime(m.locked_until)) : []),
      ...(m.expires_at ? pair("expires", fmtTime(m.expires_at)) : [])),
    ...attemptsSection(m),
    el("h2", {}, "Properties"),
    props.length ? el("dl", { id: "message-properties" }, ...props.flatMap(([k, v]) => pair(k, v))) : el("p", { class: "note" }, "none"),
    el("h2", {}, `Body (${kind})`),
    el("pre", { id: "message-body" }, text),
    ...(isAdmin() && m.state === "scheduled" ? [el("button", { type: "button", id: "message-deliver-now",
      onclick: () => guard(async () => {
        const res = await api.deliverNow(m.queue, [m.seq]);
        $("messages-status").textContent = `Made ${res.count} message(s) due now.`;
        await loadMessages();
      }) }, "Deliver now")] : []));
  d.hidden = false;
}

$("find-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const f = {};
  const st = $("find-state").value, sub = $("find-subject").value, id = $("find-message-id").value, prop = $("find-property").value;
  if (st) f.state = st;
  if (sub) f.subject_prefix = sub;
  if (id) f.message_id = id;
  if (prop) {
    const i = prop.indexOf("=");
    if (i <= 0) { showError(new Error("property: want key=value")); return; }
    f.property_key = prop.slice(0, i);
    f.property_value = prop.slice(i + 1);
  }
  state.filter = f;
  state.peekFrom = 0;
  guard(loadMessages);
});

$("purge-submit").addEventListener("click", (ev) => {
  const queue = $("messages-queue").value, st = $("purge-state").value;
  arm(ev.currentTarget, `Click again to purge ${st}`, async () => {
    const res = await api.purge(queue, st);
    $("messages-status").textContent = `Purged ${res.count} ${st} message(s) of ${queue}.`;
    await loadMessages();
    await poll();
  });
});

// parseProperties reads "k=v, k2=v2".
function parseProperties(text) {
  const out = {};
  for (const part of text.split(",")) {
    const p = part.trim();
    if (!p) continue;
    const i = p.indexOf("=");
    if (i <= 0) throw new Error(`property ${p}: want key=value`);
    out[p.slice(0, i).trim()] = p.slice(i + 1).trim();
  }
  return out;
}

$("publish-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  guard(async () => {
    const queue = $("messages-queue").value;
    const bytes = new TextEncoder().encode($("publish-body").value);
    const msg = { body: btoa(String.fromCharCode(...bytes)) };
    if ($("publish-subject").value) msg.subject = $("publish-subject").value;
    if ($("publish-message-id").value) msg.message_id = $("publish-message-id").value;
    const props = parseProperties($("publish-properties").value);
    if (Object.keys(props).length) msg.properties = props;
    if ($("publish-deliver-at").value) msg.deliver_at = new Date($("publish-deliver-at").value).toISOString();
    const res = await api.send(queue, msg);
    $("messages-status").textContent = `Published seq ${res.seq} to ${queue}.`;
    await loadMessages();
    await poll();
  });
});

$("messages-queue").addEventListener("change", () => { state.peekFrom = 0; guard(loadMessages); });
$("messages-refresh").addEventListener("click", () => guard(loadMessages));
$("messages-first").addEventListener("click", () => { state.peekFrom = 0; guard(loadMessages); });
$("messages-next").addEventListener("click", () => {
  if (state.peekLast) state.peekFrom = state.peekLast + 1;
  guard(loadMessages);
});

// --- dead letters -----------------------------------------------------------

// arm makes a destructive button ask for a second click.
function arm(button, label, fn) {
  if (!button.classList.contains("armed")) {
    button.dataset.label = button.textContent;
    button.textContent = label;
    button.classList.add("armed");
    return;
  }
  button.classList.remove("armed");
  button.textContent = button.dataset.label;
  guard(fn);
}

async function loadDeadLetters() {
  const body = $("dlq-body");
  const queue = $("dlq-queue").value;
  if (!isAdmin()) {
    $("dlq-status").textContent = "Dead letters need an admin key.";
    body.replaceChildren();
    return;
  }
  if (!queue) { body.replaceChildren(); return; }
  const current = fresh("dead-letters");
  const res = await api.deadLetters(queue, 0, pageSize);
  if (!current()) return;
  body.replaceChildren(...res.messages.map((m) => el("tr", { "data-seq": m.seq },
    el("td", {}, el("input", { type: "checkbox", class: "dlq-select", "data-seq": m.seq, "aria-label": `select ${m.seq}` })),
    el("td", { class: "n" }, m.seq), el("td", {}, m.dead_letter_reason || ""),
    el("td", {}, m.dead_letter_description || ""), el("td", { class: "n", title: attemptsText(m) }, m.delivery_count),
    el("td", {}, fmtTime(m.dead_lettered_at)), el("td", { class: "message-id" }, m.message_id || "—"),
    el("td", { class: "preview" }, preview(m.body)),
    el("td", {}, isAdmin() ? el("button", { type: "button", class: "redrive", "data-seq": m.seq,
      onclick: () => guard(() => redrive(queue, [m.seq])) }, "Redrive") : ""))));
  if (!res.messages.length) body.replaceChildren(el("tr", {}, el("td", { colspan: 9, class: "note" }, "No dead letters.")));
  body.dataset.loaded = queue;
}

async function redrive(queue, seqs) {
  const res = await api.redrive(queue, seqs);
  $("dlq-status").textContent = `Redrove ${res.count} message(s) of ${queue}.`;
  await loadDeadLetters();
  await poll();
}

$("dlq-queue").addEventListener("change", () => { $("dlq-status").textContent = ""; guard(loadDeadLetters); });
$("dlq-refresh").addEventListener("click", () => guard(loadDeadLetters));
$("dlq-redrive-all").addEventListener("click", () => guard(() => redrive($("dlq-queue").value)));
// selectedDeadLetters returns the seqs of the ticked dead letters.
function selectedDeadLetters(what) {
  const seqs = Array.from(document.querySelectorAll(".dlq-select:checked"), (c) => Number(c.dataset.seq));
  if (!seqs.length) throw new Error(`Select the dead letters to ${what} first.`);
  return seqs;
}

$("dlq-redrive-selected").addEventListener("click", () => guard(async () => {
  await redrive($("dlq-queue").value, selectedDeadLetters("redrive"));
}));
$("dlq-purge-selected").addEventListener("click", (ev) => {
  // Nothing selected: say so at once, without arming the button.
  if (!document.querySelector(".dlq-select:checked")) {
    guard(async () => selectedDeadLetters("purge"));
    return;
  }
  arm(ev.currentTarget, "Click again to purge them", async () => {
    const queue = $("dlq-queue").value;
    const res = await api.purge(queue, "dead_lettered", selectedDeadLetters("purge"));
    $("dlq-status").textContent = `Purged ${res.count} selected dead letter(s) of ${queue}.`;
    await loadDeadLetters();
    await poll();
  });
});
$("dlq-purge").addEventListener("click", (ev) => arm(ev.currentTarget, "Click again to purge", async () => {
  const queue = $("dlq-queue").value;
  const res = await api.purge(queue, "dead_lettered");
  $("dlq-status").textContent = `Purged ${res.count} dead letter(s) of ${queue}.`;
  await loadDeadLetters();
  await poll();
}));

// --- schedules ----------------------------------------------------------------

function fmtWhen(o) {
  if (o.cron) return `cron ${o.cron}` + (o.time_zone ? ` (${o.time_zone})` : "");
  const s = o.every_ms / 1000;
  return s % 3600 === 0 ? `every ${s / 3600}h` : s % 60 === 0 ? `every ${s / 60}m` : `every ${s}s`;
}

async function loadSchedules() {
  // The broker answers in pages within its byte budget: read them all.
  const schedules = [];
  for (let after = ""; ;) {
    const res = await api.schedules(after);
    schedules.push(...res.schedules);
    if (!res.next_after || res.next_after === after) break;
    after = res.next_after;
  }
  const rows = schedules.map((sc) => el("tr", { "data-schedule": sc.name },
    el("td", {}, sc.name), el("td", {}, sc.options.target), el("td", {}, fmtWhen(sc.options)),
    el("td", {}, fmtTime(sc.next_at)), el("td", {}, fmtTime(sc.last_at)),
    el("td", { class: "n" }, String(sc.fired)), el("td", { class: "n" }, String(sc.skipped)),
    el("td", {}, sc.last_error || "")));
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 8, class: "note" }, "No schedules.")));
  $("schedules-body").replaceChildren(...rows);
}

// --- topics -------------------------------------------------------------------

function fmtFilter(f) {
  const parts = [];
  if (f.subject) parts.push(`subject = ${f.subject}`);
  if (f.subject_prefix) parts.push(`subject starts ${f.subject_prefix}`);
  for (const [k, m] of Object.entries(f.properties || {})) {
    if (m.in) parts.push(`${k} in [${m.in.join(", ")}]`);
    if (m.prefix) parts.push(`${k} starts ${m.prefix}`);
  }
  return parts.length ? parts.join("; ") : "everything";
}

async function loadTopics() {
  const res = await api.topics();
  const rows = [];
  for (const t of res.topics) {
    if (!t.subscriptions.length) rows.push(el("tr", {}, el("td", {}, t.name), el("td", { class: "note" }, "no subscription"), el("td", {})));
    for (const s of t.subscriptions) rows.push(el("tr", {}, el("td", {}, t.name), el("td", {}, s.queue), el("td", {}, fmtFilter(s.filter))));
  }
  if (!rows.length) rows.push(el("tr", {}, el("td", { colspan: 3, class: "note" }, "No topics.")));
  $("topics-body").replaceChildren(...rows);
}

// --- access keys ----------------------------------------------------------------

async function loadKeys() {
  const res = await api.keys();
  $("keys-body").replaceChildren(...res.keys.map((k) => el("tr", { "data-key": k.id },
    el("td", {}, k.id), el("td", {}, k.role), el("td", {}, k.queues.join(", ")),
    el("td", {}, fmtTime(k.created_at)), el("td", {}, fmtTime(k.revoked_at)),
    el("td", {}, k.revoked_at || k.id === state.who.key.id ? "" : el("button", { type: "button", class: "revoke",
      onclick: (ev) => arm(ev.currentTarget, "Click again to revoke", async () => { await api.revokeKey(k.id); await loadKeys(); }) }, "Revoke")))));
}

$("key-form").addEventListener("submit", (ev) => {
  ev.preventDefault();
  guard(async () => {
    const queues = $("key-queues").value.split(",").map((s) => s.trim()).filter(Boolean);
    const res = await api.createKey($("key-role").value, queues);
    $("key-secret-value").textContent = res.secret;
    $("key-secret").hidden = false;
    await loadKeys();
  });
});
$("key-secret-hide").addEventListener("click", () => {
  $("key-secret-value").textContent = "";
  $("key-secret").hidden = true;
});

// --- start ---------------------------------------------------------------------

if (getKey()) guard(signIn); else signOut();
