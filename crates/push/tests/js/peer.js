// Drives Tidegate push with the stock npm clients; run by crates/push's
// Rust tests. Usage: node peer.js <scenario> <base url> [args…]
// Prints one JSON line per result and exits 0 on success, 1 on failure.
"use strict";
const { io } = require("socket.io-client");
const { Socket: EioSocket } = require("engine.io-client");

const [scenario, base, ...args] = process.argv.slice(2);
const fail = (why) => {
  console.log(JSON.stringify({ ok: false, why: String(why) }));
  process.exit(1);
};
setTimeout(() => fail("timed out"), 20000).unref();

// socket.io-client: connect (with auth) over the given transports,
// subscribe, publish JSON, text and binary, receive each as an event named
// after its topic; report the transport in use at the end.
function socketio(transports, expectTransport) {
  const topic = `t.${expectTransport}.${process.pid}`;
  const s = io(base, { transports, auth: { token: "abc" }, reconnection: false });
  const got = [];
  s.on("connect_error", (e) => fail(`connect_error ${e.message}`));
  s.onAny((event, payload) => got.push([event, payload]));
  s.on("connect", async () => {
    const sub = await s.emitWithAck("subscribe", [`t.${expectTransport}.>`, "bad..x"]);
    if (sub.accepted.length !== 1 || sub.refused[0].pattern !== "bad..x") fail(`subscribe ack ${JSON.stringify(sub)}`);
    // Wait for the upgrade when one is expected, so delivery crosses it.
    if (expectTransport === "websocket" && s.io.engine.transport.name !== "websocket") {
      await new Promise((r) => s.io.engine.once("upgrade", r));
    }
    const a = await s.emitWithAck("publish", topic, { n: 1 });
    if (!a.ok) fail(`publish ack ${JSON.stringify(a)}`);
    await s.emitWithAck("publish", topic, "plain text");
    await s.emitWithAck("publish", topic, Buffer.from([0xff, 0, 1]));
    const deadline = Date.now() + 5000;
    while (got.length < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 20));
    const [j, t, b] = got;
    if (!j || j[0] !== topic || j[1].n !== 1) fail(`json event ${JSON.stringify(got)}`);
    if (!t || t[1] !== "plain text") fail(`text event ${JSON.stringify(t)}`);
    if (!b || !Buffer.isBuffer(b[1]) || !b[1].equals(Buffer.from([0xff, 0, 1]))) fail(`binary event ${JSON.stringify(b)}`);
    const un = await s.emitWithAck("unsubscribe", [`t.${expectTransport}.>`]);
    if (un.accepted.length !== 1) fail(`unsubscribe ${JSON.stringify(un)}`);
    const transport = s.io.engine.transport.name;
    if (transport !== expectTransport) fail(`transport ${transport}, expected ${expectTransport}`);
    // An unknown namespace is refused with CONNECT_ERROR.
    const other = io(`${base}/nope`, { transports, reconnection: false });
    other.on("connect", () => fail("connected to an unknown namespace"));
    other.on("connect_error", (e) => {
      console.log(JSON.stringify({ ok: true, transport, events: got.length, nsp_error: e.message }));
      other.close();
      s.close();
      process.exit(0);
    });
  });
}

// engine.io-client on /engine.io/ (the JSON protocol inside messages).
function engineio(transports) {
  const s = new EioSocket(base, { transports });
  const topic = `e.${process.pid}`;
  s.on("error", (e) => fail(`error ${e}`));
  const start = () => s.send(JSON.stringify({ op: "subscribe", id: 1, patterns: [topic] }));
  // With an upgrade to come, start once it happened: otherwise, on a busy
  // machine, the whole exchange can finish over polling first.
  if (transports.length > 1) s.on("upgrade", start);
  else s.on("open", start);
  s.on("message", (m) => {
    const v = JSON.parse(m);
    if (v.op === "subscribed") s.send(JSON.stringify({ op: "publish", id: 2, topic, payload: { hi: 1 } }));
    if (v.op === "message") {
      if (v.topic !== topic || v.payload.hi !== 1) fail(`message ${m}`);
      console.log(JSON.stringify({ ok: true, transport: s.transport.name }));
      s.close();
      process.exit(0);
    }
  });
}

// Subscribes to a pattern, prints READY, then prints each event; exits
// after `count` events.
function subscriber(pattern, count) {
  const s = io(base, { transports: ["websocket"], reconnection: false });
  let n = 0;
  s.on("connect_error", (e) => fail(`connect_error ${e.message}`));
  s.onAny((event, payload) => {
    console.log(JSON.stringify({ event, payload }));
    if (++n >= Number(count)) {
      s.close();
      process.exit(0);
    }
  });
  s.on("connect", async () => {
    const sub = await s.emitWithAck("subscribe", [pattern]);
    if (sub.accepted.length !== 1) fail(`subscribe ${JSON.stringify(sub)}`);
    console.log("READY");
  });
}

// `[push] conformance = true`: the reference test servers' behaviour.
function conformance() {
  const s = io(base, { auth: { hello: "there" }, reconnection: false });
  s.on("connect_error", (e) => fail(`connect_error ${e.message}`));
  const auth = new Promise((r) => s.on("auth", r));
  const back = new Promise((r) => s.on("message-back", (...a) => r(a)));
  s.on("connect", async () => {
    const a = await auth;
    if (a.hello !== "there") fail(`auth ${JSON.stringify(a)}`);
    s.emit("message", 1, "2", Buffer.from([3]));
    const b = await back;
    if (b[0] !== 1 || b[1] !== "2" || !Buffer.from(b[2]).equals(Buffer.from([3]))) fail(`message-back ${JSON.stringify(b)}`);
    const acked = await s.emitWithAck("message-with-ack", 4, { five: 5 });
    if (acked !== 4) fail(`message-with-ack ${JSON.stringify(acked)}`);
    const custom = io(`${base}/custom`, { reconnection: false });
    custom.on("connect_error", (e) => fail(`/custom ${e.message}`));
    custom.on("connect", () => {
      const e = new EioSocket(base, { transports: ["websocket"] });
      e.on("open", () => e.send("echo me"));
      e.on("message", (m) => {
        if (m !== "echo me") fail(`echo ${m}`);
        console.log(JSON.stringify({ ok: true }));
        process.exit(0);
      });
    });
  });
}

