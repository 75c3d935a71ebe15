// The dashboard off loopback, in headless Chromium: soartuned serves it on 0.0.0.0 over HTTPS with a
// self-signed certificate made here (openssl) and requires its bearer token, as gRPC does. Checks that the API
// answers 401 without the token or with a wrong one and 200 with it; that a browser sent to a job's page signs
// in through the sign-in page, gets an HttpOnly, Secure, SameSite=Strict session cookie and comes back to the
// job's page, which renders and receives live updates (server-sent events carry the cookie); saves screenshots.
//
// usage: node dashboard_tls_test.mjs <bin dir> <source dir> <artifact dir>    exit 77: skipped (no browser)
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import https from "node:https";
import path from "node:path";
import { artifacts, binDir, check, daemonPorts, finishedTrialRows, launchBrowser, run, srcDir, tempDir,
  waitForMoreFinishedTrialRows } from "./harness.mjs";

const dir = tempDir("soartune-dash-tls-");
const file = (name) => path.join(dir, name);

// A self-signed certificate for 127.0.0.1 and localhost, and the token.
execFileSync("/usr/bin/openssl", ["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=localhost",
  "-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", file("key.pem"), "-out", file("cert.pem")], { stdio: "ignore" });
const token = "tls-dashboard-token-0123456789";
fs.writeFileSync(file("token"), `${token}\n`);
const ca = fs.readFileSync(file("cert.pem"));

const daemon = spawn(path.join(binDir, "soartuned"), ["--config", path.join(srcDir, "configs/daemon.yaml"), "--port", "0",
  "--port-file", file("port"), "--http-listen", "0.0.0.0:0", "--http-port-file", file("http_port"),
  "--tls-cert", file("cert.pem"), "--tls-key", file("key.pem"), "--token-file", file("token"),
  "--database", file("db.sqlite"), "--log-level", "info"], { stdio: ["ignore", "ignore", fs.openSync(path.join(artifacts, "soartuned-tls.log"), "w")] });
let browser;

// GET over HTTPS trusting only our certificate; resolves to { status, headers, body }.
function httpsGet(url, headers = {}) {
  return new Promise((resolve, reject) => {
    https.get(url, { ca, headers }, (res) => {
      let body = "";
      res.on("data", (c) => { body += c; });
      res.on("end", () => resolve({ status: res.statusCode, headers: res.headers, body }));
    }).on("error", reject);
  });
}

