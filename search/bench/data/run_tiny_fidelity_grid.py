#!/usr/bin/env python3
"""Records tiny_fidelity_trials.csv, the multi-fidelity replay table bo_bench's `--landscape fidelity` looks up.

The grid and model are those of run_tiny_grid.py (tiny-llama-bpe4k, CPU backend, one thread, workload tiny-test,
8 accuracy samples). Every config runs once at each fidelity level of LEVELS; a level f < 1 shortens the workload
exactly as soartuned does (daemon/fidelity.cc, docs/FORMATS.md `multi_fidelity`): each request class keeps its
input_len and gets ceil(f * count) requests of ceil(f * output_len) output tokens, and the accuracy set keeps its
first ceil(f * samples) samples; each level has its own reference trial (the reference config at that level), so
relative accuracy compares equal sample sets. A row records the tier durations, the relative accuracy and the
trial's wall time (the simulated device time of a replayed trial). Configs run in a seeded random order and rows
are written as they finish, so a run stopped early leaves a uniform random subset of the grid.

Usage: run_tiny_fidelity_grid.py BUILD_DIR [--model DIR] [--jobs N] [--values KNOB=V1,V2 ...] [--skip CSV]
           > tiny_fidelity_trials.csv
  --values restricts a knob to some of the grid's values (repeatable); --skip leaves out configs that already
  have all their levels in an earlier output (concatenate the two outputs' rows afterwards).
"""
import argparse
import concurrent.futures as cf
import itertools
import json
import math
import os
import queue
import random
import subprocess
import sys
import tempfile
import time

KNOBS = ["weight_bits", "weight_group_size", "attn_weight_bits", "kv_cache_dtype", "max_running_requests"]
REFERENCE = (16, 128, 0, "bf16", 8)
GRID = list(itertools.product([16, 8, 4], [32, 64, 128], [0, 8, 4], ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"],
                              [1, 2, 4, 8, 16]))
LEVELS = [1 / 9, 1 / 3, 1.0]
REQUESTS = [("short-long", 8, 12, 2), ("short-short", 8, 4, 2), ("long-short", 40, 4, 1)]
SAMPLES = 8


def shortened(n, f):
    # The daemon's rule: ceil(f * n), at least 1 (the epsilon keeps 3 * (1/3) at 1).
    return max(1, math.ceil(f * n - 1e-9))


def trial_yaml(model, cfg, f, ref_mode, ref_path):
    launch = ", ".join(f"{k}: {v}" for k, v in zip(KNOBS, cfg))
    reqs = "\n".join(f"    - {{name: {n}, input_len: {i}, output_len: {shortened(o, f)}, count: {shortened(c, f)}}}"
                     for n, i, o, c in REQUESTS)
    return f"""model: hf:{model}
backend: cpu
seed: 1
launch: {{{launch}}}
workload:
  name: tiny-test
  requests:
{reqs}
tiers: [1, 8, 0]
accuracy: {{set: {model}/eval_public.jsonl, samples: {shortened(SAMPLES, f)}}}
reference: {{{ref_mode}: {ref_path}}}
"""


def run_one(worker, spec_path, core):
    cmd = ["taskset", "-c", str(core), worker, "--trial", spec_path, "--threads", "1"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        r = json.loads(p.stdout)
    except (subprocess.TimeoutExpired, ValueError):
        return None, time.monotonic() - t0
    return (r if r.get("ok") else None), time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--model", default=os.path.normpath(os.path.join(here, "../../../../shared/models/tiny-llama-bpe4k")))
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--limit", type=int, default=0, help="only the first N configs of the shuffled grid")
    ap.add_argument("--values", action="append", default=[], help="KNOB=V1,V2: only these values of KNOB")
    ap.add_argument("--skip", help="an earlier output: configs with every level there are not run again")
    a = ap.parse_args()
    keep = {}
    for v in a.values:
        k, vals = v.split("=", 1)
        if k not in KNOBS:
            sys.exit(f"--values: {k} is not one of {', '.join(KNOBS)}")
        keep[KNOBS.index(k)] = set(vals.split(","))
    done = set()
    if a.skip:
        with open(a.skip) as fh:
            rows = [line.strip().split(",") for line in fh if line.strip()][1:]
        levels_of = {}
        for r in rows:
            levels_of.setdefault(tuple(r[:len(KNOBS)]), set()).add(r[len(KNOBS)])
        done = {k for k, ls in levels_of.items() if len(ls) == len(LEVELS)}
    worker = os.path.join(a.build, "bin", "soartune-worker")
    tmp = tempfile.mkdtemp()
    refs = []
    for li, f in enumerate(LEVELS):
        ref = os.path.join(tmp, f"reference-{li}.json")
        path = os.path.join(tmp, f"ref-{li}.yaml")
        with open(path, "w") as fh:
            fh.write(trial_yaml(a.model, REFERENCE, f, "write", ref))
        if run_one(worker, path, 0)[0] is None:
            sys.exit(f"reference trial at level {f} failed")
        refs.append(ref)
    cfgs = [REFERENCE] + [c for c in GRID if c != REFERENCE]
    random.Random(21).shuffle(cfgs)
    cfgs = [c for c in cfgs if all(str(c[i]) in vs for i, vs in keep.items())]
    cfgs = [c for c in cfgs if tuple(str(x) for x in c) not in done]
    if a.limit:
        cfgs = cfgs[:a.limit]
    cores = queue.Queue()
    for k in range(a.jobs):
        cores.put(k % max(1, os.cpu_count() or 1))

    def task(i):
        core = cores.get()
        try:
            rows = []
            for li, f in enumerate(LEVELS):
                path = os.path.join(tmp, f"t{i}-{li}.yaml")
                with open(path, "w") as fh:
                    fh.write(trial_yaml(a.model, cfgs[i], f, "read", refs[li]))
                r, wall = run_one(worker, path, core)
                rows.append((f, r, wall))
            return i, rows
        finally:
            cores.put(core)

    print(",".join(KNOBS + ["fidelity", "d_c1", "d_c8", "d_cinf", "accuracy_pct", "failed", "wall_s"]), flush=True)
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        for i, rows in ex.map(task, range(len(cfgs))):
            key = [str(v) for v in cfgs[i]]
            for f, r, wall in rows:
                if r is None:
                    print(",".join(key + ["%.6f" % f, "0", "0", "0", "0", "1", "%.3f" % wall]), flush=True)
                    continue
                d = [r["tiers"][t]["duration_s"] for t in range(3)]
                print(",".join(key + ["%.6f" % f] + ["%.6g" % x for x in d] +
                               ["%.4f" % r["accuracy"]["relative_pct"], "0", "%.3f" % wall]), flush=True)


if __name__ == "__main__":
    main()
