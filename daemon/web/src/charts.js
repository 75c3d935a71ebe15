// ECharts options for the job page. Each builder takes the job and its trials (the API's JSON) and returns an
// option; the page keeps one chart instance per panel and calls setOption again when trials arrive.
import { TIERS, duration, failure } from "./format.js";

const FAILED_COLOR = "#c0392b";
const PRUNED_COLOR = "#b8860b";

export function makeChart(dom, trialCount) {
  // SVG keeps marks countable (the browser tests count them); canvas for large jobs, where it is faster.
  return echarts.init(dom, null, { renderer: trialCount > 2000 ? "canvas" : "svg" });
}

export function historyOption(job, trials) {
  const done = trials.filter((t) => t.status === "TRIAL_COMPLETE");
  const failed = trials.filter((t) => t.status === "TRIAL_FAILED" || t.status === "TRIAL_CANCELLED");
  // Stopped early: drawn at the best score it could still reach when the rule stopped it.
  const pruned = trials.filter((t) => t.status === "TRIAL_PRUNED");
  let best = -Infinity;
  const bestSoFar = [];
  for (const t of [...trials].sort((a, b) => Number(a.number) - Number(b.number))) {
    if (t.status === "TRIAL_COMPLETE") best = Math.max(best, t.score);
    if (best > -Infinity) bestSoFar.push([Number(t.number), best]);
  }
  return {
    animation: false,
    tooltip: { trigger: "item" },
    legend: { top: 0 },
    grid: { left: 50, right: 20, top: 30, bottom: 40 },
    xAxis: { type: "value", name: "trial", nameLocation: "middle", nameGap: 25, minInterval: 1 },
    yAxis: { type: "value", name: "score" },
    series: [
      { name: "score", type: "scatter", symbolSize: 8, data: done.map((t) => [Number(t.number), t.score]),
        tooltip: { formatter: (p) => `trial ${p.value[0]}: score ${p.value[1].toFixed(4)}` } },
      { name: "failed", type: "scatter", symbol: "triangle", symbolSize: 10, itemStyle: { color: FAILED_COLOR },
        data: failed.map((t) => ({ value: [Number(t.number), 0], kind: failure(t.failure_kind) || t.status.toLowerCase() })),
        label: { show: true, position: "top", fontSize: 9, formatter: (p) => p.data.kind },
        tooltip: { formatter: (p) => `trial ${p.value[0]}: ${p.data.kind}` } },
      { name: "stopped early", type: "scatter", symbol: "diamond", symbolSize: 9, itemStyle: { color: PRUNED_COLOR },
        data: pruned.map((t) => ({ value: [Number(t.number), t.early_stop ? t.early_stop.bound : 0],
                                   stage: t.early_stop ? t.early_stop.stage : "" })),
        tooltip: { formatter: (p) => `trial ${p.value[0]}: stopped after ${p.data.stage}, could reach at most ${p.value[1].toFixed(4)}` } },
      { name: "best so far", type: "line", step: "end", showSymbol: false, data: bestSoFar },
    ],
  };
}

// Points of (accuracy, duration) not dominated by another: higher accuracy and lower duration are better.
export function paretoFront(points) {
  const sorted = [...points].sort((a, b) => b[0] - a[0] || a[1] - b[1]);
  const front = [];
  let bestDuration = Infinity;
  for (const p of sorted) if (p[1] < bestDuration) { front.push(p); bestDuration = p[1]; }
  return front;
}

