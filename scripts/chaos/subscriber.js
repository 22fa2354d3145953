// The subscribers of scripts/chaos.sh: SESSIONS stock socket.io-client
// sessions (websocket) subscribed to PATTERNS. Session k starts on node
// k % N of URLS; when its connection drops it goes on at the next node (a
// client behind a balancer that lost its node). Socket.IO's own
// reconnection stays off: each move is a fresh connection that subscribes
// again. Output lines (stdout, one per line):
//   C <session> <epoch ms> <url>       connected and subscribed
//   D <session> <epoch ms> <reason>    lost its connection
//   E <session> <event> <payload>      an event (payload as JSON)
// Runs until SIGTERM. NODE_PATH must reach socket.io-client
// (crates/push/tests/js/node_modules, scripts/setup/push.sh).
// Usage: node subscriber.js URLS SESSIONS PATTERN...
"use strict";
const { io } = require("socket.io-client");

const [urlList, sessionsArg, ...patterns] = process.argv.slice(2);
const urls = urlList.split(",");
const sessions = Number(sessionsArg);
const out = (line) => process.stdout.write(line + "\n");

function session(k, turn) {
  const url = urls[turn % urls.length];
  const s = io(url, { transports: ["websocket"], reconnection: false, forceNew: true, timeout: 3000 });
  let moved = false;
  const move = (reason) => {
    if (moved) return;
    moved = true;
    out(`D ${k} ${Date.now()} ${reason}`);
    s.close();
    setTimeout(() => session(k, turn + 1), 200);
  };
  s.on("connect_error", (e) => move(`connect_error ${e.message}`));
  s.on("disconnect", (r) => move(`disconnect ${r}`));
  s.onAny((event, payload) => out(`E ${k} ${event} ${JSON.stringify(payload)}`));
  s.on("connect", () => {
    s.timeout(3000).emit("subscribe", patterns, (err, sub) => {
      if (err || !sub || sub.accepted.length !== patterns.length) {
        move(`subscribe ${err ? err.message : JSON.stringify(sub)}`);
        return;
      }
      out(`C ${k} ${Date.now()} ${url}`);
    });
  });
}

for (let k = 0; k < sessions; k++) session(k, k);
process.on("SIGTERM", () => process.exit(0));
