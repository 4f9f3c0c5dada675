// An Agent-Reach agent in Node.js, written from docs/protocol.md alone, on
// @nats-io/transport-node, @nats-io/kv and @msgpack/msgpack. It serves the
// capabilities of docs/conformance.md and passes
//
//   bin/agentreach conformance -- node examples/node/agent.mjs
//
// It reads AGENTREACH_SERVER (default nats://127.0.0.1:4222),
// AGENTREACH_AGENT_ID (default node-<random>), AGENTREACH_PREFIX
// (default reach) and, where auth is on, AGENTREACH_CREDS: its identity's
// credentials file, as `agentreach conformance --auth` sets it. One function per step of the protocol: register and
// heartbeat on a connection of its own, subscribe before the first put,
// ACKED / PROCESSING / result, slots and TARGET_BUSY, idempotency keys in
// REACH_IDEMPOTENCY, cancels, the drain on SIGTERM, and the NATS micro
// protocol (optional: `nats micro ls` lists the agent).

import { createHash, randomBytes } from "node:crypto";
import { readFileSync } from "node:fs";
import { connect, credsAuthenticator, headers as newHeaders, Match } from "@nats-io/transport-node";
import { Kvm } from "@nats-io/kv";
import { decode as mpDecode, encode as mpEncode } from "@msgpack/msgpack";

const AGENT_TYPE = "conformance";
const VERSION = "1.0.0";
const MAX_CONCURRENT = 4;
const DRAIN_TIMEOUT_MS = 30_000;
const DEFAULT_DEADLINE_MS = 60_000;
const JSON_CT = "application/json";
const MSGPACK_CT = "application/msgpack";

const server = process.env.AGENTREACH_SERVER || "nats://127.0.0.1:4222";
const prefix = process.env.AGENTREACH_PREFIX || "reach";
const id = process.env.AGENTREACH_AGENT_ID || `node-${randomBytes(5).toString("hex")}`;
if (!/^[A-Za-z0-9][A-Za-z0-9_-]{0,127}$/.test(id)) {
  console.error(`AGENTREACH_AGENT_ID ${JSON.stringify(id)}: an instance id is 1 to 128 letters, digits, '_' and '-', starting with a letter or digit`);
  process.exit(1);
}
const log = (...a) => console.error(new Date().toISOString(), "node-agent:", ...a);

// With AGENTREACH_CREDS both connections present the identity's credentials
// (user JWT and nkey seed) and read replies under its inbox prefix,
// _INBOX.<id>: an identity may subscribe to no other inbox.
const credsFile = process.env.AGENTREACH_CREDS || "";
let auth = {};
if (credsFile) {
  try {
    auth = { authenticator: credsAuthenticator(readFileSync(credsFile)), inboxPrefix: `_INBOX.${id}` };
  } catch (e) {
    console.error(`AGENTREACH_CREDS ${JSON.stringify(credsFile)}: ${e.message}`);
    process.exit(1);
  }
}

// handlers serve the capabilities; each gets a task and answers it.
const handlers = {
  "conformance.echo": echo,
  "conformance.reject": (t) => t.fail("BIZ_REJECT", "conformance.reject refuses every task"),
  "conformance.slow": slow,
  "conformance.busy": busy,
  "conformance.write": write,
};
const capabilities = Object.keys(handlers).sort();

// --- state ---------------------------------------------------------------
let nc, hc;               // deliveries and replies; heartbeats only, so work never delays them
let records, outcomes;    // REACH_AGENTS (on hc), REACH_IDEMPOTENCY (on nc)
let agentsOnWork;         // REACH_AGENTS on nc, for owner checks
let heartbeatMs, maxPayload, sub, beat;
let microSubs = [];        // $SRV.PING, INFO, STATS (section 5)
let active = 0;           // slots held
let draining = false;
const running = new Map(); // delivery reply subject -> task
const executions = new Map(); // conformance.write executions per key
let putChain = Promise.resolve(); // one put at a time, in order

// --- 1. register and heartbeat -------------------------------------------
function put() {
  const rec = {
    id, type: AGENT_TYPE, capabilities, max_concurrent: MAX_CONCURRENT, weight: 100, active,
    status: draining ? "draining" : "ready", timeout_hint_ms: 0, heartbeat_ms: heartbeatMs, version: VERSION,
  };
  const p = putChain.then(() => records.put(id, JSON.stringify(rec)));
  putChain = p.catch((e) => log("heartbeat:", e.message));
  return p;
}

