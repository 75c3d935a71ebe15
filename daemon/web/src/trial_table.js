// The job's trial table: click a header to sort, filter by status and by knob values. Shows at most kRows rows.
import { TIERS, duration, el, failure, pct, score, secs, status } from "./format.js";

const kRows = 500;

export class TrialTable {
  constructor(container, jobId) {
    this.container = container;
    this.jobId = jobId;
    this.sortKey = "number";
    this.desc = false;
    this.filters = { status: "" };
  }

  columns(knobs) {
    const cols = [
      { key: "number", label: "#", value: (t) => Number(t.number), text: (t) => el("a", { href: `/jobs/${encodeURIComponent(this.jobId)}/trials/${t.number}` }, t.number) },
      { key: "status", label: "status", value: (t) => t.status, text: (t) => status(t.status) },
      { key: "score", label: "score", num: true, value: (t) => t.score, text: (t) => (t.status === "TRIAL_COMPLETE" ? score(t.score) : "") },
      { key: "gate", label: "C", num: true, value: (t) => t.gate, text: (t) => (t.status === "TRIAL_COMPLETE" ? String(t.gate) : "") },
      { key: "accuracy", label: "accuracy %", num: true, value: (t) => t.relative_accuracy, text: (t) => (t.status === "TRIAL_COMPLETE" || t.status === "TRIAL_PRUNED" ? pct(t.relative_accuracy) : "") },
      ...TIERS.map((tier) => ({ key: tier, label: `${tier} s`, num: true, value: (t) => duration(t, tier) ?? Infinity,
                                text: (t) => (duration(t, tier) === null ? "" : secs(duration(t, tier))) })),
      ...knobs.map((k) => ({ key: `knob:${k}`, label: k, knob: k, value: (t) => (isNaN(Number(t.params[k])) ? t.params[k] : Number(t.params[k])), text: (t) => t.params[k] })),
      { key: "failure", label: "failure", value: (t) => failure(t.failure_kind), text: (t) => failure(t.failure_kind) },
      { key: "strategy", label: "chosen by", value: (t) => (t.suggestion ? t.suggestion.strategy : ""), text: (t) => (t.suggestion ? t.suggestion.strategy : "") },
    ];
    return cols;
  }

  render(job, trials, knobs) {
    const cols = this.columns(knobs);
    const statusSel = el("select", { "data-filter": "status", onchange: (e) => { this.filters.status = e.target.value; this.render(job, trials, knobs); } },
      ...["", "TRIAL_COMPLETE", "TRIAL_FAILED", "TRIAL_RUNNING", "TRIAL_CANCELLED", "TRIAL_PRUNED"].map((s) => {
        const o = el("option", { value: s }, s ? status(s).toLowerCase() : "all");
        if (s === this.filters.status) o.selected = true;
        return o;
      }));
    const knobSels = knobs.map((k) => {
      const values = [...new Set(trials.map((t) => t.params[k]))].sort();
      const s = el("select", { "data-filter": k, onchange: (e) => { this.filters[k] = e.target.value; this.render(job, trials, knobs); } },
        el("option", { value: "" }, `${k}: any`), ...values.map((v) => el("option", { value: v }, `${k} = ${v}`)));
      s.value = this.filters[k] || "";
      return s;
    });
    const shown = trials.filter((t) => (!this.filters.status || t.status === this.filters.status) &&
                                       knobs.every((k) => !this.filters[k] || t.params[k] === this.filters[k]));
    const col = cols.find((c) => c.key === this.sortKey) || cols[0];
    shown.sort((a, b) => {
      const x = col.value(a), y = col.value(b);
      const c = x < y ? -1 : x > y ? 1 : Number(a.number) - Number(b.number);
      return this.desc ? -c : c;
    });
    const head = el("tr", {}, ...cols.map((c) => el("th", { "data-sort": c.key, onclick: () => {
      if (this.sortKey === c.key) this.desc = !this.desc; else { this.sortKey = c.key; this.desc = c.num === true; }
      this.render(job, trials, knobs);
    } }, c.label + (c.key === this.sortKey ? (this.desc ? " ▼" : " ▲") : ""))));
    const body = shown.slice(0, kRows).map((t) => {
      const cls = [t.status === "TRIAL_FAILED" || t.status === "TRIAL_CANCELLED" ? "failed" : "",
                   t.status === "TRIAL_PRUNED" ? "pruned" : "", t.number === job.best_trial ? "best" : ""].join(" ");
      return el("tr", { class: cls, "data-trial": t.number },
        ...cols.map((c) => el("td", { class: c.num ? "num" : "", "data-field": c.key }, c.text(t))));
    });
    this.container.replaceChildren(
      el("div", { class: "filters" }, "filter:", statusSel, ...knobSels,
         el("span", { class: "note" }, shown.length > kRows ? `showing ${kRows} of ${shown.length}` : `${shown.length} trials`)),
      el("table", { id: "trials" }, el("thead", {}, head), el("tbody", {}, ...body)));
  }
}
