// A stock socket.io-client that recovers its session, for
// crates/tidegate/tests/cluster.rs: connects over websocket (reconnecting
// on its own when the connection drops), subscribes to a pattern on its
// first connect, prints READY, then one JSON line per connect
// ({connect, recovered}) and per event ({event, payload, offset}) until
// stdin closes or 120 s pass. It never subscribes again: what it receives
// after a reconnect comes from the recovered session only.
// socket.io-client comes from crates/push/tests/js (scripts/setup/push.sh);
// the test sets NODE_PATH to it.
// Usage: node cluster_recovering_subscriber.js <base url> <pattern>
"use strict";
const { io } = require("socket.io-client");

const [base, pattern] = process.argv.slice(2);
const s = io(base, {
  transports: ["websocket"],
  reconnectionDelay: 100,
  reconnectionDelayMax: 500,
  timeout: 5000,
});
const bye = (code) => {
  s.close();
  process.exit(code);
};
setTimeout(() => bye(0), 120000).unref();
process.stdin.on("end", () => bye(0));
process.stdin.resume();
let first = true;
s.onAny((event, payload, offset) => console.log(JSON.stringify({ event, payload, offset })));
s.on("connect", async () => {
  console.log(JSON.stringify({ connect: true, recovered: s.recovered }));
  if (!first) return;
  first = false;
  const sub = await s.emitWithAck("subscribe", [pattern]);
  if (sub.accepted.length !== 1) {
    console.log(JSON.stringify({ error: `subscribe ${JSON.stringify(sub)}` }));
    bye(1);
  }
  console.log("READY");
});