// --- 2. connect, subscribe, then register --------------------------------
async function start() {
  nc = await connect({ servers: server, name: `node-agent ${id}`, ...auth });
  hc = await connect({ servers: server, name: `node-agent ${id} heartbeat`, ...auth });
  records = await new Kvm(hc).open("REACH_AGENTS");
  // Gets are direct gets of one key ($JS.API.DIRECT.GET.<stream>.<subject>),
  // all an agent may read where auth is on; open() alone would use
  // $JS.API.STREAM.MSG.GET, whose body names any subject.
  outcomes = await new Kvm(nc).open("REACH_IDEMPOTENCY", { allow_direct: true });
  agentsOnWork = await new Kvm(nc).open("REACH_AGENTS", { allow_direct: true });
  const ttlMs = (await records.status()).ttl;
  if (!ttlMs) throw new Error("REACH_AGENTS has no TTL: is the topology provisioned?");
  heartbeatMs = Math.floor(ttlMs / 3); // the bucket's TTL / 3, whole ms
  maxPayload = nc.info.max_payload;
  microSubs = serveMicro();
  sub = nc.subscribe(`${prefix}.agent.${id}`, { callback: (err, m) => { if (!err) deliver(m); } });
  await nc.flush(); // the server has the subscription before any dispatcher sees the record
  await put();
  beat = setInterval(put, heartbeatMs);
  log(`${id} serves ${capabilities.join(",")} (max_concurrent ${MAX_CONCURRENT}, heartbeat ${heartbeatMs}ms)`);
}

// --- 3. deliveries -------------------------------------------------------
function deliver(m) {
  const h = (k) => (m.headers ? m.headers.get(k, Match.IgnoreCase) : "");
  if (!m.reply) { // a CANCEL, or anything else that wants no answer
    if (h("Reach-Status") === "CANCEL") running.get(h("Reach-Delivery"))?.cancel();
    return;
  }
  const t = new Task(m, h);
  const handler = handlers[t.capability];
  if (!handler) return t.fail("NO_AGENT", `agent ${id} does not serve capability ${JSON.stringify(t.capability)}`);
  if (t.contentType !== JSON_CT && t.contentType !== MSGPACK_CT) {
    return t.fail("BAD_REQUEST", `unsupported content type ${JSON.stringify(t.contentType)} (want ${JSON_CT} or ${MSGPACK_CT})`);
  }
  if (active >= MAX_CONCURRENT) return t.fail("TARGET_BUSY", `agent ${id} has all ${MAX_CONCURRENT} slots busy`);
  active++;
  t.slot = true;
  running.set(m.reply, t);
  const began = performance.now();
  t.done = Promise.resolve()
    .then(() => handler(t))
    .catch((e) => t.fail("INTERNAL", String(e?.message ?? e)))
    .finally(() => { t.release(); running.delete(m.reply); counted(t.capability, performance.now() - began, t.error); });
}

