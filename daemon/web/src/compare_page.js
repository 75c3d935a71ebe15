// Compare (/compare?jobs=a,b): two or more jobs side by side: best score over trials, and the best configs.
import { allJobs, allTrials, get } from "./api.js";
import { el, score } from "./format.js";

export async function comparePage(main, params) {
  const jobs = await allJobs();
  const chosen = (params.get("jobs") || "").split(",").filter(Boolean);
  const picks = jobs.map((j) => {
    const box = el("input", { type: "checkbox", value: j.id });
    box.checked = chosen.includes(j.id);
    return el("label", {}, box, ` ${j.id} (${j.name}) `);
  });
  const go = el("button", { onclick: () => {
    const ids = picks.map((l) => l.querySelector("input")).filter((b) => b.checked).map((b) => b.value);
    history.pushState(null, "", `/compare?jobs=${ids.join(",")}`);
    window.dispatchEvent(new Event("popstate"));
  } }, "compare");
  const chartBox = el("div", { class: "chart", id: "compare", "data-chart": "compare" });
  const tableBox = el("div", {});
  main.replaceChildren(el("h1", {}, "compare jobs"), el("div", { class: "filters" }, ...picks, go),
                       el("div", { class: "panel" }, el("h2", {}, "best score over trials"), chartBox),
                       el("div", { class: "panel" }, el("h2", {}, "best configs"), tableBox));
  if (chosen.length === 0) return;
  // A job with no complete trial yet has no best (the API answers 404): ask only for the ones the job list says
  // have one, so a running job's page load logs no failed request.
  const hasBest = new Set(jobs.filter((j) => j.best_trial !== "-1").map((j) => j.id));
  const data = await Promise.all(chosen.map(async (id) => {
    const [trials, best] = await Promise.all([
      allTrials(id),
      hasBest.has(id) ? get(`/api/jobs/${encodeURIComponent(id)}/best`).catch(() => null) : Promise.resolve(null)]);
    return { id, trials, best };
  }));
  const series = data.map(({ id, trials }) => {
    let best = -Infinity;
    const pts = [];
    for (const t of trials) {
      if (t.status === "TRIAL_COMPLETE") best = Math.max(best, t.score);
      if (best > -Infinity) pts.push([Number(t.number), best]);
    }
    return { name: id, type: "line", step: "end", data: pts };
  });
  echarts.init(chartBox, null, { renderer: "svg" }).setOption({
    animation: false, legend: { top: 0 }, tooltip: { trigger: "axis" }, grid: { left: 50, right: 20, top: 30, bottom: 40 },
    xAxis: { type: "value", name: "trial", nameLocation: "middle", nameGap: 25 }, yAxis: { type: "value", name: "best score" }, series });
  const knobs = [...new Set(data.flatMap((d) => (d.best ? Object.keys(d.best.params) : [])))].sort();
  tableBox.replaceChildren(el("table", { id: "best-configs" },
    el("thead", {}, el("tr", {}, el("th", {}, ""), ...data.map((d) => el("th", {}, d.id)))),
    el("tbody", {},
      el("tr", {}, el("td", {}, "best trial"), ...data.map((d) => el("td", { class: "num" }, d.best ? d.best.number : "—"))),
      el("tr", {}, el("td", {}, "score (within its job)"), ...data.map((d) => el("td", { class: "num" }, d.best ? score(d.best.score) : "—"))),
      ...knobs.map((k) => el("tr", {}, el("td", {}, k), ...data.map((d) => el("td", {}, d.best ? d.best.params[k] ?? "" : "")))))));
}
