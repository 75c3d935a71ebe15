// A job (/jobs/<id>): header, optimisation history, durations vs accuracy with the gate bands and the Pareto
// front, parallel coordinates, parameter importance, the trial table; live from the job's watch stream.
import { allTrials, get, watch } from "./api.js";
import { historyOption, importanceOption, makeChart, parallelOption, tradeoffOption } from "./charts.js";
import { el, score, state, time } from "./format.js";
import { mainEffects, varyingKnobs } from "./importance.js";
import { TrialTable } from "./trial_table.js";

function card(label, value, field) {
  return el("div", { class: "card" }, el("div", { class: "label" }, label), el("div", { class: "value", "data-field": field }, value));
}

function header(job) {
  const used = job.trials_done + (job.trials_pruned || 0) + job.trials_running;
  return el("div", { class: "cards", id: "job-cards" },
    card("state", state(job.state), "state"),
    card("trials used / budget", `${used} / ${job.trial_budget}`, "trials"),
    card("failed", job.trials_failed, "trials_failed"),
    job.trials_pruned > 0 ? card("stopped early", job.trials_pruned, "trials_pruned") : null,
    card("running", job.trials_running, "trials_running"),
    card("best score", job.best_trial === "-1" ? "—" : score(job.best_score), "best_score"),
    card("best trial", job.best_trial === "-1" ? "—" : job.best_trial, "best_trial"),
    card("model", job.model, "model"),
    card("strategy", job.strategy, "strategy"),
    card("started", time(job.started_unix_ms), "started"),
    card("ETA", job.eta_seconds > 0 ? `${Math.round(job.eta_seconds)} s` : "—", "eta"),
    job.stop_reason ? card("stopped", job.stop_reason, "stop_reason") : null,
    job.error ? card("error", job.error, "error") : null);
}

function panel(title, id, note) {
  return el("div", { class: "panel" }, el("h2", {}, title), note ? el("div", { class: "note" }, note) : null,
            el("div", { class: "chart", id, "data-chart": id }));
}

export async function jobPage(main, jobId) {
  let job = await get(`/api/jobs/${encodeURIComponent(jobId)}`);
  let trials = [], expected = 0;
  const headerBox = el("div", {});
  const tableBox = el("div", { class: "panel" });
  main.replaceChildren(
    el("h1", {}, `job ${job.id} `, el("span", { class: "note" }, job.name)),
    headerBox,
    el("div", { class: "grid" },
      panel("optimisation history", "history", "score per trial, best so far; failed trials marked with their failure kind, trials stopped early at the best score they could still reach"),
      panel("tier durations vs relative accuracy", "tradeoff", "shaded: the gate bands (C per accuracy range); dashed: the Pareto front per tier"),
      panel("parallel coordinates", "parallel", "the knobs that vary in this job, each complete trial coloured by its score"),
      panel("parameter importance", "importance", "first-order variance shares of the score over the complete trials (fANOVA-style main effects, no interactions)")),
    tableBox);
  const table = new TrialTable(tableBox, jobId);
  const charts = {};
  const render = () => {
    headerBox.replaceChildren(header(job));
    const knobs = varyingKnobs(trials);
    const options = {
      history: historyOption(job, trials),
      tradeoff: tradeoffOption(job, trials),
      parallel: parallelOption(job, trials, knobs),
      importance: importanceOption(mainEffects(trials, knobs)),
    };
    for (const [id, opt] of Object.entries(options)) {
      if (!charts[id]) charts[id] = makeChart(document.getElementById(id), Math.max(expected, trials.length));
      charts[id].setOption(opt, true);
    }
    table.render(job, trials, knobs);
    // When the first drawing reached the screen (the frame after it), for daemon/bench/dashboard_load.mjs.
    if (!document.body.dataset.firstChart) {
      document.body.dataset.firstChart = "pending";
      requestAnimationFrame(() => { document.body.dataset.firstChart = String(Math.round(performance.now())); });
    }
    document.body.dataset.trials = String(trials.length);
    document.body.dataset.rendered = String(Date.now());
  };
  // The first page of trials is drawn at once; a large job's other pages stream in behind it (a count says how
  // far) and the whole job is drawn once they are all in, so the first paint does not wait for the job's size.
  const loading = el("span", { class: "note", id: "loading" });
  headerBox.after(loading);
  const nextFrame = () => new Promise((resolve) => requestAnimationFrame(() => setTimeout(resolve, 0)));
  const all = await allTrials(jobId, (first, total) => {
    trials = first; expected = total; render();
    if (first.length < total) {
      document.body.dataset.partial = `${first.length}/${total}`;
      loading.textContent = `showing the first ${first.length} of ${total} trials; loading the rest…`;
    }
    return nextFrame();
  }, (loaded, total) => { loading.textContent = `showing the first ${trials.length} of ${total} trials; ${loaded} loaded…`; });
  loading.remove();
  if (all.length !== trials.length) {   // a small job is drawn already
    trials = all;
    render();
  }
  window.addEventListener("resize", () => Object.values(charts).forEach((c) => c.resize()));

  // Scores are relative to the best durations seen, so a finished trial can change every other trial's score:
  // refetch the trials (at most one fetch in flight, the last event wins) rather than patch one row.
  let fetching = false, again = false;
  const refresh = async () => {
    if (fetching) { again = true; return; }
    fetching = true;
    try {
      do {
        again = false;
        [job, trials] = await Promise.all([get(`/api/jobs/${encodeURIComponent(jobId)}`), allTrials(jobId)]);
      } while (again);
      render();
    } finally { fetching = false; }
  };
  if (!["JOB_SUCCEEDED", "JOB_FAILED", "JOB_CANCELLED"].includes(job.state)) {
    watch(jobId, (e) => {
      if (e.kind === "SNAPSHOT") return;
      refresh();
    });
  }
}