class Task {
  constructor(m, h) {
    this.m = m;
    this.h = h;
    this.data = m.data;
    this.capability = h("Reach-Capability");
    this.requestId = h("Reach-Request-Id");
    this.contentType = contentType(h("Content-Type"), m.data);
    const dl = parseInt(h("Reach-Deadline"), 10);
    this.deadline = dl > 0 ? dl : Date.now() + DEFAULT_DEADLINE_MS;
    this.slot = false;
    this.answered = false;
    this.abort = new AbortController();
  }
  cancel() { this.abort.abort(); }
  release() { if (this.slot) { this.slot = false; active--; } }
  send(status, hdrs = {}, body = new Uint8Array()) {
    const hd = newHeaders();
    hd.set("Reach-Status", status);
    hd.set("Reach-Request-Id", this.requestId);
    for (const [k, v] of Object.entries(hdrs)) hd.set(k, v);
    nc.publish(this.m.reply, body, { headers: hd });
  }
  ack() { this.send("ACKED", { "Reach-Active": String(active) }); }
  progress() { this.send("PROCESSING"); }
  result(value) {
    let body;
    try { body = encode(this.contentType, value); } catch (e) { return this.fail("INTERNAL", `encode the result: ${e.message}`); }
    this.finish(this.contentType, body);
  }
  // finish answers FINISHED with body, checked against max_payload with its headers first.
  finish(ct, body, extra = {}) {
    if (this.answered) return;
    this.release(); // free before the answer leaves, so the next task finds the slot
    const hdrs = { "Content-Type": ct, "Reach-Active": String(active), ...extra };
    const size = messageSize({ "Reach-Status": "FINISHED", "Reach-Request-Id": this.requestId, ...hdrs }, body);
    if (size > maxPayload) {
      return this.fail("PAYLOAD_TOO_LARGE", `result: message of ${size} bytes (${size - body.length} of headers + ${body.length} of body) ` +
        `exceeds the server's max_payload of ${maxPayload} bytes, which counts headers and body`);
    }
    this.answered = true;
    this.send("FINISHED", hdrs, body);
  }
  // fail answers FAILED (TIMEOUT for the code TIMEOUT) with a {"code","message"} body.
  fail(code, message, extra = {}) {
    if (this.answered) return;
    this.answered = true;
    this.error = `${code}: ${message}`;
    this.release();
    const ct = this.contentType === MSGPACK_CT ? MSGPACK_CT : JSON_CT;
    this.send(code === "TIMEOUT" ? "TIMEOUT" : "FAILED",
      { "Reach-Error": code, "Content-Type": ct, "Reach-Active": String(active), ...extra },
      encode(ct, { code, message }));
  }
  // input decodes {"ms", "every_ms"}; a payload that does not fit is BAD_REQUEST.
  input() {
    let v;
    try { v = decode(this.contentType, this.data) ?? {}; } catch (e) {
      this.fail("BAD_REQUEST", `${this.capability} payload: ${e.message}`);
      return null;
    }
    const ms = v.ms ?? 0, every = v.every_ms ?? 0;
    if (typeof v !== "object" || Array.isArray(v) || !Number.isInteger(ms) || !Number.isInteger(every) || ms < 0 || every < 0) {
      this.fail("BAD_REQUEST", `${this.capability} payload: want {"ms": N, "every_ms": M}, non-negative integers`);
      return null;
    }
    return { ms, every };
  }
  // sleep waits ms, or until the task is cancelled; it reports whether ms passed.
  sleep(ms) {
    return new Promise((resolve) => {
      const timer = setTimeout(() => resolve(true), ms);
      this.abort.signal.addEventListener("abort", () => { clearTimeout(timer); resolve(false); }, { once: true });
    });
  }
}

function contentType(header, body) {
  if (header) return header.split(";")[0].trim().toLowerCase();
  const text = Buffer.from(body).toString("utf8");
  if (!text.trim()) return JSON_CT;
  try { JSON.parse(text); return JSON_CT; } catch { return MSGPACK_CT; }
}
function encode(ct, v) {
  return ct === MSGPACK_CT ? mpEncode(v) : new TextEncoder().encode(JSON.stringify(v));
}
function decode(ct, body) {
  if (!Buffer.from(body).toString("utf8").trim()) return null;
  return ct === MSGPACK_CT ? mpDecode(body) : JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(body));
}
// messageSize is what a message counts against max_payload: body plus header block.
function messageSize(hdrs, body) {
  let n = body.length + "NATS/1.0\r\n\r\n".length;
  for (const [k, v] of Object.entries(hdrs)) n += Buffer.byteLength(`${k}: ${v}\r\n`);
  return n;
}

// --- the capabilities ----------------------------------------------------
// echo answers the payload as it came. A caller that asked for a stream
// (Reach-Stream: 1) gets a JSON array's elements first, one CHUNK each
// (Reach-Seq 1, 2, …); the result then says how many (Reach-Chunks).
function echo(t) {
  let items = null;
  if (t.h("Reach-Stream") === "1" && t.contentType === JSON_CT) {
    try { items = decode(JSON_CT, t.data); } catch { items = null; }
  }
  if (!Array.isArray(items)) return t.finish(t.contentType, t.data);
  t.ack();
  items.forEach((it, i) => t.send("CHUNK", { "Reach-Seq": String(i + 1), "Content-Type": JSON_CT }, encode(JSON_CT, it)));
  t.finish(t.contentType, t.data, { "Reach-Chunks": String(items.length) });
}