export function tradeoffOption(job, trials) {
  const done = trials.filter((t) => t.status === "TRIAL_COMPLETE");
  const above = job.gate_above_pct || [];
  const levels = job.gate_levels || [];
  const accs = done.map((t) => t.relative_accuracy);
  const lo = Math.floor(Math.min(...accs, ...(above.length ? [above[above.length - 1] - 1] : [95])));
  const hi = Math.ceil(Math.max(100, ...accs));
  // Gate bands: accuracy above above[i] (up to the next level's bound) gives C = levels[i]; below all, C = 0.
  const bands = [];
  for (let i = 0; i < above.length; i++)
    bands.push([{ xAxis: above[i], name: `C ${levels[i]}`, itemStyle: { color: `rgba(46,125,50,${0.22 - 0.05 * i})` } },
                { xAxis: i === 0 ? hi : above[i - 1] }]);
  if (above.length) bands.push([{ xAxis: lo, name: "C 0", itemStyle: { color: "rgba(192,57,43,0.10)" } },
                                { xAxis: above[above.length - 1] }]);
  const series = [];
  for (const tier of TIERS) {
    const pts = done.map((t) => [t.relative_accuracy, duration(t, tier), Number(t.number)]).filter((p) => p[1] !== null);
    series.push({ name: tier, type: "scatter", symbolSize: 7, data: pts,
                  tooltip: { formatter: (p) => `trial ${p.value[2]} ${tier}: ${p.value[1].toFixed(3)} s at ${p.value[0].toFixed(2)}%` },
                  markArea: tier === "c1" ? { silent: true, label: { position: "insideBottom", rotate: 90, align: "left", fontSize: 10 }, data: bands } : undefined });
    series.push({ name: `${tier} Pareto front`, type: "line", step: "start", showSymbol: false, lineStyle: { type: "dashed" },
                  data: paretoFront(pts).map((p) => [p[0], p[1]]) });
  }
  return {
    animation: false,
    tooltip: { trigger: "item" },
    legend: { top: 0, type: "scroll" },
    dataZoom: [{ type: "inside", xAxisIndex: 0, filterMode: "none" }],   // the gate bands are narrow: wheel to zoom
    grid: { left: 55, right: 20, top: 40, bottom: 40 },
    xAxis: { type: "value", name: "relative accuracy %", nameLocation: "middle", nameGap: 25, min: lo, max: hi },
    yAxis: { type: "log", name: "tier duration s" },
    series,
  };
}

export function parallelOption(job, trials, knobs) {
  const done = trials.filter((t) => t.status === "TRIAL_COMPLETE");
  const dims = knobs.map((k) => {
    const values = [...new Set(trials.map((t) => t.params[k]))];
    const numeric = values.every((v) => v !== "" && !isNaN(Number(v)));
    if (numeric) values.sort((a, b) => Number(a) - Number(b)); else values.sort();
    return { name: k, type: "category", data: values };
  });
  dims.push({ name: "score", type: "value" });
  const scores = done.map((t) => t.score);
  return {
    animation: false,
    parallelAxis: dims.map((d, i) => ({ dim: i, ...d, nameTextStyle: { fontSize: 10 }, nameRotate: 15 })),
    parallel: { left: 40, right: 60, top: 40, bottom: 30 },
    visualMap: { type: "continuous", dimension: dims.length - 1, min: Math.min(...scores, 0), max: Math.max(...scores, 1e-9),
                 right: 0, top: "middle", itemHeight: 120, calculable: false, text: ["score", ""],
                 inRange: { color: ["#d73027", "#fee08b", "#1a9850"] } },
    series: [{ type: "parallel", lineStyle: { width: 1.5, opacity: 0.8 },
               data: done.map((t) => [...knobs.map((k) => t.params[k]), t.score]) }],
  };
}

export function importanceOption(effects) {
  const rows = [...effects].reverse();
  return {
    animation: false,
    tooltip: { trigger: "item", formatter: (p) => `${p.name}: ${(p.value * 100).toFixed(1)}% of the score's variance` },
    grid: { left: 150, right: 30, top: 10, bottom: 30 },
    xAxis: { type: "value", name: "share of variance", max: 1 },
    yAxis: { type: "category", data: rows.map((e) => e.knob) },
    series: [{ type: "bar", data: rows.map((e) => e.share) }],
  };
}
