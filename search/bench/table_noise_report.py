#!/usr/bin/env python3
"""What a repeated multi-fidelity replay table (run_tiny_fidelity_grid.py's format, e.g.
tiny_gpu_fidelity_trials.csv) says about searching it: the timing noise between repeats, the gaps between the best
configs against that noise, how well the screening levels rank the full level, and what a run costs at each level.

Scores follow search/scoring.cc with the default scoring (weights c1 0.4, c8 0.3, cinf 0.3; gate above 99 / 98 /
97% -> 1 / 0.96 / 0.92, accuracy capped at 100) and durations relative to the fastest config of the same level, as
bo_bench's replay and fidelity landscapes do; a config's truth is the per-metric median of its repeats (with 2
repeats, their mean). A table recorded one repeat at a time may repeat only some configs: the noise is measured
over those (it needs at least 3), everything else over every config measured at every level; a table without
repeats gets everything but the noise. Standard library only, so it runs wherever the table does. The formula is the one of
search/scoring.cc, restated here as scripts/botorch_peer.py restates it; --check-export holds it to bo_bench's own
scores (its --export-landscape of the same table) and fails on any difference.

Usage: table_noise_report.py TABLE.csv [--within PCT] [--bo-csv BO_BENCH_CSV] [--draws N] [--check-export CSV]
  --bo-csv: bo_bench's per-seed output (`--csv`) of a replay run on the same table: adds how often each strategy
  reached the target within a third of random's expected median.
"""
import argparse
import csv
import math
import random
import statistics
import sys

TIERS = ["d_c1", "d_c8", "d_cinf"]
WEIGHTS = [0.4, 0.3, 0.3]
GATE = [(99.0, 1.0), (98.0, 0.96), (97.0, 0.92)]
COSTS = ["load_s", "accuracy_s", "tiers_s"]   # load_s = weights_s + quantize_s + prepare_s


def gate(acc):
    acc = min(acc, 100.0)
    for above, c in GATE:
        if acc > above:
            return c
    return 0.0


def score(durations, acc, best):
    return sum(w * 100.0 * b / d for w, b, d in zip(WEIGHTS, best, durations)) * gate(acc)


def quantile(v, q):
    v = sorted(v)
    x = q * (len(v) - 1)
    i = int(math.floor(x))
    return v[i] if i + 1 >= len(v) else v[i] + (x - i) * (v[i + 1] - v[i])


def ranks(v):
    """Average ranks (ties share the mean rank), as Spearman's coefficient needs."""
    order = sorted(range(len(v)), key=lambda i: v[i])
    r = [0.0] * len(v)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and v[order[j + 1]] == v[order[i]]:
            j += 1
        for k in range(i, j + 1):
            r[order[k]] = (i + j) / 2.0 + 1
        i = j + 1
    return r


def spearman(a, b):
    ra, rb = ranks(a), ranks(b)
    ma, mb = statistics.fmean(ra), statistics.fmean(rb)
    cov = sum((x - ma) * (y - mb) for x, y in zip(ra, rb))
    return cov / math.sqrt(sum((x - ma) ** 2 for x in ra) * sum((y - mb) ** 2 for y in rb))


def stats(v):
    return "median %.1f%%, p90 %.1f%%, max %.1f%%" % (100 * statistics.median(v), 100 * quantile(v, 0.9), 100 * max(v))


def read(path):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(f"{path}: no rows")
    header = list(rows[0].keys())
    if "fidelity" not in header:
        sys.exit(f"{path}: no `fidelity` column; expected run_tiny_fidelity_grid.py's format")
    knobs = header[: header.index("fidelity")]
    table = {}   # (config, level) -> list of runs (completed only)
    order = []
    for r in rows:
        cfg = tuple(r[k] for k in knobs)
        if cfg not in order:
            order.append(cfg)
        if r["failed"] != "0":
            continue
        run = {k: float(r[k]) for k in TIERS + ["accuracy_pct", "wall_s"] + [c for c in COSTS if c in r]}
        table.setdefault((cfg, round(float(r["fidelity"]), 4)), []).append(run)
    return knobs, order, table


