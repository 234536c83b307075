// Unit tests of the session's behaviour, against a scripted fetch and Node's mocked timers.
// Run with `npm test` (node --test) after `npm run build`.

import assert from "node:assert/strict";
import { afterEach, beforeEach, mock, test } from "node:test";

import { ScreenlimitError, backoff, jittered, startStream } from "../dist/index.js";

const BASE = "http://limiter.test";

/** A fetch that answers from `script(call)` and records every call. */
function scriptedFetch(script) {
  const calls = [];
  const fetch = async (url, init) => {
    const call = {
      url,
      method: init.method,
      body: init.body ? JSON.parse(init.body) : undefined,
      keepalive: init.keepalive,
      headers: init.headers,
    };
    calls.push(call);
    const answer = script(call, calls);
    if (answer === "network-error") throw new TypeError("failed to fetch");
    const { status, body, headers = {} } = answer;
    return {
      status,
      headers: { get: (name) => headers[name.toLowerCase()] ?? null },
      json: async () => body,
    };
  };
  return { fetch, calls };
}

const granted = (id, extra = {}) => ({
  status: 200,
  body: {
    stream_id: id,
    lease_ttl_sec: 90,
    heartbeat_interval_sec: 30,
    limit: 2,
    active_count: 1,
    degraded: false,
    ...extra,
  },
});
const ok = (extra = {}) => ({ status: 200, body: { ok: true, lease_ttl_sec: 90, degraded: false, ...extra } });
const gone = (error) => ({ status: 410, body: { error, message: error, action: error === "stream_revoked" ? "stop" : "re_acquire" } });

/** Lets the promises started by a timer settle. */
const settle = () => new Promise((resolve) => setImmediate(resolve));

async function advance(ms) {
  mock.timers.tick(ms);
  for (let i = 0; i < 5; i++) await settle();
}

/** A page: a window and a document whose visibility the test sets. */
function fakePage() {
  const listeners = new Map();
  const target = {
    addEventListener: (name, fn) => listeners.set(name, fn),
    removeEventListener: (name) => listeners.delete(name),
  };
  const document = { ...target, visibilityState: "visible" };
  return {
    hooks: { window: target, document },
    fire(name, event = {}) {
      listeners.get(name)?.(event);
    },
    set visibility(state) {
      document.visibilityState = state;
    },
  };
}

beforeEach(() => mock.timers.enable({ apis: ["setTimeout"] }));
afterEach(() => mock.timers.reset());

function options(fetch, extra = {}) {
  return {
    baseUrl: BASE,
    token: "player-token",
    accountId: "acct-1",
    deviceId: "tv-1",
    deviceMeta: "Living Room TV",
    fetch,
    random: () => 0.5,
    pageHooks: null,
    ...extra,
  };
}

test("the jitter spreads each wait within ± the fraction, and backoff doubles up to its cap", () => {
  assert.equal(jittered(30_000, 0.1, () => 0), 27_000);
  assert.equal(jittered(30_000, 0.1, () => 1), 33_000);
  assert.equal(jittered(30_000, 0.1, () => 0.5), 30_000);
  assert.equal(backoff(0, 1_000, 30_000, () => 1), 1_000);
  assert.equal(backoff(3, 1_000, 30_000, () => 1), 8_000);
  assert.equal(backoff(10, 1_000, 30_000, () => 1), 30_000);
  assert.equal(backoff(10, 1_000, 30_000, () => 0), 15_000);
  assert.equal(backoff(0, 1_000, 30_000, () => 0, 5_000), 5_000, "never under Retry-After");
});

test("a play heartbeats every interval (± jitter) with the token, the account and the encoded stream id", async () => {
  const { fetch, calls } = scriptedFetch((call) => (call.method === "POST" ? granted("s/1") : ok()));
  const session = await startStream(options(fetch, { random: () => 0 }));
  assert.equal(session.state, "playing");
  assert.deepEqual(calls[0].body, { account_id: "acct-1", device_id: "tv-1", device_meta: "Living Room TV" });
  assert.equal(calls[0].headers.authorization, "Bearer player-token");
  await advance(26_999);
  assert.equal(calls.length, 1, "not before interval × (1 − jitter)");
  await advance(1);
  assert.equal(calls.length, 2);
  assert.equal(calls[1].method, "PUT");
  assert.equal(calls[1].url, `${BASE}/v1/streams/s%2F1/heartbeat`);
  assert.deepEqual(calls[1].body, { account_id: "acct-1" });
  await advance(27_000);
  assert.equal(calls.length, 3, "and again");
  await session.stop();
});

