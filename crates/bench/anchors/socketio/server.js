// The anchor of `tidegate bench push --anchor socketio`: the stock npm
// socket.io server with the same subscribe / publish semantics as
// Tidegate's Socket.IO endpoint, so one client load can drive both.
//
//   subscribe(list | ...patterns, ack)  -> joins one room per topic;
//                                          ack {accepted, refused: []}
//   unsubscribe(list, ack)              -> leaves those rooms
//   publish(topic, payload, ack?)       -> io.to(topic).emit(topic, payload)
//
// Rooms are exact topics (the npm server has no wildcard matching); the
// bench only subscribes exact topics. Engine.IO settings match Tidegate's
// defaults. Prints "listening <port>" once it accepts connections.
//
// usage: node server.js [port] [host]
"use strict";
const http = require("http");
const { Server } = require("socket.io");

const port = Number(process.argv[2] || 0);
const host = process.argv[3] || "127.0.0.1";

const httpServer = http.createServer();
// The backlog matches a storm of a thousand connecting clients.
httpServer.maxConnections = 1 << 20;
const io = new Server(httpServer, {
  pingInterval: 25000,
  pingTimeout: 20000,
  maxHttpBufferSize: 1e6,
  perMessageDeflate: false,
  httpCompression: false,
  serveClient: false,
});

function patterns(args) {
  const out = [];
  for (const a of args) {
    if (typeof a === "string") out.push(a);
    else if (Array.isArray(a)) for (const x of a) if (typeof x === "string") out.push(x);
  }
  return out;
}

function split(args) {
  const ack = typeof args[args.length - 1] === "function" ? args.pop() : null;
  return [args, ack];
}

io.on("connection", (socket) => {
  socket.on("subscribe", (...raw) => {
    const [args, ack] = split(raw);
    const list = patterns(args);
    socket.join(list);
    if (ack) ack({ accepted: list, refused: [] });
  });
  socket.on("unsubscribe", (...raw) => {
    const [args, ack] = split(raw);
    const list = patterns(args);
    for (const t of list) socket.leave(t);
    if (ack) ack({ accepted: list, refused: [] });
  });
  socket.on("publish", (...raw) => {
    const [args, ack] = split(raw);
    const [topic, payload] = args;
    if (typeof topic !== "string") {
      if (ack) ack({ ok: false, reason: "publish(topic, payload): topic must be a string" });
      return;
    }
    io.to(topic).emit(topic, payload);
    if (ack) ack({ ok: true });
  });
});

httpServer.listen(port, host, 1 << 16, () => {
  process.stdout.write(`listening ${httpServer.address().port}\n`);
});
process.on("SIGTERM", () => process.exit(0));
process.on("SIGINT", () => process.exit(0));
