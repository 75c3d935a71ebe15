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
  const used = job.trials_done + job.trials_running;
  return el("div", { class: "cards", id: "job-cards" },
    card("state", state(job.state), "state"),
    card("trials used / budget", `${used} / ${job.trial_budget}`, "trials"),
    card("failed", job.trials_failed, "trials_failed"),
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
      panel("optimisation history", "history", "score per trial, best so far; failed trials marked with their failure kind"),
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
    document.body.dataset.trials = String(trials.length);
    document.body.dataset.rendered = String(Date.now());
  };
  // A large job draws its first page of trials at once, then the whole job when every page is in.
  trials = await allTrials(jobId, "", (first, total) => {
    if (trials.length === 0) { trials = first; expected = total; render(); document.body.dataset.partial = `${first.length}/${total}`; }
  });
  render();
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
