// What both dashboard tests start and end with: their arguments (<bin dir> <source dir> <artifact dir>), the
// browser (puppeteer-core from daemon/web, Debian's chromium; exit 77, skipped, where either is absent), check()
// that counts failures, soartuned's port files, and the end: clean up, say how it went, exit 1 on any failure.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";

export const [binDir, srcDir, artifacts] = process.argv.slice(2);
const SKIP = 77;
const require = createRequire(path.join(srcDir, "daemon/web/package.json"));
let puppeteer;
try { puppeteer = require("puppeteer-core"); } catch (e) {
  console.log(`SKIP: puppeteer-core is not installed in daemon/web (run scripts/install-deps.sh): ${e.message}`);
  process.exit(SKIP);
}
const chromium = ["/usr/bin/chromium", "/usr/bin/chromium-browser"].find((p) => fs.existsSync(p));
if (!chromium) { console.log("SKIP: Debian's chromium is not installed (scripts/install-deps.sh installs it)"); process.exit(SKIP); }

let failures = 0;
export function check(cond, what) {
  if (!cond) { failures++; console.log(`FAIL: ${what}`); } else console.log(`ok: ${what}`);
}
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
fs.mkdirSync(artifacts, { recursive: true });

// A temporary directory of the test's own (soartuned's database, port files, specs).
export const tempDir = (prefix) => fs.mkdtempSync(path.join(os.tmpdir(), prefix));

// soartuned's gRPC and dashboard ports once it has written both port files (it is given 10 s).
export async function daemonPorts(portFile, httpPortFile) {
  for (let i = 0; i < 100 && !(fs.existsSync(portFile) && fs.existsSync(httpPortFile)); i++) await sleep(100);
  return { grpc: fs.readFileSync(portFile, "utf8").trim(), http: fs.readFileSync(httpPortFile, "utf8").trim() };
}

// Headless chromium in a 1400 x 1000 window; `extraArgs`: more command-line flags.
export const launchBrowser = (extraArgs = []) => puppeteer.launch({ executablePath: chromium, headless: true,
  args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", ...extraArgs, "--window-size=1400,1000"],
  defaultViewport: { width: 1400, height: 1000 } });

// The rows of a job page's trial table whose trial has finished (COMPLETE or FAILED), and waiting until there are
// more than `n` of them (live updates).
export const finishedTrialRows = (page) => page.$$eval('#trials td[data-field="status"]',
  (cs) => cs.filter((c) => c.textContent === "COMPLETE" || c.textContent === "FAILED").length);
export const waitForMoreFinishedTrialRows = (page, n, options) => page.waitForFunction((n) =>
  [...document.querySelectorAll('#trials td[data-field="status"]')]
    .filter((c) => c.textContent === "COMPLETE" || c.textContent === "FAILED").length > n, options, n);

// Runs the test's main(); an exception is one more failure. Then cleanup(), the summary line, and the exit status.
export async function run(main, cleanup) {
  try {
    await main();
  } catch (e) {
    failures++;
    console.log(`FAIL: ${e.stack || e}`);
  } finally {
    await cleanup();
  }
  console.log(failures ? `${failures} check(s) failed; screenshots in ${artifacts}` : `all checks passed; screenshots in ${artifacts}`);
  process.exit(failures ? 1 : 0);
}