test("stream_revoked stops the session and fires revoked; no heartbeat follows", async () => {
  const { fetch, calls } = scriptedFetch((call) => (call.method === "POST" ? granted("s1") : gone("stream_revoked")));
  const session = await startStream(options(fetch));
  const revoked = [];
  session.on("revoked", (e) => revoked.push(e));
  await advance(30_000);
  assert.equal(session.state, "revoked");
  assert.equal(revoked.length, 1);
  assert.equal(revoked[0].streamId, "s1");
  await advance(300_000);
  assert.equal(calls.length, 2, "nothing after the revocation");
});

test("lease_expired plays again and heartbeats the new stream", async () => {
  let plays = 0;
  const { fetch, calls } = scriptedFetch((call) => {
    if (call.method === "POST") return granted(`s${++plays}`);
    return call.url.includes("/s1/") ? gone("lease_expired") : ok();
  });
  const session = await startStream(options(fetch));
  const expired = [];
  session.on("expired", (e) => expired.push(e));
  await advance(30_000);
  assert.deepEqual(expired, [{ reacquired: true }]);
  assert.equal(session.streamId, "s2");
  await advance(30_000);
  assert.equal(calls.at(-1).url, `${BASE}/v1/streams/s2/heartbeat`);
  await session.stop();
});

test("a 409 lists the devices and takeOver plays with replace_stream_id", async () => {
  const active = [{ stream_id: "other", device_id: "phone", device_meta: "Phone" }];
  const { fetch, calls } = scriptedFetch((call) => {
    if (call.body.replace_stream_id) return granted("mine");
    return { status: 409, body: { error: "concurrent_stream_limit", message: "full", limit: 1, rule: "max_streams", active } };
  });
  const denied = [];
  const session = await startStream(options(fetch, { on: { denied: (e) => denied.push(e) } }));
  assert.equal(session.state, "denied");
  assert.deepEqual(denied[0].active, active);
  assert.deepEqual(session.denial.active, active);
  assert.equal(await session.takeOver("other"), "playing");
  assert.equal(calls[1].body.replace_stream_id, "other");
  assert.equal(session.streamId, "mine");
  await session.stop();
});

test("a 503 or no answer is degraded: retries sooner with backoff, keeps playing, then recovers", async () => {
  let heartbeats = 0;
  const { fetch, calls } = scriptedFetch((call) => {
    if (call.method === "POST") return granted("s1");
    heartbeats++;
    if (heartbeats === 1) return { status: 503, body: { error: "store_unavailable", message: "down" }, headers: { "retry-after": "1" } };
    if (heartbeats === 2) return "network-error";
    return ok();
  });
  const events = [];
  const session = await startStream(options(fetch, { random: () => 1 }));
  for (const name of ["degraded", "recovered", "error"]) session.on(name, (e) => events.push([name, e]));
  await advance(33_000);
  assert.equal(heartbeats, 1);
  assert.deepEqual(events, [["degraded", { reason: "unavailable", status: 503 }]]);
  assert.equal(session.state, "playing", "the viewer keeps watching");
  await advance(1_000);
  assert.equal(heartbeats, 2, "first retry after 1 s");
  await advance(1_999);
  assert.equal(heartbeats, 2, "the next waits twice as long");
  await advance(1);
  assert.equal(heartbeats, 3);
  assert.deepEqual(events.at(-1), ["recovered", {}]);
  await session.stop();
  assert.equal(calls.at(-1).method, "DELETE");
});

