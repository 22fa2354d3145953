// Headless Chromium (as dashboard.js) against a `tidegate serve` with
// `[push] auth = "jwt"`, the page opened with a token whose `subscribe`
// claim does not cover $sys.stats:
//   node dashboard_refused.js http://127.0.0.1:PORT SECRET
// The page must show the refusal in its link badge, not "live".
// Prints one JSON line; exits non-zero on any failure.
// Run by crates/tidegate/tests/dashboard.rs (a_token_without_sys_stats_shows_the_refusal_on_the_page).
"use strict";

const crypto = require("crypto");
const { chromium } = require("playwright-core");

const [base, secret] = process.argv.slice(2);
const STEP_MS = 15000;

function fail(what) {
  console.log(JSON.stringify({ ok: false, failed: what }));
  process.exit(1);
}

// An HS256 JWT allowed to subscribe to other.> only.
function token() {
  const part = (o) => Buffer.from(JSON.stringify(o)).toString("base64url");
  const body = part({ alg: "HS256", typ: "JWT" }) + "." +
    part({ sub: "dashboard-test", subscribe: ["other.>"], exp: Math.floor(Date.now() / 1000) + 3600 });
  return body + "." + crypto.createHmac("sha256", secret).update(body).digest("base64url");
}

async function main() {
  if (!base || !secret) fail("usage: node dashboard_refused.js http://host:port SECRET");
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    headless: true,
  });
  const result = { ok: false };
  try {
    const page = await browser.newPage();
    await page.goto(`${base}/?token=${token()}`, { waitUntil: "load", timeout: STEP_MS });
    await page.waitForSelector("#link[data-state=refused]", { timeout: STEP_MS });
    result.link = await page.textContent("#link");
    if (!result.link.includes("$sys.stats") || !result.link.includes("not allowed by the token")) {
      fail(`link badge: ${result.link}`);
    }
    result.ok = true;
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify(result));
}

main().catch((e) => fail(String(e && e.stack ? e.stack : e)));
