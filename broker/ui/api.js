// api.js: the broker's /v1 endpoints with the user's access key. The key
// lives in sessionStorage (this tab, until it closes) and travels only in
// the Authorization header: never in a URL, never in the console.

const storageKey = "mqlite.key";

export function getKey() { return sessionStorage.getItem(storageKey) || ""; }
export function setKey(k) { sessionStorage.setItem(storageKey, k); }
export function clearKey() { sessionStorage.removeItem(storageKey); }

// APIError is a broker error: {code, reason, message} and the HTTP status.
export class APIError extends Error {
  constructor(status, body) {
    const e = (body && body.error) || {};
    super(e.message || `HTTP ${status}`);
    this.status = status;
    this.code = e.code || "";
    this.reason = e.reason || "";
  }
}

// call sends one request to the broker and returns the decoded JSON (null
// for 204). A 401 clears the stored key: it is unknown or was revoked.
export async function call(method, path, body) {
  const headers = { "Authorization": "Bearer " + getKey() };
  const init = { method, headers, cache: "no-store", credentials: "omit", referrerPolicy: "no-referrer" };
  if (body !== undefined) {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const resp = await fetch(path, init);
  if (resp.status === 204) return null;
  let data = null;
  try { data = await resp.json(); } catch { data = null; }
  if (!resp.ok) {
    if (resp.status === 401) clearKey();
    throw new APIError(resp.status, data);
  }
  return data;
}

const q = (name) => "/v1/queues/" + encodeURIComponent(name);

export const api = {
  whoami: () => call("GET", "/v1/whoami"),
  counts: () => call("GET", "/v1/counts"),
  queues: () => call("GET", "/v1/queues"),
  queue: (name) => call("GET", q(name)),
  peek: (queue, fromSeq, max) => call("GET", `${q(queue)}/messages?from_seq=${fromSeq}&max=${max}`),
  deadLetters: (queue, fromSeq, max) => call("GET", `${q(queue)}/dead-letters?from_seq=${fromSeq}&max=${max}`),
  redrive: (queue, seqs) => call("POST", q(queue) + "/dead-letters/redrive", seqs ? { seqs } : {}),
  purge: (queue, state, seqs) => call("POST", q(queue) + "/purge", seqs ? { state, seqs } : { state }),
  find: (queue, params) => call("GET", `${q(queue)}/find?${new URLSearchParams(params)}`),
  send: (queue, msg) => call("POST", q(queue) + "/messages", msg),
  deliverNow: (queue, seqs) => call("POST", q(queue) + "/deliver-now", { seqs }),
  createQueue: (name, options) => call("POST", "/v1/queues", { name, options }),
  updateQueue: (name, options) => call("PUT", q(name), { options }),
  deleteQueue: (name) => call("DELETE", q(name)),
  pause: (name) => call("POST", q(name) + "/pause"),
  resume: (name) => call("POST", q(name) + "/resume"),
  topics: () => call("GET", "/v1/topics"),
  schedules: (after) => call("GET", "/v1/schedules" + (after ? "?after=" + encodeURIComponent(after) : "")),
  keys: () => call("GET", "/v1/keys"),
  createKey: (role, queues) => call("POST", "/v1/keys", { role, queues }),
  revokeKey: (id) => call("DELETE", "/v1/keys/" + encodeURIComponent(id)),
};
