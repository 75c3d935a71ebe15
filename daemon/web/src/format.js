// How numbers and names read on the pages: the same digits the CLI's tables use.
export const score = (x) => Number(x).toFixed(4);
export const pct = (x) => Number(x).toFixed(2);
export const secs = (x) => Number(x).toFixed(3);
export const ms = (x) => Number(x).toFixed(1);
export const state = (s) => s.replace(/^JOB_/, "");
export const status = (s) => s.replace(/^TRIAL_/, "");
export const failure = (k) => (k && k !== "FAILURE_KIND_UNSPECIFIED" ? k.replace(/^FAILURE_/, "").toLowerCase() : "");
// Seconds with 3 significant digits, as the CLI's fmt_duration: "0.0123", "2.10", "31.2", "123"; "-" when absent.
export function secs3(x) {
  const s = Number(x);
  if (!(s > 0) || !Number.isFinite(s)) return "-";
  const unit = 10 ** (Math.floor(Math.log10(s)) - 2);
  const r = Math.round(s / unit) * unit;
  return r.toFixed(Math.max(0, 2 - Math.floor(Math.log10(r))));
}
// Where a trial's time went, the line `soartune show` prints: "load 31.2 s (weights 2.10, quantise 4.00, engine
// 20.3), accuracy 3.40 s, tiers 10.1 s"; "" when the worker reported no timings.
export function timings(t) {
  if (!t || !(Number(t.load_s) > 0)) return "";
  const parts = [["weights", t.weights_s], ["quantise", t.quantize_s], ["engine", t.prepare_s]]
    .filter(([, v]) => Number(v) > 0).map(([n, v]) => `${n} ${secs3(v)}`);
  let out = `load ${secs3(t.load_s)} s` + (parts.length ? ` (${parts.join(", ")})` : "");
  if (Number(t.accuracy_s) > 0) out += `, accuracy ${secs3(t.accuracy_s)} s`;
  if (Number(t.tiers_s) > 0) out += `, tiers ${secs3(t.tiers_s)} s`;
  return out;
}
export function time(unixMs) {
  const t = Number(unixMs);
  return t > 0 ? new Date(t).toLocaleString() : "";
}
export function duration(trial, tier) {
  const m = (trial.tiers || []).find((x) => x.tier === tier);
  return m ? m.duration_s : null;
}
export function el(tag, attrs = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  return e;
}
export const TIERS = ["c1", "c8", "cinf"];
