#!/usr/bin/env python3
"""Regenerates tiny_engine_trials.csv, the table of real trials that bo_bench's `replay` landscape looks up.

Every config of the grid below is run by soartune-worker (CPU backend, one thread, the shared tiny model
tiny-llama-bpe4k, workload tiny-test, 8 accuracy samples) REPEATS times; a row holds the median of each
tier's duration over the repeats (accuracy is deterministic). Trials run JOBS at a time, each pinned to its
own core, so run it on an otherwise idle machine with at least JOBS cores.

Usage: run_tiny_grid.py BUILD_DIR [--model DIR] [--jobs N] [--repeats N] > tiny_engine_trials.csv
"""
import argparse
import concurrent.futures as cf
import itertools
import json
import os
import queue
import statistics
import subprocess
import sys
import tempfile

KNOBS = ["weight_bits", "weight_group_size", "attn_weight_bits", "kv_cache_dtype", "max_running_requests"]
REFERENCE = (16, 128, 0, "bf16", 8)
GRID = list(itertools.product([16, 8, 4], [32, 64, 128], [0, 8, 4], ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"],
                              [1, 2, 4, 8, 16]))


def trial_yaml(model, cfg, ref_mode, ref_path):
    launch = ", ".join(f"{k}: {v}" for k, v in zip(KNOBS, cfg))
    return f"""model: hf:{model}
backend: cpu
seed: 1
launch: {{{launch}}}
workload:
  name: tiny-test
  requests:
    - {{name: short-long, input_len: 8, output_len: 12, count: 2}}
    - {{name: short-short, input_len: 8, output_len: 4, count: 2}}
    - {{name: long-short, input_len: 40, output_len: 4, count: 1}}
tiers: [1, 8, 0]
accuracy: {{set: {model}/eval_public.jsonl, samples: 8}}
reference: {{{ref_mode}: {ref_path}}}
"""


def run_one(worker, spec_path, core):
    cmd = ["taskset", "-c", str(core), worker, "--trial", spec_path, "--threads", "1"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
        r = json.loads(p.stdout)
    except (subprocess.TimeoutExpired, ValueError):
        return None
    return r if r.get("ok") else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--model", default=os.path.normpath(os.path.join(here, "../../../../shared/models/tiny-llama-bpe4k")))
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) - 2))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--raw", help="also write every repeat's tier durations here (JSON)")
    ap.add_argument("--limit", type=int, default=0, help="only the first N configs (a smoke test)")
    a = ap.parse_args()
    worker = os.path.join(a.build, "bin", "soartune-worker")
    tmp = tempfile.mkdtemp()
    ref = os.path.join(tmp, "reference.json")
    with open(os.path.join(tmp, "ref.yaml"), "w") as f:
        f.write(trial_yaml(a.model, REFERENCE, "write", ref))
    if run_one(worker, os.path.join(tmp, "ref.yaml"), 0) is None:
        sys.exit("reference trial failed")
    cfgs = [REFERENCE] + [c for c in GRID if c != REFERENCE]
    if a.limit:
        cfgs = cfgs[:a.limit]
    specs = []
    for i, c in enumerate(cfgs):
        path = os.path.join(tmp, f"t{i}.yaml")
        with open(path, "w") as f:
            f.write(trial_yaml(a.model, c, "read", ref))
        specs.append(path)
    cores = queue.Queue()
    for k in range(a.jobs):
        cores.put(k + 1)

    def task(i):
        core = cores.get()
        try:
            return i, run_one(worker, specs[i], core)
        finally:
            cores.put(core)

    results = {i: [] for i in range(len(cfgs))}
    with cf.ThreadPoolExecutor(a.jobs) as ex:
        # Repeats interleaved: every config once, then again, so slow drift spreads over all configs.
        for i, r in ex.map(task, [i for _ in range(a.repeats) for i in range(len(cfgs))]):
            results[i].append(r)
    print(",".join(KNOBS + ["d_c1", "d_c8", "d_cinf", "accuracy_pct", "failed"]))
    for i, c in enumerate(cfgs):
        ok = [r for r in results[i] if r is not None]
        key = [str(v) for v in c]
        if len(ok) < len(results[i]):
            print(",".join(key + ["0", "0", "0", "0", "1"]))
            continue
        d = [statistics.median(r["tiers"][t]["duration_s"] for r in ok) for t in range(3)]
        print(",".join(key + ["%.6g" % x for x in d] + ["%.4f" % ok[0]["accuracy"]["relative_pct"], "0"]))
    sys.stdout.flush()
    if a.raw:
        with open(a.raw, "w") as f:
            json.dump([{"config": list(c), "durations": [[t["duration_s"] for t in r["tiers"]] if r else None
                                                         for r in results[i]]} for i, c in enumerate(cfgs)], f)


if __name__ == "__main__":
    main()
