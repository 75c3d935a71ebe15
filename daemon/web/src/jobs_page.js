// Jobs (/): every job with its state, progress, best score, trials used / budget, start, model and device.
import { allJobs, get } from "./api.js";
import { el, score, state, time } from "./format.js";

export async function jobsPage(main) {
  const jobs = await allJobs();
  // The device a job runs on is the one its trials report (the daemon gives each trial a device slot).
  const devices = await Promise.all(jobs.map((j) =>
    get(`/api/jobs/${encodeURIComponent(j.id)}/trials?page_size=1`).then((p) => (p.trials[0] ? p.trials[0].device : ""), () => "")));
  const rows = jobs.map((j, i) => {
    const used = j.trials_done + j.trials_running;
    return el("tr", { "data-job": j.id },
      el("td", {}, el("a", { href: `/jobs/${encodeURIComponent(j.id)}` }, j.id)),
      el("td", {}, j.name),
      el("td", { class: `state-${j.state}`, "data-field": "state" }, state(j.state)),
      el("td", {}, el("progress", { max: j.trial_budget, value: j.trials_done }), ` ${Math.round(100 * j.trials_done / Math.max(1, j.trial_budget))}%`),
      el("td", { class: "num", "data-field": "best_score" }, j.best_trial === "-1" ? "" : score(j.best_score)),
      el("td", { class: "num", "data-field": "best_trial" }, j.best_trial === "-1" ? "" : j.best_trial),
      el("td", { class: "num", "data-field": "trials" }, `${used} / ${j.trial_budget}`),
      el("td", { class: "num", "data-field": "trials_failed" }, j.trials_failed),
      el("td", {}, time(j.started_unix_ms)),
      el("td", { "data-field": "model" }, j.model),
      el("td", { "data-field": "device" }, devices[i]));
  });
  main.replaceChildren(
    el("h1", {}, "jobs"),
    jobs.length ? el("table", { id: "jobs" },
      el("thead", {}, el("tr", {}, ...["job", "name", "state", "progress", "best score", "best trial", "trials used / budget",
                                          "failed", "started", "model", "device"].map((h) => el("th", {}, h)))),
      el("tbody", {}, ...rows)) : el("p", {}, "No jobs yet: soartune submit configs/jobs/demo.yaml"));
}
