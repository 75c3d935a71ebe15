// Parameter importance as first-order variance shares (fANOVA-style main effects): for each knob that varies
// among the COMPLETE trials, the variance of the mean score per knob value (weighted by how many trials took
// it) divided by the total variance of the score. Interactions are not attributed; shares need not sum to 1.
export function mainEffects(trials, knobs) {
  const done = trials.filter((t) => t.status === "TRIAL_COMPLETE");
  const n = done.length;
  if (n < 2) return [];
  const mean = done.reduce((s, t) => s + t.score, 0) / n;
  const total = done.reduce((s, t) => s + (t.score - mean) ** 2, 0) / n;
  if (!(total > 0)) return [];
  const out = [];
  for (const k of knobs) {
    const groups = new Map();
    for (const t of done) {
      const v = t.params[k];
      const g = groups.get(v) || { sum: 0, count: 0 };
      g.sum += t.score; g.count += 1;
      groups.set(v, g);
    }
    if (groups.size < 2) continue;
    let between = 0;
    for (const g of groups.values()) between += g.count * (g.sum / g.count - mean) ** 2;
    out.push({ knob: k, share: between / n / total });
  }
  return out.sort((a, b) => b.share - a.share);
}

// The knobs whose value differs between trials of the job: the only ones worth a column or an axis.
export function varyingKnobs(trials) {
  const seen = new Map();
  for (const t of trials) for (const [k, v] of Object.entries(t.params || {})) {
    if (!seen.has(k)) seen.set(k, new Set());
    seen.get(k).add(v);
  }
  return [...seen.entries()].filter(([, vs]) => vs.size > 1).map(([k]) => k).sort();
}
