// dashboard_load: how long the dashboard takes to show a large job. Starts soartuned on an existing database
// (e.g. one runner_bench --trials 10000 --keep DIR left behind), opens the page of its largest job in headless
// Chromium (Debian's chromium, puppeteer-core from daemon/web) and prints, in ms:
//   api_first_page   GET /api/jobs/<id>/trials?page_size=1000, the first page;
//   api_all_pages    every page of the job's trials, one after the other;
//   grpc_page        `soartune trials <id> --limit 100` (one ListTrials page of 100 over gRPC, the CLI's own
//                    start included), the median of 5;
//   first_chart      navigation start to the frame after the page first drew its charts (the page's
//                    data-first-chart mark; pages without it: to the optimisation history holding points);
//   page_ready       navigation start to every chart and the trial table drawn over every trial (">300000"
//                    when not within 5 minutes).
// The database is opened as it is: run it on a copy when its job is not finished (soartuned resumes it).
// Usage: node daemon/bench/dashboard_load.mjs BIN_DIR DATABASE [RUNS]
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";

const [binDir, database, runsArg] = process.argv.slice(2);
const runs = Number(runsArg || 3);
const readyLimit = 300000;   // ms: past this page_ready is reported as ">300000"
const here = path.dirname(fileURLToPath(import.meta.url));
const puppeteer = createRequire(path.join(here, "../web/package.json"))("puppeteer-core");
const dir = fs.mkdtempSync(path.join(os.tmpdir(), "soartune-dash-load-"));
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

const daemon = spawn(path.join(binDir, "soartuned"), ["--port", "0", "--port-file", path.join(dir, "port"),
  "--http-listen", "127.0.0.1:0", "--http-port-file", path.join(dir, "http_port"), "--database", database,
  "--work-dir", path.join(dir, "work"), "--log-level", "warn"], { stdio: "inherit" });
try {
  for (let i = 0; i < 100 && !(fs.existsSync(path.join(dir, "http_port")) && fs.existsSync(path.join(dir, "port"))); i++) await sleep(100);
  const base = `http://127.0.0.1:${fs.readFileSync(path.join(dir, "http_port"), "utf8").trim()}`;
  const grpcAddr = `127.0.0.1:${fs.readFileSync(path.join(dir, "port"), "utf8").trim()}`;
  const { jobs } = await (await fetch(`${base}/api/jobs?page_size=1000`)).json();
  const job = jobs.sort((a, b) => b.trials_done - a.trials_done)[0];
  const browser = await puppeteer.launch({ executablePath: "/usr/bin/chromium", headless: true,
    args: ["--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"], defaultViewport: { width: 1400, height: 1000 } });
  for (let r = 0; r < runs; r++) {
    let t = performance.now();
    let page = await (await fetch(`${base}/api/jobs/${job.id}/trials?page_size=1000`)).json();
    const first = performance.now() - t;
    let n = page.trials.length;
    while (page.next_page_token) {
      page = await (await fetch(`${base}/api/jobs/${job.id}/trials?page_size=1000&page_token=${page.next_page_token}`)).json();
      n += page.trials.length;
    }
    const all = performance.now() - t;
    const grpc = [];
    for (let i = 0; i < 5; i++) {
      t = performance.now();
      execFileSync(path.join(binDir, "soartune"), ["--addr", grpcAddr, "trials", job.id, "--limit", "100"]);
      grpc.push(performance.now() - t);
    }
    grpc.sort((a, b) => a - b);
    const tab = await browser.newPage();
    await tab.goto(`${base}/jobs/${job.id}`, { waitUntil: "domcontentloaded" });
    await tab.waitForFunction(() => {
      const d = document.getElementById("history");
      const c = d && window.echarts && echarts.getInstanceByDom(d);
      return c && c.getOption().series[0].data.length > 0 && document.body.dataset.firstChart !== "pending";
    }, { polling: 10, timeout: readyLimit });
    const marked = await tab.evaluate(() => Number(document.body.dataset.firstChart));
    const chart = marked > 0 ? marked : await tab.evaluate(() => performance.now());
    const firstPoints = await tab.evaluate(() => document.body.dataset.partial || document.body.dataset.trials);
    let ready = `>${readyLimit}`;
    try {
      await tab.waitForFunction(() => document.body.dataset.ready === "1" && !document.getElementById("loading"),
                                { polling: 10, timeout: readyLimit });
      ready = (await tab.evaluate(() => performance.now())).toFixed(0);
    } catch (e) {
      if (e.name !== "TimeoutError") throw e;
    }
    console.log(`job=${job.id} trials=${n} api_first_page=${first.toFixed(0)} api_all_pages=${all.toFixed(0)} ` +
                `grpc_page=${grpc[2].toFixed(0)} first_chart=${chart.toFixed(0)} (${firstPoints} trials) page_ready=${ready}`);
    await tab.close();
  }
  await browser.close();
} finally {
  daemon.kill("SIGTERM");
}