async function slow(t) {
  const p = t.input();
  if (!p) return;
  t.ack();
  const tick = p.every > 0 ? setInterval(() => t.progress(), p.every) : null;
  const ok = await t.sleep(p.ms);
  if (tick) clearInterval(tick);
  if (ok) t.result({ slept_ms: p.ms }); // a cancelled delivery is not answered: nobody reads it
}

async function busy(t) {
  const p = t.input();
  if (!p) return;
  t.ack();
  if (await t.sleep(p.ms)) t.result({});
}

function execute(key) {
  executions.set(key, (executions.get(key) ?? 0) + 1);
  return { key, executions: executions.get(key) };
}

// write counts its executions per idempotency key, at most once per key.
async function write(t) {
  t.ack(); // a duplicate may wait for another execution
  const key = t.h("Reach-Idempotency-Key");
  if (!key) return t.result(execute(key));
  const bucketKey = idempotencyKey(t.capability, t.h("Reach-Source"), key);
  const claim = mpEncode({ state: "pending", owner: id, request_id: t.requestId });
  for (;;) {
    try {
      await outcomes.create(bucketKey, claim);
    } catch (e) {
      if (!/wrong last sequence|exists/i.test(e.message)) {
        return t.fail("TARGET_BUSY", `idempotency key ${JSON.stringify(key)}: claim: ${e.message}`); // nothing ran
      }
      const stored = await awaitOutcome(t, bucketKey);
      if (stored === "in-doubt") {
        return t.fail("INTERNAL", `idempotency key ${JSON.stringify(key)}: outcome in doubt: its owner left while executing it`, { "Reach-In-Doubt": "true" });
      }
      if (stored === "timeout") return t.fail("TIMEOUT", `waiting for another execution of idempotency key ${JSON.stringify(key)}`);
      if (stored instanceof Error) return t.fail("TARGET_BUSY", `idempotency key ${JSON.stringify(key)}: read the claim: ${stored.message}`);
      if (stored) {
        if (stored.error) return t.fail(stored.error.code, stored.error.message, { "Reach-Replayed": "true" });
        return t.finish(stored.content_type, stored.data, { "Reach-Replayed": "true" });
      }
      continue; // the claim was given back: claim it again
    }
    // Claimed: execute, store the outcome, then answer.
    const body = encode(t.contentType, execute(key));
    const done = mpEncode({ state: "done", owner: id, request_id: t.requestId, content_type: t.contentType, data: body, error: null, cost: "" });
    try { await outcomes.put(bucketKey, done); } catch (e) { log(`idempotency key ${key}: outcome not stored: ${e.message}`); }
    return t.finish(t.contentType, body);
  }
}

// awaitOutcome polls a claimed key with KV gets (every 20 ms, doubling up
// to every 250 ms: agents may create no consumer, so no watch) until its
// outcome is stored (returned), the claim is given back (null), its owner
// left ("in-doubt"), the deadline passes ("timeout") or the bucket cannot be
// read (the Error); every heartbeat it checks the owner and sends PROCESSING.
async function awaitOutcome(t, bucketKey) {
  let owner = "";
  let wait = 20;
  let nextCheck = Date.now() + heartbeatMs;
  for (;;) {
    const left = t.deadline - Date.now();
    if (left <= 0) return "timeout";
    await new Promise((r) => setTimeout(r, Math.min(wait, left)));
    try {
      if (Date.now() >= nextCheck) {
        nextCheck = Date.now() + heartbeatMs;
        t.progress();
        if (owner && owner !== id) {
          const rec = await agentsOnWork.get(owner);
          if (!rec || rec.operation !== "PUT") return "in-doubt"; // gone, deleted or expired
        }
      }
      const e = await outcomes.get(bucketKey);
      if (!e || e.operation !== "PUT") return null; // deleted or purged: given back
      const rec = mpDecode(e.value);
      if (rec.state === "done") return rec;
      owner = rec.owner;
    } catch (e) {
      return e instanceof Error ? e : new Error(String(e));
    }
    wait = Math.min(2 * wait, 250);
  }
}

