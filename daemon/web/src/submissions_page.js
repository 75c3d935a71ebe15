// Submissions (/submissions?job=<id>): today's budget and when it resets, the recorded official results with
// the local score beside them, and a job's plan for today with P(C = 1) per pick.
import { allJobs, allSubmissions, get } from "./api.js";
import { el, score, time } from "./format.js";

export async function submissionsPage(main, params) {
  const [subs, jobs] = await Promise.all([allSubmissions(), allJobs()]);
  const jobId = params.get("job") || (jobs[0] ? jobs[0].id : "");
  const sel = el("select", { id: "plan-job", onchange: (e) => {
    history.pushState(null, "", `/submissions?job=${e.target.value}`);
    window.dispatchEvent(new Event("popstate"));
  } }, ...jobs.map((j) => { const o = el("option", { value: j.id }, `${j.id} (${j.name})`); o.selected = j.id === jobId; return o; }));
  const planBox = el("div", {});
  const calBox = el("div", { class: "chart", id: "calibration", "data-chart": "calibration" });
  main.replaceChildren(
    el("h1", {}, "submissions"),
    el("div", { class: "cards" },
      ...[["left today", subs.remaining_today, "remaining_today"], ["budget day", subs.budget_day, "budget_day"],
          ["resets at", subs.resets_at, "resets_at"]].map(([l, v, f]) =>
        el("div", { class: "card" }, el("div", { class: "label" }, l), el("div", { class: "value", "data-field": f }, v)))),
    el("div", { class: "panel" }, el("h2", {}, "recorded official results"),
      el("table", { id: "submissions" }, el("thead", {}, el("tr", {}, ...["id", "job", "trial", "submitted", "s1", "s8", "sinf", "accuracy %", "C", "final score", "note"].map((h) => el("th", {}, h)))),
        el("tbody", {}, ...subs.submissions.map((s) => el("tr", {}, ...[s.id, s.job_id, s.trial, time(s.submitted_unix_ms), s.result.s1, s.result.s8,
          s.result.sinf, s.result.relative_accuracy, s.result.c, score(s.result.final_score), s.note].map((v) => el("td", {}, v))))))),
    el("div", { class: "panel" }, el("h2", {}, "local score vs official score"), calBox),
    el("div", { class: "panel" }, el("h2", {}, "today's plan for "), sel, planBox));
  // Local vs official: each recorded submission's trial as the daemon scores it now against the official score.
  const points = await Promise.all(subs.submissions.map((s) =>
    get(`/api/jobs/${encodeURIComponent(s.job_id)}/trials/${s.trial}`).then((t) => [t.score, s.result.final_score, `${s.job_id} #${s.trial}`], () => null)));
  echarts.init(calBox, null, { renderer: "svg" }).setOption({
    animation: false, tooltip: { trigger: "item", formatter: (p) => `${p.value[2]}: local ${p.value[0].toFixed(4)}, official ${p.value[1].toFixed(2)}` },
    grid: { left: 50, right: 20, top: 20, bottom: 40 },
    xAxis: { type: "value", name: "local score", nameLocation: "middle", nameGap: 25, scale: true },
    yAxis: { type: "value", name: "official final score", scale: true },
    series: [{ type: "scatter", symbolSize: 9, data: points.filter(Boolean) }] });
  if (!jobId) return;
  try {
    const plan = await get(`/api/jobs/${encodeURIComponent(jobId)}/plan`);
    planBox.replaceChildren(
      el("p", { class: "note" }, `expected best of the day ${score(plan.expected_best_score)}; ${plan.remaining_today} left on ${plan.budget_day}; calibration: ${plan.calibration}`),
      el("table", { id: "plan" }, el("thead", {}, el("tr", {}, ...["trial", "role", "predicted score", "10%–90%", "P(C = 1)", "marginal value", "why"].map((h) => el("th", {}, h)))),
        el("tbody", {}, ...plan.picks.map((p) => el("tr", {},
          el("td", {}, el("a", { href: `/jobs/${encodeURIComponent(jobId)}/trials/${p.trial}` }, p.trial)), el("td", {}, p.role),
          el("td", { class: "num" }, score(p.predicted_score)), el("td", { class: "num" }, `${score(p.score_lo)}–${score(p.score_hi)}`),
          el("td", { class: "num", "data-field": "p_c1" }, (p.p_gate[0] ?? 0).toFixed(3)), el("td", { class: "num" }, p.marginal_value.toFixed(4)),
          el("td", { class: "wrap" }, p.explanation))))));
  } catch (e) { planBox.replaceChildren(el("p", { class: "error" }, e.message)); }
}
