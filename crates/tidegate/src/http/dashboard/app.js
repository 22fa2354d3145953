// Tidegate's live dashboard. Two plain WebSockets to this server's /ws
// (the JSON protocol of docs/push.md): one subscribed to $sys.stats, which
// the hub publishes once a second, feeding the tiles, tables and charts;
// one for the topic inspector. No library: canvas charts drawn by hand.
// Everything a client sent is shown with textContent, never as HTML.
"use strict";

(function () {
  const HISTORY = 120; // points per chart: two minutes at one report a second
  const MAX_ROWS = 200; // inspector rows kept
  const PREVIEW = 512; // payload characters shown per row
  const STABLE_MS = 5000; // open this long, a connection counts as working
  const COLORS = ["#4cc2ff", "#ffb347", "#7bd88f", "#ff6b8b", "#c39bff", "#f7e463"];

  const $ = (id) => document.getElementById(id);

  // ?token=… on the page is passed to /ws (for [push] auth = "jwt").
  function wsUrl() {
    const scheme = location.protocol === "https:" ? "wss://" : "ws://";
    const token = new URLSearchParams(location.search).get("token");
    return scheme + location.host + "/ws" + (token ? "?token=" + encodeURIComponent(token) : "");
  }

  // A WebSocket that reconnects (1 s, doubling to 10 s) and replays
  // `onOpen` each time, so subscriptions come back after a restart. The
  // delay goes back to 1 s only once a connection has proved to work — its
  // handler calls `healthy()` (passed to `onFrame`) on what it asked for,
  // or it stays open STABLE_MS —, not on every open: a server that accepts
  // and closes at once would otherwise be asked again every second forever.
  function connect(handlers) {
    let delay = 1000;
    let ws = null;
    let stable = null;
    const healthy = () => {
      clearTimeout(stable);
      delay = 1000;
    };
    function open() {
      ws = new WebSocket(wsUrl());
      ws.binaryType = "arraybuffer";
      ws.onopen = () => {
        stable = setTimeout(healthy, STABLE_MS);
        handlers.onState(true);
        handlers.onOpen(ws);
      };
      ws.onmessage = (ev) => handlers.onFrame(ev.data, healthy);
      ws.onclose = (ev) => {
        clearTimeout(stable);
        handlers.onState(false, ev.reason);
        setTimeout(open, delay);
        delay = Math.min(delay * 2, 10000);
      };
    }
    open();
    return { send: (obj) => ws && ws.readyState === 1 && ws.send(JSON.stringify(obj)) };
  }

  // ---- formatting ---------------------------------------------------------

  function num(v) {
    if (v === null || v === undefined) return "–";
    const a = Math.abs(v);
    if (a >= 1e9) return (v / 1e9).toFixed(2) + "G";
    if (a >= 1e6) return (v / 1e6).toFixed(2) + "M";
    if (a >= 1e4) return (v / 1e3).toFixed(1) + "k";
    if (Number.isInteger(v)) return String(v);
    return v.toFixed(a < 10 ? 2 : 1);
  }
  function bytes(v) {
    if (v === null || v === undefined) return "–";
    const u = ["B", "KiB", "MiB", "GiB", "TiB"];
    let i = 0;
    while (v >= 1024 && i < u.length - 1) { v /= 1024; i++; }
    return (i ? v.toFixed(1) : String(Math.round(v))) + " " + u[i];
  }
  function ms(us) {
    if (us === null || us === undefined) return "–";
    return us < 1000 ? (us / 1000).toFixed(3) + " ms" : num(us / 1000) + " ms";
  }
  function duration(s) {
    const d = Math.floor(s / 86400), h = Math.floor(s / 3600) % 24, m = Math.floor(s / 60) % 60;
    return (d ? d + "d " : "") + (d || h ? h + "h " : "") + (d || h || m ? m + "m " : "") + (s % 60) + "s";
  }

  // ---- charts -------------------------------------------------------------

  // A line chart on a canvas: `series` is [{label, values}], drawn over the
  // last HISTORY points, y from 0 to a rounded maximum, with a legend.
  function Chart(canvas, format) {
    const series = new Map();
    function push(label, value) {
      if (!series.has(label)) series.set(label, []);
      const v = series.get(label);
      v.push(value === null || value === undefined ? null : value);
      if (v.length > HISTORY) v.shift();
    }
    function niceMax(m) {
      if (m <= 0) return 1;
      const p = Math.pow(10, Math.floor(Math.log10(m)));
      for (const k of [1, 2, 2.5, 5, 10]) if (k * p >= m) return k * p;
      return 10 * p;
    }
    function draw() {
      const dpr = window.devicePixelRatio || 1;
      const w = canvas.clientWidth || canvas.width, h = canvas.clientHeight || canvas.height;
      if (canvas.width !== Math.round(w * dpr)) { canvas.width = Math.round(w * dpr); canvas.height = Math.round(h * dpr); }
      const g = canvas.getContext("2d");
      g.setTransform(dpr, 0, 0, dpr, 0, 0);
      g.clearRect(0, 0, w, h);
      const left = 52, right = 8, top = 18, bottom = 16;
      const pw = w - left - right, ph = h - top - bottom;
      let max = 0;
      for (const v of series.values()) for (const x of v) if (x !== null && x > max) max = x;
      max = niceMax(max);
      g.font = "11px system-ui, sans-serif";
      g.strokeStyle = "#263442"; g.fillStyle = "#7f91a3"; g.lineWidth = 1;
      g.textAlign = "right"; g.textBaseline = "middle";
      for (let i = 0; i <= 4; i++) {
        const y = top + ph - (ph * i) / 4;
        g.beginPath(); g.moveTo(left, y); g.lineTo(left + pw, y); g.stroke();
        g.fillText(format((max * i) / 4), left - 6, y);
      }
      g.textAlign = "left"; g.textBaseline = "bottom";
      g.fillText("−" + HISTORY + " s", left, h);
      g.textAlign = "right"; g.fillText("now", left + pw, h);
      let i = 0, lx = left;
      for (const [label, v] of series) {
        const color = COLORS[i++ % COLORS.length];
        g.strokeStyle = color; g.lineWidth = 1.6; g.beginPath();
        let pen = false;
        v.forEach((x, k) => {
          if (x === null) { pen = false; return; }
          const px = left + pw - ((v.length - 1 - k) * pw) / (HISTORY - 1);
          const py = top + ph - (x / max) * ph;
          if (pen) g.lineTo(px, py); else g.moveTo(px, py);
          pen = true;
        });
        g.stroke();
        g.fillStyle = color; g.textAlign = "left"; g.textBaseline = "top";
        g.fillRect(lx, 4, 8, 8);
        g.fillText(label, lx + 11, 2);
        lx += 20 + g.measureText(label).width;
      }
      canvas.dataset.points = String(Math.max(0, ...[...series.values()].map((v) => v.length)));
    }
    return { push, draw };
  }

  const charts = {
    rate: Chart($("chart-rate"), num),
    latency: Chart($("chart-latency"), (x) => num(x)),
    sessions: Chart($("chart-sessions"), num),
    listeners: Chart($("chart-listeners"), num),
  };

  // ---- $sys.stats -----------------------------------------------------------

  function setText(id, text) {
    const el = $(id);
    if (el.textContent !== text) el.textContent = text;
  }

  function fillTable(id, rows, empty) {
    const body = $(id).tBodies[0];
    body.replaceChildren();
    if (rows.length === 0) {
      const tr = body.insertRow(), td = tr.insertCell();
      td.colSpan = $(id).tHead.rows[0].cells.length; td.className = "muted"; td.textContent = empty;
      return;
    }
    for (const cells of rows) {
      const tr = body.insertRow();
      for (const c of cells) {
        const td = tr.insertCell();
        if (typeof c === "object") { td.textContent = c.text; td.className = c.cls || ""; td.title = c.title || ""; }
        else td.textContent = c;
      }
    }
  }

  function onStats(s) {
    const push = s.push ? s.push.sessions : null;
    const lat = s.latency_us || {};
    setText("version", s.version || "");
    setText("uptime", duration(s.uptime_s));
    $("uptime").dataset.value = String(s.uptime_s);
    setText("published", num(s.hub.published_per_s));
    setText("delivered", num(s.hub.delivered_per_s));
    setText("dropped", num(s.hub.dropped_per_s));
    setText("subscribers", num(s.hub.subscribers));
    setText("subscriptions", num(s.hub.subscriptions));
    setText("sessions", push ? num(push.polling + push.websocket + push.ws) : "off");
    if (push) {
      const el = $("sessions");
      el.title = "polling " + push.polling + " · websocket " + push.websocket + " · /ws " + push.ws;
      el.dataset.polling = push.polling; el.dataset.websocket = push.websocket; el.dataset.ws = push.ws;
    }
    setText("p99", ms(lat.p99));
    setText("inflight", bytes(s.hub.inflight_bytes));

    fillTable("listeners", s.listeners.map((l) => [
      l.name, num(l.connections), num(l.events_in_per_s), num(l.events_out_per_s),
      bytes(l.bytes_in_per_s) + "/s", bytes(l.bytes_out_per_s) + "/s",
    ]), "no listeners");
    fillTable("sinks", s.sinks.map((k) => [
      k.name, { text: k.state.replace("_", " "), cls: "state-" + k.state, title: k.reason || "" },
      num(k.queue_depth), num(k.acked_per_s), num(k.failed_per_s),
    ]), "no routed sinks");
    const c = s.cluster;
    $("cluster-panel").hidden = !c;
    if (c) {
      setText("cluster-node", "node " + c.node);
      fillTable("cluster", [[
        num(c.nodes_seen), num(c.partitions), num(c.lag),
        num(c.produced_per_s), num(c.received_per_s), num(c.received_from_others_per_s),
      ]], "");
    }

    charts.rate.push("published", s.hub.published_per_s);
    charts.rate.push("delivered", s.hub.delivered_per_s);
    charts.rate.push("dropped", s.hub.dropped_per_s);
    const toMs = (us) => (us === null || us === undefined ? null : us / 1000);
    charts.latency.push("p50", toMs(lat.p50));
    charts.latency.push("p99", toMs(lat.p99));
    charts.latency.push("max", toMs(lat.max));
    if (push) {
      charts.sessions.push("polling", push.polling);
      charts.sessions.push("websocket", push.websocket);
      charts.sessions.push("/ws", push.ws);
    }
    for (const l of s.listeners) charts.listeners.push(l.name, l.events_in_per_s + l.events_out_per_s);
    for (const c of Object.values(charts)) c.draw();
  }

  // The link badge: "up" (live), "down" (disconnected, retrying) or
  // "refused" (connected, but $sys.stats is not allowed: nothing will come).
  function showLink(state, text) {
    const el = $("link");
    el.className = "link " + (state === "up" ? "up" : "down");
    el.dataset.state = state;
    el.textContent = text;
  }

  connect({
    onState(up, reason) {
      showLink(up ? "up" : "down", up ? "live" : "disconnected" + (reason ? ": " + reason : "") + " — retrying");
    },
    onOpen(ws) {
      ws.send(JSON.stringify({ op: "subscribe", id: 1, patterns: ["$sys.stats"] }));
    },
    onFrame(data, healthy) {
      if (typeof data !== "string") return;
      let m;
      try { m = JSON.parse(data); } catch (e) { return; }
      if (m.op === "message" && m.topic === "$sys.stats" && m.payload && m.payload.hub) {
        healthy();
        onStats(m.payload);
      } else if (m.op === "subscribed" && m.id === 1 && m.refused && m.refused.length) {
        // A token whose `subscribe` claim does not cover $sys.stats: say so,
        // rather than "live" over tiles that never fill.
        showLink("refused", "$sys.stats refused: " + m.refused[0].reason);
      } else if (m.op === "error" && m.id === 1) {
        showLink("refused", "$sys.stats: " + m.reason);
      }
    },
  });

  // ---- topic inspector ------------------------------------------------------

  const patterns = new Set();
  let paused = false, nextId = 1, pendingBinary = null;

  function renderPatterns() {
    const ul = $("inspect-patterns");
    ul.replaceChildren();
    for (const p of patterns) {
      const li = document.createElement("li");
      li.textContent = p;
      const x = document.createElement("button");
      x.type = "button"; x.textContent = "×"; x.title = "unsubscribe";
      x.onclick = () => { patterns.delete(p); inspector.send({ op: "unsubscribe", id: nextId++, patterns: [p] }); renderPatterns(); };
      li.appendChild(x);
      ul.appendChild(li);
    }
  }

  function preview(payload) {
    const text = typeof payload === "string" ? payload : JSON.stringify(payload);
    return text.length > PREVIEW ? text.slice(0, PREVIEW) + "… (" + text.length + " chars)" : text;
  }

  function hex(buf) {
    const b = new Uint8Array(buf, 0, Math.min(buf.byteLength, 64));
    const h = Array.from(b, (x) => x.toString(16).padStart(2, "0")).join(" ");
    return "binary, " + buf.byteLength + " bytes: " + h + (buf.byteLength > 64 ? " …" : "");
  }

  function addRow(topic, offset, text) {
    if (paused) return;
    const body = $("inspect-messages").tBodies[0];
    const tr = body.insertRow(0);
    tr.className = "message";
    const cells = [new Date().toLocaleTimeString(), topic, offset === undefined ? "" : String(offset), text];
    cells.forEach((c, i) => { const td = tr.insertCell(); td.textContent = c; if (i === 3) td.className = "payload"; });
    while (body.rows.length > MAX_ROWS) body.deleteRow(-1);
  }

  const inspector = connect({
    onState(up, reason) {
      $("inspect-status").textContent = up ? "" : "disconnected" + (reason ? ": " + reason : "");
    },
    onOpen(ws) {
      if (patterns.size) ws.send(JSON.stringify({ op: "subscribe", id: nextId++, patterns: [...patterns] }));
    },
    onFrame(data, healthy) {
      if (typeof data !== "string") {
        if (pendingBinary) addRow(pendingBinary.topic, pendingBinary.offset, hex(data));
        pendingBinary = null;
        return;
      }
      let m;
      try { m = JSON.parse(data); } catch (e) { return; }
      // Anything but the `session` greeting (recovery on) answers this page.
      if (m.op !== "session") healthy();
      if (m.op === "message") {
        if (m.binary) pendingBinary = m;
        else addRow(m.topic, m.offset, preview(m.payload));
      } else if (m.op === "subscribed") {
        const refused = (m.refused || []).map((r) => r.pattern + ": " + r.reason);
        for (const r of m.refused || []) patterns.delete(r.pattern);
        renderPatterns();
        const st = $("inspect-status");
        st.textContent = refused.length ? "refused — " + refused.join("; ") : "subscribed to " + m.accepted.join(", ");
        st.className = refused.length ? "refused" : "muted";
      } else if (m.op === "error") {
        $("inspect-status").textContent = "error: " + m.reason;
        $("inspect-status").className = "refused";
      }
    },
  });

  $("inspect-form").addEventListener("submit", (e) => {
    e.preventDefault();
    const p = $("inspect-pattern").value.trim();
    if (!p) return;
    patterns.add(p);
    renderPatterns();
    inspector.send({ op: "subscribe", id: nextId++, patterns: [p] });
    $("inspect-pattern").value = "";
  });
  $("inspect-pause").addEventListener("click", (e) => {
    paused = !paused;
    e.target.textContent = paused ? "Resume" : "Pause";
  });
  $("inspect-clear").addEventListener("click", () => $("inspect-messages").tBodies[0].replaceChildren());
})();