test("an answer degraded by the store fires degraded once and keeps the interval", async () => {
  const { fetch, calls } = scriptedFetch((call) => (call.method === "POST" ? granted("s1", { degraded: true }) : ok({ degraded: true })));
  const degraded = [];
  const session = await startStream(options(fetch, { on: { degraded: (e) => degraded.push(e) } }));
  await advance(30_000);
  await advance(30_000);
  assert.equal(calls.length, 3);
  assert.deepEqual(degraded, [{ reason: "store_degraded", status: 200 }]);
  await session.stop();
});

test("stop releases the slot once and ends the heartbeats", async () => {
  const { fetch, calls } = scriptedFetch((call) => (call.method === "POST" ? granted("s1") : ok()));
  const session = await startStream(options(fetch));
  await session.stop();
  await session.stop();
  assert.deepEqual(
    calls.map((c) => [c.method, c.url]),
    [
      ["POST", `${BASE}/v1/streams`],
      ["DELETE", `${BASE}/v1/streams/s1`],
    ],
  );
  assert.deepEqual(calls[1].body, { account_id: "acct-1" });
  await advance(120_000);
  assert.equal(calls.length, 2);
});

test("a page hidden past its grace period releases with keepalive, and plays again when shown", async () => {
  let plays = 0;
  const { fetch, calls } = scriptedFetch((call) => (call.method === "POST" ? granted(`s${++plays}`) : ok()));
  const page = fakePage();
  const session = await startStream(options(fetch, { pageHooks: page.hooks, backgroundGraceMs: 5_000 }));
  page.visibility = "hidden";
  page.fire("visibilitychange");
  await advance(4_000);
  page.visibility = "visible";
  page.fire("visibilitychange");
  await advance(2_000);
  assert.equal(calls.length, 1, "shown again within the grace: nothing released");
  page.visibility = "hidden";
  page.fire("visibilitychange");
  await advance(5_000);
  assert.equal(session.state, "released");
  assert.deepEqual([calls[1].method, calls[1].url, calls[1].keepalive], ["DELETE", `${BASE}/v1/streams/s1`, true]);
  page.visibility = "visible";
  page.fire("visibilitychange");
  await advance(0);
  assert.equal(session.state, "playing");
  assert.equal(session.streamId, "s2");
  await session.stop();
});

test("pagehide releases at once with keepalive", async () => {
  const { fetch, calls } = scriptedFetch((call) => (call.method === "POST" ? granted("s1") : ok()));
  const page = fakePage();
  const session = await startStream(options(fetch, { pageHooks: page.hooks }));
  page.fire("pagehide", { persisted: false });
  await advance(0);
  assert.equal(session.state, "released");
  assert.equal(calls[1].method, "DELETE");
  assert.equal(calls[1].keepalive, true);
  await advance(60_000);
  assert.equal(calls.length, 2, "no heartbeat after the page left");
});

test("a refused token rejects the start with its code; a play-start 503 is retried first", async () => {
  const refused = scriptedFetch(() => ({ status: 401, body: { error: "token_expired", message: "expired", reason: "expired" } }));
  await assert.rejects(startStream(options(refused.fetch)), (error) => {
    assert.ok(error instanceof ScreenlimitError);
    assert.equal(error.status, 401);
    assert.equal(error.code, "token_expired");
    return true;
  });
  let tries = 0;
  const busy = scriptedFetch(() => (++tries < 3 ? { status: 503, body: { error: "overloaded", message: "busy" } } : granted("s1")));
  const starting = startStream(options(busy.fetch, { random: () => 1 }));
  await advance(0);
  await advance(1_000);
  await advance(2_000);
  const session = await starting;
  assert.equal(tries, 3);
  assert.equal(session.state, "playing");
  await session.stop();
});

test("a token function is asked before every call", async () => {
  let n = 0;
  const { fetch, calls } = scriptedFetch((call) => (call.method === "POST" ? granted("s1") : ok()));
  const session = await startStream(options(fetch, { token: async () => `t${++n}` }));
  await advance(30_000);
  assert.deepEqual(
    calls.map((c) => c.headers.authorization),
    ["Bearer t1", "Bearer t2"],
  );
  await session.stop();
});