async function main() {
  const ports = await daemonPorts(file("port"), file("http_port"));
  const grpcAddr = `127.0.0.1:${ports.grpc}`;
  const base = `https://127.0.0.1:${ports.http}`;
  const cli = (...args) => execFileSync(path.join(binDir, "soartune"),
    ["--addr", grpcAddr, "--tls-ca", file("cert.pem"), "--token-file", file("token"), ...args], { encoding: "utf8" });
  check(/dashboard on https:\/\/0\.0\.0\.0:\d+\/ \(bearer token or signed-in session/.test(fs.readFileSync(path.join(artifacts, "soartuned-tls.log"), "utf8")),
        "soartuned says it serves the dashboard over HTTPS with the token");

  // A job still running while the browser signs in and watches (trials of 0.1-0.5 s; cancelled at the end):
  // synthetic:tiny on the CPU, a space too large to run out of.
  fs.writeFileSync(file("job.yaml"), [
    "name: tls-live", "model: synthetic:tiny", "backend: cpu", "strategy: random", "seed: 2",
    "budget: {trials: 2000}", "trial_timeout_s: 120",
    "workload: {name: tls, requests: [{name: a, input_len: 16, output_len: 16, count: 8}]}",
    "accuracy: {set: synthetic, samples: 2, prompt_len: 8, continuation_len: 4}",
    "space:", "  weight_bits: {type: choice, values: [16, 8, 4]}", "  kv_cache_dtype: {type: choice, values: [bf16, fp8_e4m3]}",
    "  max_running_requests: {type: pow2, low: 1, high: 8}", "  max_prefill_tokens: {type: int, low: 16, high: 4096}", ""].join("\n"));
  const job = cli("submit", file("job.yaml")).trim();

  // The API: no token, a wrong token: 401; the token: 200 with the job.
  const none = await httpsGet(`${base}/api/jobs`);
  check(none.status === 401 && /UNAUTHENTICATED/.test(none.body), `API without a token: ${none.status}`);
  const wrong = await httpsGet(`${base}/api/jobs`, { Authorization: `Bearer ${token}x` });
  check(wrong.status === 401, `API with a wrong token: ${wrong.status}`);
  const right = await httpsGet(`${base}/api/jobs/${job}`, { Authorization: `Bearer ${token}` });
  check(right.status === 200 && JSON.parse(right.body).id === job, `API with the token: ${right.status}, job ${job}`);
  const events = await httpsGet(`${base}/api/jobs/${job}/events`);
  check(events.status === 401, `the event stream without a token: ${events.status}`);

  browser = await launchBrowser(["--ignore-certificate-errors"]);
  const consoleErrors = [];
  const page = await browser.newPage();
  // The sign-in page's wrong-token answer is a 401 by design; the browser logs it as a failed load.
  page.on("console", (m) => { if (m.type() === "error" && !/status of 401/.test(m.text())) consoleErrors.push(m.text()); });
  page.on("pageerror", (e) => consoleErrors.push(e.message));

  // A job's page without a session: sent to sign in, with the way back.
  await page.goto(`${base}/jobs/${job}`, { waitUntil: "load" });
  check(new URL(page.url()).pathname === "/signin" && new URL(page.url()).searchParams.get("next") === `/jobs/${job}`,
        `the job page sends an unsigned browser to ${page.url()}`);
  await page.screenshot({ path: path.join(artifacts, "signin.png") });
  await page.type("#token", "not-the-token");
  await Promise.all([page.waitForNavigation({ waitUntil: "load" }), page.click("button[type=submit]")]);
  check(await page.$eval("#signin-failed", (e) => !e.hidden), "a wrong token is refused on the sign-in page");
  check((await page.cookies()).length === 0, "no cookie after a wrong token");
  await page.type("#token", token);
  await Promise.all([page.waitForNavigation({ waitUntil: "load" }), page.click("button[type=submit]")]);
  check(new URL(page.url()).pathname === `/jobs/${job}`, `signed in, back at ${new URL(page.url()).pathname}`);
  const cookie = (await page.cookies()).find((c) => c.name === "soartune_session");
  check(cookie && cookie.httpOnly && cookie.secure && cookie.sameSite === "Strict",
        `session cookie: httpOnly ${cookie?.httpOnly}, secure ${cookie?.secure}, sameSite ${cookie?.sameSite}`);
  check(cookie && !cookie.value.includes(token), "the cookie holds a session id, not the token");

  // The job's page renders, and live updates come through the event stream: finished trials appear.
  await page.waitForFunction(() => document.body.dataset.ready, { timeout: 30000 });
  check(await page.evaluate(() => document.body.dataset.ready) === "1", "the job page rendered after signing in");
  const before = await finishedTrialRows(page);
  await page.waitForFunction(() => /^live/.test(document.getElementById("live").textContent), { timeout: 30000 });
  await waitForMoreFinishedTrialRows(page, before, { timeout: 120000, polling: 100 });
  const after = await finishedTrialRows(page);
  check(after > before, `live updates over HTTPS: ${before} -> ${after} finished trials on the page`);
  await page.screenshot({ path: path.join(artifacts, "job-tls.png") });
  check(consoleErrors.length === 0, `no console errors${consoleErrors.length ? ": " + consoleErrors.join(" | ") : ""}`);
  cli("cancel", job);
}

await run(main, async () => {
  if (browser) await browser.close().catch(() => {});
  daemon.kill("SIGTERM");
});
