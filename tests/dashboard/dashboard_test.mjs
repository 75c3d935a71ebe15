// The dashboard in headless Chromium (Debian's chromium, driven by puppeteer-core; no browser download) against a
// real soartuned holding a finished job and a running one (CPU jobs on the shipped kjv-llama demo model), and one
// whose trials were stopped early (PRUNED). Checks that the numbers
// on the pages equal the CLI's gRPC answers (`soartune ... --json`), that every chart has rendered marks, that a
// finished trial reaches the open job page within 2 s, and that no page logs an error; saves screenshots.
//
// usage: node dashboard_test.mjs <bin dir> <source dir> <artifact dir>    exit 77: skipped (no browser)
import { execFileSync, spawn, spawnSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { artifacts, binDir, check, daemonPorts, finishedTrialRows, launchBrowser, run, sleep, srcDir, tempDir,
  waitForMoreFinishedTrialRows } from "./harness.mjs";

const dir = tempDir("soartune-dash-");

// The loopback rule: a non-loopback address without TLS and the token is refused, naming the key and what is
// missing (dashboard_tls_test.mjs serves one with them).
{
  const r = spawnSync(path.join(binDir, "soartuned"), ["--config", path.join(srcDir, "configs/daemon.yaml"), "--port", "0",
    "--database", path.join(dir, "refused.db"), "--http-listen", "0.0.0.0:0"], { encoding: "utf8", timeout: 20000 });
  check(r.status === 2 && /http_listen: 0\.0\.0\.0:0 is not a loopback address, so it needs tls_cert and tls_key .*; a bearer token/.test(r.stderr),
        "a non-loopback --http-listen without TLS and token is refused (exit 2, names http_listen and what is missing)");
}

const daemon = spawn(path.join(binDir, "soartuned"), ["--config", path.join(srcDir, "configs/daemon.yaml"), "--port", "0",
  "--port-file", path.join(dir, "port"), "--http-listen", "127.0.0.1:0", "--http-port-file", path.join(dir, "http_port"),
  "--database", path.join(dir, "db.sqlite"), "--log-level", "warn"], { stdio: ["ignore", "ignore", fs.openSync(path.join(artifacts, "soartuned.log"), "w")] });
let browser;
const cleanup = async () => {
  if (browser) await browser.close().catch(() => {});
  daemon.kill("SIGTERM");
};

async function main() {
  const ports = await daemonPorts(path.join(dir, "port"), path.join(dir, "http_port"));
  const grpcAddr = `127.0.0.1:${ports.grpc}`;
  const base = `http://127.0.0.1:${ports.http}`;
  const cli = (...args) => execFileSync(path.join(binDir, "soartune"), ["--addr", grpcAddr, ...args], { encoding: "utf8" });
  const cliJson = (...args) => JSON.parse(cli(...args, "--json"));
  const spec = (name, trials) => {
    const text = fs.readFileSync(path.join(srcDir, "configs/jobs/demo.yaml"), "utf8")
      .replace(/^name: .*$/m, `name: ${name}`).replace(/trials: 12 /, `trials: ${trials} `).replace(/time_s: 150/, "time_s: 900");
    const file = path.join(dir, `${name}.yaml`);
    fs.writeFileSync(file, text);
    return file;
  };

  // A finished job, then a running one (one CPU device: the second starts when the first is done).
  const finished = cli("submit", spec("finished", 8)).trim();
  const t0 = Date.now();
  while (cliJson("status", finished).state !== "SUCCEEDED" && Date.now() - t0 < 120000) await sleep(300);
  check(cliJson("status", finished).state === "SUCCEEDED", `job ${finished} finished`);
  // A job whose 4-bit trials fail the gate and are stopped after their accuracy (early_stop:): PRUNED trials.
  const pruningSpec = path.join(dir, "pruning.yaml");
  fs.writeFileSync(pruningSpec, ["name: pruning", "model: synthetic:tiny", "backend: cpu", "seed: 7", "strategy: random",
    "budget: {trials: 3}", "workload: {name: p, requests: [{name: a, input_len: 16, output_len: 32, count: 4}]}",
    "accuracy: {set: synthetic, samples: 4, prompt_len: 16, continuation_len: 16}", "scoring: {gate: [{above: 99.9, c: 1.0}]}",
    "space: {weight_bits: {type: choice, values: [4]}, weight_group_size: {type: choice, values: [32, 64]}}",
    "early_stop: {after_tiers: 0, margin_pct: 5}", ""].join("\n"));
  const pruning = cli("submit", pruningSpec).trim();
  while (cliJson("status", pruning).state !== "SUCCEEDED" && Date.now() - t0 < 180000) await sleep(300);
  check(cliJson("status", pruning).trials_pruned === 2, `job ${pruning}: 2 trials stopped early`);
  const running = cli("submit", spec("running", 200)).trim();
  cli("record", finished, "3", "--s1", "95", "--s8", "94", "--sinf", "93", "--accuracy", "99.3");

  // The JSON API pages like ListTrials: page_size 3 walks the whole job in order, the total as gRPC says.
  {
    const all = cliJson("trials", finished, "--limit", "0");
    let token = "", numbers = [], total = -1;
    do {
      const page = await (await fetch(`${base}/api/jobs/${finished}/trials?page_size=3&page_token=${token}`)).json();
      numbers = numbers.concat(page.trials.map((t) => Number(t.number)));
      total = page.total; token = page.next_page_token;
    } while (token);
    check(total === all.total && JSON.stringify(numbers) === JSON.stringify(all.trials.map((t) => t.number)),
          `the API's pages of 3 give the ${all.total} trials gRPC lists`);
    const bad = await fetch(`${base}/api/jobs/${finished}/trials?page_size=-1`);
    const body = await bad.json();
    check(bad.status === 400 && /page_size/.test(body.error?.message), `page_size -1 is refused as gRPC refuses it (400: ${body.error?.message})`);
    const typo = await (await fetch(`${base}/api/jobs/${finished}/trials?sort=score`)).json();
    check(/'sort' is not one of: status, order_by, page_size, page_token/.test(typo.error?.message), `an unknown query parameter is refused, naming the allowed ones`);
    const unknown = await fetch(`${base}/api/jobs/no-such-job`);
    check(unknown.status === 404, "an unknown job is 404");
  }

  browser = await launchBrowser();
  const consoleErrors = [];
  const open = async (url) => {
    const page = await browser.newPage();
    page.on("console", (m) => { if (m.type() === "error") consoleErrors.push(`${url}: ${m.text()}`); });
    page.on("pageerror", (e) => consoleErrors.push(`${url}: ${e.message}`));
    await page.goto(base + url, { waitUntil: "load" });
    await page.waitForFunction(() => document.body.dataset.ready, { timeout: 20000 });
    check(await page.evaluate(() => document.body.dataset.ready) === "1", `${url} loaded without an error (${await page.evaluate(() => document.getElementById("page-error")?.textContent || "")})`);
    return page;
  };
  // Rendered marks per chart: the SVG renderer's drawn shapes, and the series' data points.
  const marks = (page) => page.evaluate(() => [...document.querySelectorAll("[data-chart]")].map((d) => {
    const chart = echarts.getInstanceByDom(d);
    const points = chart ? chart.getOption().series.reduce((n, s) => n + (s.data ? s.data.length : 0), 0) : 0;
    return { id: d.dataset.chart, shapes: d.querySelectorAll("svg path, svg circle, svg rect").length, points };
  }));

  // Jobs page: both jobs with their state, best score and trial counts as gRPC has them.
  {
    const page = await open("/");
    const jobs = cliJson("jobs");
    for (const j of jobs.jobs ?? jobs) {
      const row = await page.$eval(`tr[data-job="${j.id}"]`, (r) => Object.fromEntries([...r.querySelectorAll("[data-field]")].map((c) => [c.dataset.field, c.textContent])));
      if (j.id === finished) {
        check(row.best_score === j.best_score.toFixed(4) && row.best_trial === String(j.best_trial), `jobs page: ${j.id} best ${row.best_score} (#${row.best_trial}) = gRPC ${j.best_score.toFixed(4)} (#${j.best_trial})`);
        check(row.state === "SUCCEEDED" && row.trials === `${j.trials_done + j.trials_running} / ${j.trial_budget}`, `jobs page: ${j.id} state ${row.state}, trials ${row.trials}`);
        const device = cliJson("show", j.id, "0").device;
        check(row.device === device && row.model === j.model, `jobs page: model ${row.model}, device ${row.device} = gRPC's (${j.model}, ${device})`);
      }
    }
    await page.screenshot({ path: path.join(artifacts, "jobs.png") });
    await page.close();
  }

  // The finished job's page: every trial's numbers as `soartune trials --json` gives them; every chart drawn.
  {
    const page = await open(`/jobs/${finished}`);
    const grpc = cliJson("trials", finished, "--limit", "0");
    const rows = await page.$$eval("#trials tr[data-trial]", (rs) => rs.map((r) => Object.fromEntries([...r.querySelectorAll("[data-field]")].map((c) => [c.dataset.field, c.textContent]))));
    check(rows.length === grpc.total, `job page: ${rows.length} rows = gRPC total ${grpc.total}`);
    let same = 0;
    for (const t of grpc.trials) {
      const r = rows.find((x) => x.number === String(t.number));
      const want = t.status === "COMPLETE"
        ? { score: t.score.toFixed(4), accuracy: t.relative_accuracy.toFixed(2), c1: t.duration_s.c1.toFixed(3), c8: t.duration_s.c8.toFixed(3), cinf: t.duration_s.cinf.toFixed(3), status: t.status }
        : { score: "", status: t.status };
      const ok = r && Object.entries(want).every(([k, v]) => r[k] === v);
      if (!ok) console.log(`  trial ${t.number}: page ${JSON.stringify(r)} vs gRPC ${JSON.stringify(want)}`);
      same += ok ? 1 : 0;
    }
    check(same === grpc.trials.length, `job page: score, accuracy, tier durations and status of ${same}/${grpc.trials.length} trials equal gRPC's`);
    const cards = await page.$$eval("#job-cards [data-field]", (cs) => Object.fromEntries(cs.map((c) => [c.dataset.field, c.textContent])));
    const best = cliJson("best", finished);
    check(cards.best_score === best.score.toFixed(4) && cards.best_trial === String(best.number), `job page: best ${cards.best_score} #${cards.best_trial} = gRPC best`);
    const m = await marks(page);
    for (const c of m) check(c.shapes > 5 && c.points > 0, `job page chart ${c.id}: ${c.shapes} shapes, ${c.points} data points`);
    check(m.length === 4, `job page has 4 charts (${m.map((c) => c.id).join(", ")})`);
    // Sorting by score (descending) puts the best trial first; filtering by status keeps only that status.
    await page.click('th[data-sort="score"]');
    const first = await page.$eval("#trials tr[data-trial]", (r) => r.dataset.trial);
    check(first === String(best.number), `sorted by score, the first row is the best trial (${first})`);
    await page.select('select[data-filter="status"]', "TRIAL_COMPLETE");
    const statuses = await page.$$eval('#trials td[data-field="status"]', (cs) => [...new Set(cs.map((c) => c.textContent))]);
    check(statuses.length === 1 && statuses[0] === "COMPLETE", `status filter keeps COMPLETE only (${statuses})`);
    await page.select('select[data-filter="status"]', "");
    await page.screenshot({ path: path.join(artifacts, "job.png"), fullPage: true });
    await page.close();
  }

  // Stopped trials: the status filter offers PRUNED, their rows are marked, the job's card counts them, the
  // history chart draws them, and a trial page says where and why it was stopped, as gRPC does.
  {
    const page = await open(`/jobs/${pruning}`);
    await page.select('select[data-filter="status"]', "TRIAL_PRUNED");
    const statuses = await page.$$eval('#trials td[data-field="status"]', (cs) => cs.map((c) => c.textContent));
    const marked = await page.$$eval("#trials tr.pruned", (rs) => rs.length);
    check(statuses.length === 2 && statuses.every((s) => s === "PRUNED") && marked === 2, `status filter PRUNED: ${statuses} (${marked} rows marked pruned)`);
    const card = await page.$eval('#job-cards [data-field="trials_pruned"]', (c) => c.textContent);
    check(card === "2", `job page: stopped early card ${card}`);
    const stopped = await page.evaluate(() => {
      const chart = echarts.getInstanceByDom(document.querySelector('[data-chart="history"]'));
      return chart.getOption().series.find((x) => x.name === "stopped early").data.length;
    });
    check(stopped === 2, `history chart: ${stopped} stopped trials drawn`);
    await page.screenshot({ path: path.join(artifacts, "job-pruned.png"), fullPage: true });
    await page.close();
    const trial = await open(`/jobs/${pruning}/trials/1`);
    const shown = cliJson("show", pruning, "1");
    const stage = await trial.$eval('[data-field="stopped after"]', (e) => e.textContent);
    check(shown.status === "PRUNED" && stage === shown.early_stop.stage, `trial page: stopped after ${stage} = gRPC's ${shown.early_stop.stage}`);
    await trial.close();
  }

  // A trial page: the tier metrics as `soartune show --json` gives them, and the YAML export as the CLI's.
  {
    const best = cliJson("best", finished);
    const page = await open(`/jobs/${finished}/trials/${best.number}`);
    const tiers = await page.$$eval("#tiers tbody tr", (rs) => rs.map((r) => [...r.children].map((c) => c.textContent)));
    const shown = cliJson("show", finished, String(best.number));
    check(tiers.length === 3 && shown.tiers.every((t, i) => tiers[i][0] === t.tier && tiers[i][1] === t.duration_s.toFixed(3) && tiers[i][2] === t.ttft_p50_ms.toFixed(1)),
          `trial page: tier durations and TTFT p50 equal gRPC's (${tiers.map((t) => t.slice(0, 3).join(" ")).join("; ")})`);
    // Where its time went: the line `soartune show` prints, from the same Trial.timings.
    const took = await page.$eval('[data-field="time"]', (e) => e.textContent);
    const line = cli("show", finished, String(best.number)).split("\n").find((l) => /^  time /.test(l)) || "";
    check(shown.timings.load_s > 0 && took.startsWith("load ") && line.replace(/^  time +/, "") === took,
          `trial page: the time line equals \`soartune show\`'s (${took})`);
    await page.click('button[data-export="yaml"]');
    await page.waitForFunction(() => document.getElementById("export").textContent.length > 0);
    const yaml = await page.$eval("#export", (e) => e.textContent);
    check(yaml.trim() === cli("export", finished, "--trial", String(best.number)).trim(), "trial page: the YAML export equals `soartune export`");
    await page.screenshot({ path: path.join(artifacts, "trial.png"), fullPage: true });
    await page.close();
  }

  // Compare and submissions.
  {
    const page = await open(`/compare?jobs=${finished},${running}`);
    for (const c of await marks(page)) check(c.shapes > 3 && c.points > 0, `compare chart: ${c.shapes} shapes, ${c.points} points`);
    await page.screenshot({ path: path.join(artifacts, "compare.png"), fullPage: true });
    await page.close();
    const subs = await open(`/submissions?job=${finished}`);
    const left = await subs.$eval('[data-field="remaining_today"]', (e) => e.textContent);
    const plan = cliJson("plan", finished);
    check(left === String(plan.remaining_today ?? plan.remaining), `submissions page: ${left} left today = gRPC`);
    check((await subs.$$eval("#submissions tbody tr", (r) => r.length)) === 1, "submissions page: the recorded submission is listed");
    for (const c of await marks(subs)) check(c.points === 1 && c.shapes > 3, `calibration chart: ${c.points} point(s), ${c.shapes} shapes`);
    await subs.screenshot({ path: path.join(artifacts, "submissions.png"), fullPage: true });
    await subs.close();
  }

  // The running job's page: a trial that finishes reaches the page within 2 s (the daemon's finish time to the
  // page's render, both on this machine's clock), and its numbers are gRPC's.
  {
    const page = await open(`/jobs/${running}`);
    const before = await finishedTrialRows(page);
    await waitForMoreFinishedTrialRows(page, before, { timeout: 60000, polling: 50 });
    const seenAt = await page.evaluate(() => Number(document.body.dataset.rendered));
    const grpc = cliJson("trials", running, "--limit", "0");
    const newest = grpc.trials.filter((t) => t.finished_unix_ms > 0 && t.finished_unix_ms <= seenAt).sort((a, b) => b.finished_unix_ms - a.finished_unix_ms)[0];
    const lag = seenAt - newest.finished_unix_ms;
    check(newest && lag >= 0 && lag < 2000, `live: trial ${newest.number} finished at ${newest.finished_unix_ms}, on the page ${lag} ms later (< 2000)`);
    const m = await marks(page);
    for (const c of m) check(c.id === "importance" || (c.shapes > 3 && c.points > 0), `running job chart ${c.id}: ${c.shapes} shapes, ${c.points} points`);
    await page.screenshot({ path: path.join(artifacts, "job-running.png"), fullPage: true });
    await page.screenshot({ path: path.join(artifacts, "job-running-top.png") });   // the view README shows
    await page.close();
  }
  check(consoleErrors.length === 0, `no console errors${consoleErrors.length ? ": " + consoleErrors.join(" | ") : ""}`);
}

await run(main, cleanup);
