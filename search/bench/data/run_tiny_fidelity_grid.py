#!/usr/bin/env python3
"""Records a multi-fidelity replay table (tiny_fidelity_trials.csv on the CPU, tiny_gpu_fidelity_trials.csv on a
GPU), the table bo_bench's `--landscape fidelity` (and, at fidelity 1, `--landscape replay`) looks up.

Model: tiny-llama-bpe4k with its public accuracy set eval_public.jsonl (real accuracy: the `task` metric against
the reference config's outputs). Every config runs at each fidelity level of LEVELS, REPEATS times; a level f < 1
shortens the workload exactly as soartuned does (daemon/fidelity.cc, docs/FORMATS.md `multi_fidelity`): each
request class keeps its input_len and gets ceil(f * count) requests of ceil(f * output_len) output tokens, and the
accuracy set keeps its first ceil(f * samples) samples; each level has its own reference trial (the reference
config at that level), so relative accuracy compares equal sample sets. A row records the repeat index, the tier
durations, the relative accuracy and the trial's wall time (process start to result: the simulated device time of
a replayed trial, since the daemon starts a worker per trial too), then the worker's own account of that time
(load_s = weights_s + quantize_s + prepare_s, accuracy_s, tiers_s; readers find columns by name). Configs run in a seeded random order (the
reference config first, so it is the table's first row) and rows are written as they finish, so a run stopped
early leaves a uniform random subset of the grid.

--backend cpu (the recorded CPU table): one thread per trial, JOBS trials at a time each pinned to a core; the grid
  of run_tiny_grid.py and its workload tiny-test (8 accuracy samples).
--backend cuda: trials run one at a time (the GPU is the timed resource). The workload is the race's three
  request shapes (race-gpu: 100->4000, 100->500, 60000->500) scaled to the model's 2048-token context: 4 x
  32->512, 8 x 32->64, 2 x 1536->64, with 16 accuracy samples. A decode step of this model is a few hundred
  microseconds, so a full trial's tiers hold thousands of steps (c1: 2688) and last tenths of seconds: per-launch
  jitter averages out and the tiers measure the knobs (graphs, batch, formats), not the timer. Grid: the GPU knobs
  that change a small model's step: weight_bits 16/8/4 (group 128), kv_cache_dtype bf16/fp8_e4m3,
  max_running_requests 2/4/8/16, cuda_graphs on/off (48 configs).
--backend cuda-8b: the 8B shape with proxy accuracy. Durations come from synthetic:llama3-8b (--timed-model names
  another, e.g. synthetic:tiny with --worker-backend cpu to check the plumbing without a GPU); the accuracy is the
  same launch config's on the trained model (--model) against its reference config, 16 samples of its public set,
  as a job with `accuracy.model` measures it (every row is a proxy accuracy). The workload is
  configs/jobs/h200-llama3-8b-mf.yaml's race-gpu-short (2 x 100->512, 4 x 100->128, 1 x 8192->128). Grid: the
  knobs that move the 8B step: weight_bits 16/8/4 (group 128), kv_cache_dtype bf16/fp8_e4m3,
  max_running_requests 4/8/16 (18 configs; CUDA graphs on, the default).
Each config's runs are made together (repeat by repeat, each repeat over every level), so --deadline cuts at a
config boundary: a config is started only if the mean time of the configs so far still fits before the deadline.

Usage: run_tiny_fidelity_grid.py BUILD_DIR [--backend cpu|cuda|cuda-8b] [--model DIR] [--jobs N] [--repeats N]
           [--first-repeat N] [--deadline SECONDS] [--values KNOB=V1,V2 ...] [--skip CSV] [--limit N]
           [--timed-model SPEC] [--worker-backend cpu|cuda] > table.csv
  --values restricts a knob to some of the grid's values (repeatable); --skip leaves out configs that already
  have all their levels, for every repeat this call runs, in an earlier output (concatenate the two outputs' rows
  afterwards); --first-repeat numbers this call's repeats from N, so that a later call adds a second repeat to a
  table recorded one repeat at a time (--repeats 1 --first-repeat 1 --skip TABLE).
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

LEVELS = [1 / 9, 1 / 3, 1.0]
SETUPS = {
    "cpu": dict(
        knobs=["weight_bits", "weight_group_size", "attn_weight_bits", "kv_cache_dtype", "max_running_requests"],
        reference=(16, 128, 0, "bf16", 8),
        grid=list(itertools.product([16, 8, 4], [32, 64, 128], [0, 8, 4], ["bf16", "fp16", "fp8_e4m3", "fp8_e5m2"],
                                    [1, 2, 4, 8, 16])),
        workload="tiny-test",
        requests=[("short-long", 8, 12, 2), ("short-short", 8, 4, 2), ("long-short", 40, 4, 1)],
        samples=8),
    "cuda": dict(
        knobs=["weight_bits", "kv_cache_dtype", "max_running_requests", "cuda_graphs"],
        reference=(16, "bf16", 8, "true"),
        grid=list(itertools.product([16, 8, 4], ["bf16", "fp8_e4m3"], [2, 4, 8, 16], ["true", "false"])),
        workload="race-gpu-tiny",
        requests=[("short-long", 32, 512, 4), ("short-short", 32, 64, 8), ("long-short", 1536, 64, 2)],
        samples=16),
    "cuda-8b": dict(
        knobs=["weight_bits", "kv_cache_dtype", "max_running_requests"],
        reference=(16, "bf16", 8),
        grid=list(itertools.product([16, 8, 4], ["bf16", "fp8_e4m3"], [4, 8, 16])),
        workload="race-gpu-short",
        requests=[("short-long", 100, 512, 2), ("short-short", 100, 128, 4), ("long-short", 8192, 128, 1)],
        samples=16,
        timed_model="synthetic:llama3-8b",
        worker_backend="cuda"),
}


def shortened(n, f):
    # The daemon's rule: ceil(f * n), at least 1 (the epsilon keeps 3 * (1/3) at 1).
    return max(1, math.ceil(f * n - 1e-9))


def trial_yaml(setup, backend, model, timed_model, cfg, f, ref_mode, ref_path):
    """The worker's trial file. With a timed model (the 8B shape) the trained model measures only the accuracy;
    its reference outputs are then written by a trial of the trained model itself (the reference config, one
    short request), which computes them as the proxy pass would, without timing the large model."""
    launch = ", ".join(f"{k}: {v}" for k, v in zip(setup["knobs"], cfg))
    requests = setup["requests"]
    if timed_model and ref_mode == "write":
        timed_model, requests = None, [("reference", 8, 4, 1)]
    reqs = "\n".join(f"    - {{name: {n}, input_len: {i}, output_len: {shortened(o, f)}, count: {shortened(c, f)}}}"
                     for n, i, o, c in requests)
    proxy = f", model: hf:{model}" if timed_model else ""
    return f"""model: {timed_model or "hf:" + model}