def level_scores(table, configs, level, pick):
    """Gated score per config at a level, each config's durations chosen by pick(runs) -> (durations, acc); the
    reference durations are the fastest of the same choice over the level, as a replay of that choice sees them."""
    chosen = {c: pick(table[(c, level)]) for c in configs}
    best = [min(d[t] for d, _ in chosen.values()) for t in range(3)]
    return {c: score(d, a, best) for c, (d, a) in chosen.items()}


def median_pick(runs):
    return [statistics.median(r[t] for r in runs) for t in TIERS], statistics.median(r["accuracy_pct"] for r in runs)


def repeat_pick(i):
    """Repeat i of a config's runs (its last where it has fewer)."""
    return lambda runs: ([runs[min(i, len(runs) - 1)][t] for t in TIERS], runs[min(i, len(runs) - 1)]["accuracy_pct"])


def fmt_cfg(knobs, c):
    return " ".join(f"{k}={v}" for k, v in zip(knobs, c))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("table")
    ap.add_argument("--within", type=float, default=1.0, help="target: within PCT%% of the best (bo_bench's --within)")
    ap.add_argument("--bo-csv", help="bo_bench --csv output of a replay run on the same table")
    ap.add_argument("--draws", type=int, default=10000, help="random repeat draws for the target-set stability")
    ap.add_argument("--check-export", help="bo_bench --export-landscape of this table: its true_score per config must "
                    "equal this script's full-level score")
    a = ap.parse_args()
    frac = 1 - a.within / 100

    knobs, order, table = read(a.table)
    levels = sorted({lv for _, lv in table})
    full = levels[-1]
    # Configs measured at every level (the scores, ranks and costs below), and those of them with at least 2
    # completed repeats at every level (the noise between repeats). A table recorded one repeat at a time may hold
    # a second repeat of some configs only: the others take their one run as both repeats.
    configs = [c for c in order if all(table.get((c, lv)) for lv in levels)]
    repeated = [c for c in configs if all(len(table[(c, lv)]) >= 2 for lv in levels)]
    print(f"table {a.table}: {len(order)} configs, {len(configs)} at every level "
          f"({', '.join('%.4g' % lv for lv in levels)}), {len(repeated)} of them with >= 2 completed repeats at "
          f"every level; knobs {', '.join(knobs)}")
    if len(repeated) < 3:
        print(f"\n## Timing noise between repeats: not measured (it needs >= 3 configs with 2 completed repeats at "
              f"every level: run_tiny_fidelity_grid.py --repeats 2, or a later --first-repeat 1; this table has "
              f"{len(repeated)})")
    else:
        print(f"\n## Timing noise between repeats: |r0 - r1| / mean of the two, over the {len(repeated)} repeated configs")
        for lv in levels:
            for t in TIERS:
                v = [abs(table[(c, lv)][0][t] - table[(c, lv)][1][t]) /
                     statistics.fmean([table[(c, lv)][0][t], table[(c, lv)][1][t]]) for c in repeated]
                print(f"  level {lv:.4g} {t:7s} {stats(v)}")
            s0 = level_scores(table, repeated, lv, repeat_pick(0))
            s1 = level_scores(table, repeated, lv, repeat_pick(1))
            v = [abs(s0[c] - s1[c]) / statistics.fmean([s0[c], s1[c]]) for c in repeated if s0[c] + s1[c] > 0]
            print(f"  level {lv:.4g} gated score (each repeat scored against its own repeat's fastest; "
                  f"{len(v)} configs that pass the gate) {stats(v)}")
        # Where the noise sits: a knob value whose configs carry most of it (e.g. launch-bound steps without CUDA
        # graphs) says which configs a repeat would be worth spending on.
        print(f"  by knob value, level {full:.4g}, the three tiers together:")
        for i, k in enumerate(knobs):
            for val in dict.fromkeys(c[i] for c in repeated):
                v = [abs(table[(c, full)][0][t] - table[(c, full)][1][t]) /
                     statistics.fmean([table[(c, full)][0][t], table[(c, full)][1][t]])
                     for c in repeated if c[i] == val for t in TIERS]
                print(f"    {k}={val} ({len(v) // 3} configs): {stats(v)}")

    print("\n## The top of the full level (median of repeats)")
    med = level_scores(table, configs, full, median_pick)
    s0 = level_scores(table, configs, full, repeat_pick(0))
    s1 = level_scores(table, configs, full, repeat_pick(1))
    if a.check_export:
        with open(a.check_export, newline="") as f:
            exported = {tuple(r[k] for k in knobs): float(r["true_score"]) for r in csv.DictReader(f)}
        bad = [c for c in configs if c not in exported or abs(exported[c] - med[c]) > 1e-3 * max(1.0, med[c])]
        if bad or len(exported) != len(configs):
            sys.exit(f"{a.check_export}: bo_bench's scores differ from this script's for {len(bad)} configs "
                     f"(e.g. {fmt_cfg(knobs, bad[0]) if bad else 'none'}), or its {len(exported)} configs are not "
                     f"the table's {len(configs)}: the scoring restated here no longer matches search/scoring.cc")
        print(f"  bo_bench's scores ({a.check_export}): equal to these for all {len(configs)} configs")
    top = sorted(configs, key=lambda c: -med[c])
    best = med[top[0]]
    print(f"  best {best:.3f}; target: >= {frac * best:.3f} ({a.within:g}% below the best)")
    print("  rank  median  repeat0 repeat1  gap to best  config")
    for i, c in enumerate(top[:8]):
        print(f"  {i + 1:4d} {med[c]:7.3f} {s0[c]:7.3f} {s1[c]:7.3f} {100 * (1 - med[c] / best):8.2f}%    "
              f"{fmt_cfg(knobs, c)}")
    targets = {c for c in configs if med[c] >= frac * best}
    nxt = max(med[c] for c in configs if c not in targets)
    worst_target = min(med[targets_c] for targets_c in targets)
    print(f"  targets (median): {len(targets)}; the lowest target {worst_target:.3f}, the next config {nxt:.3f}: "
          f"gap {100 * (worst_target - nxt) / best:.2f}% of the best")
    for name, s in (("repeat 0 alone", s0), ("repeat 1 alone", s1)) if repeated else ():
        b = max(s.values())
        t = {c for c in configs if s[c] >= frac * b}
        print(f"  {name}: best {b:.3f}, {len(t)} targets, same set as the medians' : {t == targets}")
    rng = random.Random(1)
    differ = best_out = 0
    for _ in range(a.draws if repeated else 0):
        pick = {c: rng.randrange(len(table[(c, full)])) for c in configs}
        chosen = {c: repeat_pick(pick[c])(table[(c, full)]) for c in configs}
        bd = [min(d[t] for d, _ in chosen.values()) for t in range(3)]
        s = {c: score(d, acc, bd) for c, (d, acc) in chosen.items()}
        b = max(s.values())
        t = {c for c in configs if s[c] >= frac * b}
        differ += t != targets
        best_out += not (targets & {c for c in configs if s[c] == b})
    if repeated:
        print(f"  {a.draws} draws of one repeat per config ({len(repeated)} of {len(configs)} have two): the within-{a.within:g}% set differs from the medians' in "
              f"{100 * differ / a.draws:.1f}%; the draw's best is not a median target in {100 * best_out / a.draws:.1f}%")

    print("\n## Rank correlation (Spearman, average ranks for ties) of each level with the full level, medians")
    fs = med
    for lv in levels[:-1]:
        ls = level_scores(table, configs, lv, median_pick)
        parts = [f"gated score {spearman([ls[c] for c in configs], [fs[c] for c in configs]):.3f}"]
        for t in TIERS:
            parts.append(f"{t} {spearman([statistics.median(r[t] for r in table[(c, lv)]) for c in configs], [statistics.median(r[t] for r in table[(c, full)]) for c in configs]):.3f}")
        passing = [c for c in configs if fs[c] > 0]
        parts.append(f"gated score over the {len(passing)} configs passing at full "
                     f"{spearman([ls[c] for c in passing], [fs[c] for c in passing]):.3f}")
        lrank = sorted(configs, key=lambda c: -ls[c])
        where = ", ".join(str(lrank.index(c) + 1) for c in sorted(targets, key=lambda c: -fs[c]))
        print(f"  level {lv:.4g}: " + "; ".join(parts) + f"; the full level's targets rank {where} here")
    if repeated:
        print("  repeat 0 against repeat 1 at the full level (the noise's own ceiling): gated score "
              f"{spearman([s0[c] for c in configs], [s1[c] for c in configs]):.3f}")

    print("\n## Cost of a run (wall_s: process start to result), per level, medians over runs")
    xs, ys = [], []
    for lv in levels:
        runs = [r for c in configs for r in table[(c, lv)]]
        line = [f"wall {statistics.median(r['wall_s'] for r in runs):.3f} s"]
        for k in COSTS:
            if k in runs[0]:
                line.append(f"{k} {statistics.median(r[k] for r in runs):.3f}")
        if all(k in runs[0] for k in COSTS):
            rest = [r["wall_s"] - sum(r[k] for k in COSTS) for r in runs]
            line.append(f"rest (process start and exit, CUDA context: outside the worker's accounts) {statistics.median(rest):.3f}")
        print(f"  level {lv:.4g} ({len(runs)} runs): " + ", ".join(line))
        for r in runs:
            xs.append(lv)
            ys.append(r["wall_s"])
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)
    icpt = my - slope * mx
    print(f"  least squares over every run: wall = {icpt:.3f} s + {slope:.3f} s x fidelity; a run at "
          + ", ".join(f"{lv:.4g} costs {100 * (icpt + slope * lv) / (icpt + slope * full):.0f}%" for lv in levels[:-1])
          + " of a full one")
    for k in COSTS:
        if k in table[(configs[0], full)][0]:
            m = [statistics.median(r[k] for c in configs for r in table[(c, lv)]) for lv in levels]
            print(f"  {k}: " + " / ".join("%.3f" % x for x in m) + " s at the levels")

    print("\n## Random search's trials to the target (the reference first, then draws without repeats)")
    M, k = len(configs) - 1, len(targets - {order[0]})
    surv, cdf, mean = 1.0, [], 1.0
    for j in range(M - k + 1):
        mean += surv   # E[T] = 1 + sum_j P(more than j draws needed)
        cdf.append(1 - surv)
        surv *= (M - k - j) / (M - j)
    cdf.append(1.0)
    median = 1 + next(j for j, p in enumerate(cdf) if p >= 0.5)
    print(f"  {k} targets among {M} configs: mean {mean:.2f}, median {median} trials; 3x fewer than the median is "
          f"<= {median / 3:.2f}")
    n3 = int(median / 3)
    print(f"  P(a target within the first {n3} trials) for draws that know nothing: {100 * cdf[n3 - 1]:.1f}% "
          f"(a median at <= {median / 3:.2f} needs > 50%)")
    if a.bo_csv:
        with open(a.bo_csv, newline="") as f:
            per = {}
            for r in csv.DictReader(f):
                # A seed that never reached the target has no count: it is left out of the median, and said.
                v = r.get("trials_to_1pct") or ""
                per.setdefault(r["strategy"], []).append(int(v) if v.strip().lstrip("-").isdigit() and int(v) > 0 else None)
        for s, v in per.items():
            done = [x for x in v if x is not None]
            hist = " ".join(f"{t}:{done.count(t)}" for t in sorted(set(done)) if t <= 12)
            print(f"  bo_bench {s}: {len(v)} seeds ({len(v) - len(done)} not reached), median "
                  f"{statistics.median(done):.1f}, mean {statistics.fmean(done):.2f}; within {n3} trials in "
                  f"{100 * sum(x <= n3 for x in done) / len(v):.1f}% of seeds; seeds by trials (up to 12) {hist}")


if __name__ == "__main__":
    main()
