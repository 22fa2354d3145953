// The subscribers of scripts/chaos.sh: SESSIONS stock socket.io-client
// sessions (websocket) subscribed to PATTERNS. Session k starts on node
// k % N of URLS; when its connection drops it reconnects to the next node
// (a client behind a balancer that lost its node), with Socket.IO's own
// reconnection: the reconnect carries the session's pid and last offset,
// so the nodes' connection state recovery (`[push] recovery_window_ms`)
// can recover it there. A recovered session keeps its subscriptions; one
// that is not subscribes again. Output lines (stdout, one per line):
//   C <session> <epoch ms> <url> <recovered|fresh>   connected (and subscribed)
//   D <session> <epoch ms> <reason>                  lost its connection
//   E <session> <event> <payload>                    an event (payload as JSON)
// Runs until SIGTERM. NODE_PATH must reach socket.io-client
// (crates/push/tests/js/node_modules, scripts/setup/push.sh).
// Usage: node subscriber.js URLS SESSIONS PATTERN...
"use strict";
const { io } = require("socket.io-client");

const [urlList, sessionsArg, ...patterns] = process.argv.slice(2);
const urls = urlList.split(",");
const sessions = Number(sessionsArg);
const out = (line) => process.stdout.write(line + "\n");

function session(k) {
  let turn = k;
  const url = () => urls[turn % urls.length];
  const s = io(url(), {
    transports: ["websocket"],
    forceNew: true,
    timeout: 3000,
    reconnectionDelay: 200,
    reconnectionDelayMax: 1000,
    randomizationFactor: 0,
  });
  // The manager opens its next connection to `uri`: the next node.
  const next = () => {
    turn += 1;
    s.io.uri = url();
  };
  s.on("disconnect", (reason) => {
    out(`D ${k} ${Date.now()} ${reason}`);
    next();
    // A server-side disconnect is not retried by the client on its own.
    if (reason === "io server disconnect") s.connect();
  });
  s.io.on("reconnect_error", () => next());
  s.onAny((event, payload) => out(`E ${k} ${event} ${JSON.stringify(payload)}`));
  s.on("connect", () => {
    if (s.recovered) {
      out(`C ${k} ${Date.now()} ${url()} recovered`);
      return;
    }
    s.timeout(3000).emit("subscribe", patterns, (err, sub) => {
      if (err || !sub || sub.accepted.length !== patterns.length) {
        out(`D ${k} ${Date.now()} subscribe ${err ? err.message : JSON.stringify(sub)}`);
        s.disconnect();
        next();
        setTimeout(() => s.connect(), 200);
        return;
      }
      out(`C ${k} ${Date.now()} ${url()} fresh`);
    });
  });
}

for (let k = 0; k < sessions; k++) session(k);
process.on("SIGTERM", () => process.exit(0));
