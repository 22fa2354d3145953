// Headless Chromium (Debian's /usr/bin/chromium, driven by playwright-core;
// no browser is ever downloaded) against a running `tidegate serve`:
//   node dashboard.js http://127.0.0.1:PORT
// Loads the dashboard, waits for its /ws link, sees numbers move (uptime,
// and published/s after a burst of POST /v1/publish), subscribes the topic
// inspector to a pattern, publishes one message and sees it arrive; checks
// the page loaded nothing from anywhere but the server and threw no error.
// Prints one JSON line; exits non-zero on any failure.
// Run by crates/tidegate/tests/dashboard.rs; installed by
// scripts/setup/dashboard.sh.
"use strict";

const { chromium } = require("playwright-core");

const base = process.argv[2];
const STEP_MS = 15000; // each wait; the whole run is bounded by the Rust test too

function fail(what) {
  console.log(JSON.stringify({ ok: false, failed: what }));
  process.exit(1);
}

async function publish(topic, body) {
  const r = await fetch(`${base}/v1/publish?topic=${encodeURIComponent(topic)}`, {
    method: "POST",
    body,
  });
  return r.status;
}

async function main() {
  if (!base) fail("usage: node dashboard.js http://host:port");
  const origin = new URL(base).origin;
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
  });
  const result = { ok: false };
  try {
    const page = await browser.newPage();
    const foreign = [];
    const errors = [];
    page.on("request", (req) => {
      const u = new URL(req.url());
      const sameOrigin = u.origin === origin || (u.protocol === "ws:" && u.host === new URL(origin).host);
      if (!sameOrigin) foreign.push(req.url());
    });
    page.on("pageerror", (e) => errors.push(String(e)));
    page.on("response", (r) => r.status() >= 400 && errors.push(`${r.status()} for ${r.url()}`));
    page.on("console", (m) => m.type() === "error" && errors.push(m.text()));

    await page.goto(`${base}/`, { waitUntil: "load", timeout: STEP_MS });
    await page.waitForSelector("#link[data-state=up]", { timeout: STEP_MS });

    // A number moves: the uptime the hub reports each second.
    await page.waitForFunction(() => document.getElementById("uptime").dataset.value !== "", null, { timeout: STEP_MS });
    const up0 = Number(await page.getAttribute("#uptime", "data-value"));
    await page.waitForFunction(
      (u0) => Number(document.getElementById("uptime").dataset.value) > u0,
      up0,
      { timeout: STEP_MS },
    );
    result.uptime = [up0, Number(await page.getAttribute("#uptime", "data-value"))];

    // And one moved by traffic: published/s goes from 0 to what we send.
    const published0 = await page.textContent("#published");
    const burst = setInterval(() => { for (let i = 0; i < 20; i++) publish("dash.load", "x").catch(() => {}); }, 100);
    try {
      await page.waitForFunction(() => {
        const t = document.getElementById("published").textContent;
        return t !== "–" && parseFloat(t) > 0;
      }, null, { timeout: STEP_MS });
    } finally {
      clearInterval(burst);
    }
    result.published = [published0, await page.textContent("#published")];
    // The chart keeps one point per report.
    const points = Number(await page.getAttribute("#chart-rate", "data-points"));
    if (!(points >= 2)) fail(`rate chart has ${points} points`);
    result.chart_points = points;

    // Push sessions by transport: the page's own two /ws connections, and
    // an Engine.IO session this script opens over polling.
    const hs = await fetch(`${base}/socket.io/?EIO=4&transport=polling`);
    if (hs.status !== 200) fail(`Engine.IO handshake answered ${hs.status}`);
    await page.waitForFunction(() => {
      const d = document.getElementById("sessions").dataset;
      return Number(d.polling) >= 1 && Number(d.ws) >= 2;
    }, null, { timeout: STEP_MS });
    result.sessions = await page.getAttribute("#sessions", "title");
    // The http listener's row shows its connections and messages out.
    await page.waitForFunction(() => {
      const row = [...document.querySelectorAll("#listeners tbody tr")].find((r) => r.cells[0].textContent === "http");
      return row && Number(row.cells[1].textContent) >= 2 && parseFloat(row.cells[3].textContent) > 0;
    }, null, { timeout: STEP_MS });

    // The inspector: subscribe to a pattern, publish, see it arrive.
    await page.fill("#inspect-pattern", "dash.test.>");
    await page.click("#inspect-form button[type=submit]");
    await page.waitForFunction(
      () => document.getElementById("inspect-status").textContent.includes("subscribed to dash.test.>"),
      null,
      { timeout: STEP_MS },
    );
    const status = await publish("dash.test.hello", JSON.stringify({ hello: "from the test", n: 42 }));
    if (status !== 200) fail(`POST /v1/publish answered ${status}`);
    const row = await page.waitForSelector("#inspect-messages tbody tr.message", { timeout: STEP_MS });
    const text = await row.textContent();
    if (!text.includes("dash.test.hello") || !text.includes("from the test")) fail(`inspector row: ${text}`);
    result.inspected = text;

    // $sys.stats is subscribe-only.
    const forged = await publish("$sys.stats", "{}");
    if (forged === 200) fail("a client published on $sys.stats");
    result.forged_status = forged;

    if (foreign.length) fail(`requests outside the server: ${foreign.join(", ")}`);
    if (errors.length) fail(`page errors: ${errors.join(" | ")}`);
    result.ok = true;
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(result));
}

main().catch((e) => fail(String(e && e.stack ? e.stack : e)));
