// A trial (/jobs/<id>/trials/<n>): metrics per tier, accuracy, why the search chose it, kernel plans, knobs,
// log tail, and the exports (YAML, SGLang flags, env script).
import { get } from "./api.js";
import { el, failure, ms, pct, score, secs, status, timings } from "./format.js";

function table(id, headers, rows) {
  return el("table", { id }, el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
            el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", { class: typeof c === "number" ? "num" : "" }, c))))));
}

export async function trialPage(main, jobId, number) {
  const [job, t] = await Promise.all([get(`/api/jobs/${encodeURIComponent(jobId)}`), get(`/api/jobs/${encodeURIComponent(jobId)}/trials/${number}`)]);
  const s = t.suggestion || {};
  const levels = job.gate_levels || [];
  const exportBox = el("pre", { id: "export" }, "");
  const exportButton = (format, label) => el("button", { "data-export": format, onclick: async () => {
    try {
      const r = await get(`/api/jobs/${encodeURIComponent(jobId)}/export?trial=${number}&format=${format}`);
      exportBox.textContent = r.text;
    } catch (e) { exportBox.textContent = String(e.message); }
  } }, label);
  main.replaceChildren(...[
    el("h1", {}, el("a", { href: `/jobs/${encodeURIComponent(jobId)}` }, job.id), ` · trial ${t.number}`, t.is_reference ? " (reference)" : ""),
    el("div", { class: "cards" },
      ...[["status", status(t.status)], ["score", t.status === "TRIAL_COMPLETE" ? score(t.score) : "—"], ["C", t.gate],
          ["relative accuracy %", t.status === "TRIAL_COMPLETE" || t.status === "TRIAL_PRUNED" ? pct(t.relative_accuracy) : "—"], ["accuracy metric", t.accuracy_metric],
          ...(t.early_stop ? [["stopped after", t.early_stop.stage], ["best reachable score", score(t.early_stop.bound)],
                              ["incumbent then", score(t.early_stop.incumbent)], ["margin %", (100 * t.early_stop.margin).toFixed(0)]] : []),
          ["device", t.device], ["peak memory MiB", (Number(t.peak_memory_bytes) / 2 ** 20).toFixed(1)],
          ["failure", failure(t.failure_kind) || "—"]].map(([l, v]) =>
        el("div", { class: "card" }, el("div", { class: "label" }, l), el("div", { class: "value", "data-field": l }, v)))),
    t.error ? el("p", { class: "error" }, t.error) : null,
    timings(t.timings) ? el("p", { id: "timings" }, "time: ", el("span", { "data-field": "time" }, timings(t.timings))) : null,
    el("div", { class: "grid" },
      el("div", { class: "panel" }, el("h2", {}, "metrics per tier"),
        table("tiers", ["tier", "duration s", "TTFT p50 ms", "p90", "p99", "TPOT p50 ms", "p90", "p99", "tokens/s"],
          (t.tiers || []).map((m) => [m.tier, secs(m.duration_s), ms(m.ttft_p50_ms), ms(m.ttft_p90_ms), ms(m.ttft_p99_ms),
                                      ms(m.tpot_p50_ms), ms(m.tpot_p90_ms), ms(m.tpot_p99_ms), m.output_tokens_per_s.toFixed(1)]))),
      el("div", { class: "panel" }, el("h2", {}, "why the search chose it"),
        table("suggestion", ["", ""], [["strategy", s.strategy || ""],
          ["predicted score", `${(s.predicted_score || 0).toFixed(4)} ± ${(s.predicted_score_std || 0).toFixed(4)}`],
          ["expected improvement", (s.expected_improvement || 0).toExponential(3)], ["P(failure)", (s.p_failure || 0).toFixed(3)],
          ...(s.p_gate || []).map((p, i) => [`P(C = ${levels[i] ?? "?"})`, p.toFixed(3)]), ["note", s.note || ""]]))),
    el("div", { class: "grid" },
      el("div", { class: "panel" }, el("h2", {}, "knobs"),
        table("params", ["knob", "value"], Object.entries(t.params).sort().map(([k, v]) => [k, v]))),
      el("div", { class: "panel" }, el("h2", {}, "kernel plans"),
        (t.plans || []).length ? null : el("p", { class: "note" }, "none reported by the worker"),
        table("plans", ["op", "shape", "choice"], (t.plans || []).map((p) => [p.op, p.shape,
          Object.entries(p.choice).map(([k, v]) => `${k}=${v}`).join(" ")])))),
    el("div", { class: "panel" }, el("h2", {}, "export"), exportButton("yaml", "YAML"), exportButton("sglang-args", "SGLang flags"),
       exportButton("env-script", "env script"), exportBox),
    el("div", { class: "panel" }, el("h2", {}, "log tail"), el("pre", { id: "log" }, t.log_tail || ""))].filter(Boolean));
}