// Connection state recovery: subscribe, receive 3 events, drop the
// connection (the engine closes under the socket, as socket.io's own
// recovery tests do), have `missed` messages published meanwhile (after
// `pause` ms), reconnect, publish 2 more. Prints whether the socket
// recovered and every event number received, in order, with its offset.
async function recovery(transport, missed, pause) {
  const s = io(base, { transports: [transport], reconnection: false });
  const got = [];
  const offsets = [];
  s.on("connect_error", (e) => fail(`connect_error ${e.message}`));
  s.on("r.x", (payload, offset) => {
    got.push(payload.n);
    offsets.push(offset);
  });
  const connected = () => new Promise((r) => s.once("connect", r));
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const until = async (cond) => {
    const deadline = Date.now() + 5000;
    while (!cond() && Date.now() < deadline) await sleep(10);
  };
  let n = 0;
  const publish = async () => {
    n += 1;
    const r = await fetch(`${base}/v1/publish?topic=r.x`, { method: "POST", body: JSON.stringify({ n }) });
    if (!r.ok) fail(`publish ${r.status}`);
  };
  await connected();
  if (s.recovered) fail("recovered on the first connect");
  const sub = await s.emitWithAck("subscribe", ["r.>"]);
  if (sub.accepted.length !== 1) fail(`subscribe ${JSON.stringify(sub)}`);
  for (let i = 0; i < 3; i++) await publish();
  await until(() => got.length >= 3);
  const gone = new Promise((r) => s.once("disconnect", r));
  s.io.engine.close();
  const reason = await gone;
  for (let i = 0; i < Number(missed); i++) await publish();
  await sleep(Number(pause));
  s.connect();
  await connected();
  const recovered = s.recovered;
  if (!recovered) {
    // A clean start: nothing subscribed; subscribe again to go on.
    await s.emitWithAck("subscribe", ["r.>"]);
  }
  for (let i = 0; i < 2; i++) await publish();
  await until(() => got.length >= (recovered ? n : 5));
  await sleep(200); // anything extra (a duplicate) would arrive by now
  console.log(JSON.stringify({ ok: true, recovered, reason, transport: s.io.engine.transport.name, got, offsets }));
  s.close();
  process.exit(0);
}

// Recovery with two namespaces on one connection: "/" subscribed to r.>,
// "/n" to q.>; the engine drops, both topics get messages meanwhile, both
// sockets reconnect and each must get its own missed events, once, in order.
async function recoveryNamespaces() {
  const opts = { transports: ["websocket"], reconnection: false };
  const a = io(base, opts);
  const b = io(`${base}/n`, opts);
  const got = { r: [], q: [] };
  a.on("r.x", (p) => got.r.push(p.n));
  b.on("q.x", (p) => got.q.push(p.n));
  for (const s of [a, b]) s.on("connect_error", (e) => fail(`connect_error ${e.message}`));
  const connected = (s) => new Promise((r) => (s.connected ? r() : s.once("connect", r)));
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
  const until = async (cond) => {
    const deadline = Date.now() + 5000;
    while (!cond() && Date.now() < deadline) await sleep(10);
  };
  const publish = async (topic, n) => {
    const r = await fetch(`${base}/v1/publish?topic=${topic}`, { method: "POST", body: JSON.stringify({ n }) });
    if (!r.ok) fail(`publish ${r.status}`);
  };
  await Promise.all([connected(a), connected(b)]);
  await a.emitWithAck("subscribe", ["r.>"]);
  await b.emitWithAck("subscribe", ["q.>"]);
  for (const n of [1, 2]) { await publish("r.x", n); await publish("q.x", n); }
  await until(() => got.r.length >= 2 && got.q.length >= 2);
  const gone = Promise.all([a, b].map((s) => new Promise((r) => s.once("disconnect", r))));
  a.io.engine.close();
  await gone;
  for (const n of [3, 4]) { await publish("r.x", n); await publish("q.x", n); }
  a.connect();
  b.connect();
  await Promise.all([connected(a), connected(b)]);
  await publish("r.x", 5);
  await publish("q.x", 5);
  await until(() => got.r.length >= 5 && got.q.length >= 5);
  await sleep(200);
  console.log(JSON.stringify({ ok: true, recovered: [a.recovered, b.recovered], got }));
  a.close();
  b.close();
  process.exit(0);
}

switch (scenario) {
  case "recovery-namespaces": recoveryNamespaces(); break;
  case "recovery": recovery(args[0], args[1] || 5, args[2] || 0); break;
  case "conformance": conformance(); break;
  case "socketio-polling": socketio(["polling"], "polling"); break;
  case "socketio-websocket": socketio(["websocket"], "websocket"); break;
  case "socketio-upgrade": socketio(["polling", "websocket"], "websocket"); break;
  case "engineio-polling": engineio(["polling"]); break;
  case "engineio-websocket": engineio(["websocket"]); break;
  case "engineio-upgrade": engineio(["polling", "websocket"]); break;
  case "subscriber": subscriber(args[0], args[1] || 1); break;
  default: fail(`unknown scenario ${scenario}`);
}