backend: {backend}
seed: 1
launch: {{{launch}}}
workload:
  name: {setup["workload"]}
  requests:
{reqs}
tiers: [1, 8, 0]
accuracy: {{set: {model}/eval_public.jsonl, samples: {shortened(setup["samples"], f)}{proxy}}}
reference: {{{ref_mode}: {ref_path}}}
"""


def run_one(worker, spec_path, backend, core, timeout):
    cmd = [worker, "--trial", spec_path]
    if backend == "cpu":
        cmd = ["taskset", "-c", str(core)] + cmd + ["--threads", "1"]
    t0 = time.monotonic()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
        r = json.loads(p.stdout)
    except (subprocess.TimeoutExpired, ValueError):
        return None, time.monotonic() - t0
    return (r if r.get("ok") else None), time.monotonic() - t0


def main():
    t_start = time.monotonic()
    ap = argparse.ArgumentParser()
    ap.add_argument("build")
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--backend", choices=sorted(SETUPS), default="cpu")
    ap.add_argument("--model", default=os.path.normpath(os.path.join(here, "../../../../shared/models/tiny-llama-bpe4k")))
    ap.add_argument("--jobs", type=int, default=0, help="CPU backend: trials at once (default: cores - 2)")
    ap.add_argument("--repeats", type=int, default=1, help="runs of each config at each level (rows keep the index)")
    ap.add_argument("--first-repeat", type=int, default=0,
                    help="index of the first repeat (a later call adds repeats to an earlier table: --first-repeat 1)")
    ap.add_argument("--deadline", type=float, default=0, help="seconds from the start: no config started after")
    ap.add_argument("--limit", type=int, default=0, help="only the first N configs of the shuffled grid")
    ap.add_argument("--values", action="append", default=[], help="KNOB=V1,V2: only these values of KNOB")
    ap.add_argument("--skip", help="an earlier output: configs with every level there are not run again")
    ap.add_argument("--timed-model", help="cuda-8b: the model the durations come from (default synthetic:llama3-8b)")
    ap.add_argument("--worker-backend", choices=["cpu", "cuda"], help="cuda-8b: the worker's backend (default cuda)")
    ap.add_argument("--trial-timeout", type=float, default=120, help="seconds one worker run may take")
    ap.add_argument("--list", action="store_true", help="print the configs this call would run, in order, and exit")
    a = ap.parse_args()
    setup = SETUPS[a.backend]
    knobs = setup["knobs"]
    if (a.timed_model or a.worker_backend) and "timed_model" not in setup:
        sys.exit("--timed-model and --worker-backend apply to --backend cuda-8b only")
    timed_model = a.timed_model or setup.get("timed_model")
    backend = a.worker_backend or setup.get("worker_backend", a.backend)
    # The GPU is one timed resource: its trials run one at a time.
    jobs = 1 if backend == "cuda" else (a.jobs or max(1, (os.cpu_count() or 2) - 2))
    keep = {}
    for v in a.values:
        k, vals = v.split("=", 1)
        if k not in knobs:
            sys.exit(f"--values: {k} is not one of {', '.join(knobs)}")
        keep[knobs.index(k)] = set(vals.split(","))
    if a.first_repeat < 0:
        sys.exit("--first-repeat: must be >= 0")
    reps = range(a.first_repeat, a.first_repeat + a.repeats)
    done = set()
    if a.skip:
        # A config is done when the earlier output holds every level of every repeat this call would run.
        with open(a.skip) as fh:
            rows = [line.strip().split(",") for line in fh if line.strip()][1:]
        runs_of = {}
        for r in rows:
            runs_of.setdefault(tuple(r[:len(knobs)]), set()).add((r[len(knobs)], int(r[len(knobs) + 1])))
        done = {k for k, runs in runs_of.items()
                if all(("%.6f" % f, rep) in runs for f in LEVELS for rep in reps)}
    grid = [c for c in setup["grid"] if c != setup["reference"]]
    random.Random(21).shuffle(grid)
    cfgs = [setup["reference"]] + grid
    cfgs = [c for c in cfgs if all(str(c[i]) in vs for i, vs in keep.items())]
    cfgs = [c for c in cfgs if tuple(str(x) for x in c) not in done]
    if a.limit:
        cfgs = cfgs[:a.limit]
    if a.list:
        for c in cfgs:
            print(",".join(str(x) for x in c))
        print(f"{len(cfgs)} configs x repeats {reps.start}..{reps.stop - 1}", file=sys.stderr)
        return
    worker = os.path.join(a.build, "bin", "soartune-worker")
    tmp = tempfile.mkdtemp()
    refs = []
    for li, f in enumerate(LEVELS):
        ref = os.path.join(tmp, f"reference-{li}.json")
        path = os.path.join(tmp, f"ref-{li}.yaml")
        with open(path, "w") as fh:
            fh.write(trial_yaml(setup, backend, a.model, timed_model, setup["reference"], f, "write", ref))
        r, wall = run_one(worker, path, backend, 0, a.trial_timeout)
        if r is None:
            sys.exit(f"reference trial at level {f} failed (spec {path})")
        print(f"reference at level {f:.4f}: {wall:.2f} s", file=sys.stderr, flush=True)
        refs.append(ref)
    cores = queue.Queue()
    for k in range(jobs):
        cores.put(k % max(1, os.cpu_count() or 1))
    config_s = []   # wall time of each finished config, for the deadline

    def task(i):
        if a.deadline:
            mean = sum(config_s) / len(config_s) if config_s else 0
            if time.monotonic() - t_start + mean > a.deadline:
                return i, None
        core = cores.get()
        t0 = time.monotonic()
        try:
            rows = []
            for rep in reps:
                for li, f in enumerate(LEVELS):
                    path = os.path.join(tmp, f"t{i}-{rep}-{li}.yaml")
                    with open(path, "w") as fh:
                        fh.write(trial_yaml(setup, backend, a.model, timed_model, cfgs[i], f, "read", refs[li]))
                    r, wall = run_one(worker, path, backend, core, a.trial_timeout)
                    rows.append((f, rep, r, wall))
            config_s.append(time.monotonic() - t0)
            return i, rows
        finally:
            cores.put(core)

    # After wall_s, where the worker says its time went (its timings_s and quantization.seconds; empty for a failed
    # run): what a run costs besides its tiers, which decides whether a shortened run saves device time.
    parts = ["load", "weights", "quantize", "prepare", "accuracy", "tiers"]
    print(",".join(knobs + ["fidelity", "repeat", "d_c1", "d_c8", "d_cinf", "accuracy_pct", "failed", "wall_s"] +
                   [p + "_s" for p in parts]), flush=True)
    written = 0
    with cf.ThreadPoolExecutor(jobs) as ex:
        for i, rows in ex.map(task, range(len(cfgs))):
            if rows is None:
                continue
            written += 1
            key = [str(v) for v in cfgs[i]]
            for f, rep, r, wall in rows:
                if r is None:
                    print(",".join(key + ["%.6f" % f, str(rep), "0", "0", "0", "0", "1", "%.3f" % wall] + [""] * len(parts)),
                          flush=True)
                    continue
                d = [r["tiers"][t]["duration_s"] for t in range(3)]
                timings = dict(r.get("timings_s", {}), quantize=r.get("quantization", {}).get("seconds", 0))
                print(",".join(key + ["%.6f" % f, str(rep)] + ["%.6g" % x for x in d] +
                               ["%.4f" % r["accuracy"]["relative_pct"], "0", "%.3f" % wall] +
                               ["%.3f" % timings.get(p, 0) for p in parts]), flush=True)
    print(f"{written} of {len(cfgs)} configs recorded ({a.repeats} repeats x {len(LEVELS)} levels) in "
          f"{time.monotonic() - t_start:.1f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