// idempotencyKey is "<capability>.<caller>.<key>", the caller the
// delivery's Reach-Source ("=" without one); a caller or key that is not
// 1-128 of [-_=a-zA-Z0-9] is replaced by "sha256-" + hex of the first 16
// bytes of its SHA-256.
function idempotencyKey(capability, caller, key) {
  return `${capability}.${kvToken(caller || "=")}.${kvToken(key)}`;
}

function kvToken(s) {
  if (/^[-_=a-zA-Z0-9]{1,128}$/.test(s)) return s;
  return "sha256-" + createHash("sha256").update(s, "utf8").digest().subarray(0, 16).toString("hex");
}

// --- 5. NATS micro: the agent as a service of its type ---------------------
// $SRV.PING, $SRV.INFO and $SRV.STATS (and their .<name> and .<name>.<id>
// forms) answered from the agent's own counts: one endpoint per capability,
// '.' as '_', on the delivery subject, metadata {"capability": <name>}.
const microName = (s) => s.replaceAll(".", "_");
const microCounts = Object.fromEntries(capabilities.map((c) => [c, { n: 0, errors: 0, ns: 0, last: "" }]));
const microStarted = new Date().toISOString();
function counted(capability, ms, error) {
  const c = microCounts[capability];
  if (!c) return;
  c.n++;
  c.ns += Math.round(ms * 1e6);
  if (error) { c.errors++; c.last = error; }
}
function answerMicro(m) {
  const verb = m.subject.split(".")[1];
  if (!m.reply || !["PING", "INFO", "STATS"].includes(verb)) return;
  const subject = `${prefix}.agent.${id}`;
  const out = { name: microName(AGENT_TYPE), id, version: VERSION, metadata: { type: AGENT_TYPE },
    type: `io.nats.micro.v1.${verb.toLowerCase()}_response` };
  if (verb === "INFO") {
    out.description = `Agent-Reach agent type ${AGENT_TYPE}`;
    out.endpoints = capabilities.map((c) => ({ name: microName(c), subject, queue_group: "", metadata: { capability: c } }));
  } else if (verb === "STATS") {
    out.started = microStarted;
    out.endpoints = capabilities.map((c) => {
      const n = microCounts[c];
      return { name: microName(c), subject, queue_group: "", num_requests: n.n, num_errors: n.errors, last_error: n.last,
        processing_time: n.ns, average_processing_time: n.n ? Math.floor(n.ns / n.n) : 0 };
    });
  }
  m.respond(new TextEncoder().encode(JSON.stringify(out)));
}
function serveMicro() {
  const srv = `$SRV.*.${microName(AGENT_TYPE)}`;
  return ["$SRV.PING", "$SRV.INFO", "$SRV.STATS", srv, `${srv}.${id}`]
    .map((s) => nc.subscribe(s, { callback: (err, m) => { if (!err) answerMicro(m); } }));
}

// --- 4. leave --------------------------------------------------------------
async function drain() {
  log(`${id} draining`);
  draining = true;
  await put(); // no new task is routed here
  for (const s of microSubs) s.unsubscribe();
  await sub.drain(); // deliveries already queued are still served
  const all = Promise.allSettled([...running.values()].map((t) => t.done));
  const late = await Promise.race([all.then(() => false), new Promise((r) => setTimeout(() => r(true), DRAIN_TIMEOUT_MS))]);
  if (late) log(`${running.size} tasks still running after ${DRAIN_TIMEOUT_MS}ms, given up`);
  await nc.flush(); // every answer is out before the record goes
  clearInterval(beat);
  await putChain;
  await records.delete(id); // a delete, not a purge: we left on purpose
  await hc.close();
  await nc.close();
  log(`${id} drained`);
  return late ? 1 : 0;
}

let stopping = false;
for (const sig of ["SIGTERM", "SIGINT"]) {
  process.on(sig, () => {
    if (stopping) return;
    stopping = true;
    if (!beat) process.exit(0); // not registered yet: nothing to leave
    drain().then((code) => process.exit(code), (e) => { log("drain:", e.message); process.exit(1); });
  });
}

try {
  await start();
} catch (e) {
  log(`start (AGENTREACH_SERVER ${server}): ${e.message}`);
  process.exit(1);
}
