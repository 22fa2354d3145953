// A stock socket.io-client subscriber for crates/tidegate/tests/cluster.rs:
// connects over websocket, subscribes to a pattern, prints READY, then one
// JSON line per event ({event, payload}) until stdin closes or 120 s pass.
// socket.io-client comes from crates/push/tests/js (scripts/setup/push.sh);
// the test sets NODE_PATH to it.
// Usage: node cluster_subscriber.js <base url> <pattern>
"use strict";
const { io } = require("socket.io-client");

const [base, pattern] = process.argv.slice(2);
const s = io(base, { transports: ["websocket"], reconnection: false });
const bye = (code) => {
  s.close();
  process.exit(code);
};
setTimeout(() => bye(0), 120000).unref();
process.stdin.on("end", () => bye(0));
process.stdin.resume();
s.on("connect_error", (e) => {
  console.log(JSON.stringify({ error: `connect_error ${e.message}` }));
  bye(1);
});
s.onAny((event, payload) => console.log(JSON.stringify({ event, payload })));
s.on("connect", async () => {
  const sub = await s.emitWithAck("subscribe", [pattern]);
  if (sub.accepted.length !== 1) {
    console.log(JSON.stringify({ error: `subscribe ${JSON.stringify(sub)}` }));
    bye(1);
  }
  console.log("READY");
});
