// How numbers and names read on the pages: the same digits the CLI's tables use.
export const score = (x) => Number(x).toFixed(4);
export const pct = (x) => Number(x).toFixed(2);
export const secs = (x) => Number(x).toFixed(3);
export const ms = (x) => Number(x).toFixed(1);
export const state = (s) => s.replace(/^JOB_/, "");
export const status = (s) => s.replace(/^TRIAL_/, "");
export const failure = (k) => (k && k !== "FAILURE_KIND_UNSPECIFIED" ? k.replace(/^FAILURE_/, "").toLowerCase() : "");
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
