#!/usr/bin/env python3
"""BoTorch peer of bo_bench: the same landscape, the same protocol, BoTorch's constrained noisy EI.

Reads a landscape exported by `bo_bench --landscape race --export-landscape FILE` (every config with its
noiseless durations, accuracy, failure flag and true gated score), then per seed:
  trial 1 the reference config, trials 2..(1+n_init) random configs (n_init as bo_bench: params + 1, in 4..10),
  then one config per trial chosen by qLogNoisyExpectedImprovement over a SingleTaskGP of (speed, accuracy):
  MC objective speed * C(accuracy) (the race's gate), outcome constraint accuracy > lowest gate; the acquisition
  is maximised over a random subset of the not yet evaluated configs (optimize_acqf_discrete).
Measurements carry the same noise as bo_bench (2% log-normal on durations, 0.3 points on accuracy). Failed
trials are left out of the model (BoTorch has no failure model) but count as trials.
Reports the median number of trials until a config within 1% of the best true gated score is evaluated, and
the suggestion time (model fit + acquisition) at 300 observed trials.

Usage: python3 scripts/botorch_peer.py LANDSCAPE.csv [--seeds 20] [--budget 60] [--procs 16] [--deadline 200]
       [--no-noise] (for an exported replay landscape: its values are measurements already)
"""
import argparse
import csv
import json
import math
import multiprocessing as mp
import os
import sys
import time
import traceback

import numpy as np

WEIGHTS = (0.40, 0.30, 0.30)
GATE = ((99.0, 1.0), (98.0, 0.96), (97.0, 0.92))
REFERENCE = {"weight_bits": "16", "weight_group_size": "", "attn_weight_bits": "0", "kv_cache_dtype": "bf16",
             "max_running_requests": "64", "max_prefill_tokens": "2048", "cuda_graphs": "true",
             "cuda_graph_max_bs": "32"}


def load(path):
    with open(path) as f:
        rows = list(csv.reader(f))
    header, rows = rows[0], rows[1:]
    nk = len(header) - 6
    knobs = header[:nk]
    cols = []
    for k in range(nk):
        vals = sorted({r[k] for r in rows if r[k] != ""}, key=lambda v: (float(v) if _num(v) else 0, v))
        numeric = all(_num(v) for v in vals)
        cols.append((numeric, vals))
    X = []
    for r in rows:
        x = []
        for k, (numeric, vals) in enumerate(cols):
            v = r[k]
            if numeric:
                x.append(0.5 if v == "" or len(vals) < 2 else vals.index(v) / (len(vals) - 1))
            else:
                x.extend(1.0 if v == u else 0.0 for u in vals)
        X.append(x)
    d = np.array([[float(r[nk]), float(r[nk + 1]), float(r[nk + 2])] for r in rows])
    acc = np.array([float(r[nk + 3]) for r in rows])
    failed = np.array([r[nk + 4] == "1" for r in rows])
    true_score = np.array([float(r[nk + 5]) for r in rows])
    # The race's reference config; a replay table has its reference as its first row (bo_bench exports it so).
    ref_index = next((i for i, r in enumerate(rows) if all(r[k] == REFERENCE.get(knobs[k], r[k]) for k in range(nk))), 0)
    return dict(knobs=knobs, X=np.array(X), d=d, acc=acc, failed=failed, true=true_score, ref=ref_index,
                best_d=d[~failed].min(axis=0))


def _num(v):
    try:
        float(v)
        return True
    except ValueError:
        return False


def gate(acc):
    import torch
    a = torch.clamp(acc, max=100.0)
    c = torch.zeros_like(a)
    for above, mult in reversed(GATE):
        c = torch.where(a > above, torch.full_like(a, mult), c)
    return c


NOISE = {"duration": 0.02, "accuracy": 0.3}


def measure(L, i, rng):
    if L["failed"][i]:
        return None
    d = L["d"][i] * np.exp(NOISE["duration"] * rng.standard_normal(3))
    acc = min(100.0, L["acc"][i] + NOISE["accuracy"] * rng.standard_normal())
    speed = sum(w * 100.0 * b / x for w, b, x in zip(WEIGHTS, L["best_d"], d))
    return speed, acc


def suggest(L, observed, ys, rng, n_candidates):
    """One qLogNEI suggestion; returns (row index, seconds)."""
    import torch
    from botorch.acquisition.logei import qLogNoisyExpectedImprovement
    from botorch.acquisition.objective import GenericMCObjective
    from botorch.fit import fit_gpytorch_mll
    from botorch.models import SingleTaskGP
    from botorch.optim import optimize_acqf_discrete
    from gpytorch.mlls import ExactMarginalLogLikelihood

    t0 = time.perf_counter()
    ok = [k for k, y in enumerate(ys) if y is not None]
    train_X = torch.tensor(L["X"][[observed[k] for k in ok]])
    train_Y = torch.tensor([ys[k] for k in ok])
    model = SingleTaskGP(train_X, train_Y)
    fit_gpytorch_mll(ExactMarginalLogLikelihood(model.likelihood, model))
    lowest = min(a for a, _ in GATE)
    acqf = qLogNoisyExpectedImprovement(
        model, train_X, objective=GenericMCObjective(lambda Z, X=None: Z[..., 0] * gate(Z[..., 1])),
        constraints=[lambda Z: lowest - Z[..., 1]])
    seen = set(observed)
    pool = np.array([i for i in rng.permutation(len(L["X"]))[: n_candidates + len(seen)] if i not in seen][:n_candidates])
    cand, _ = optimize_acqf_discrete(acqf, q=1, choices=torch.tensor(L["X"][pool]), max_batch_size=512, unique=True)
    # Map the chosen row back to its index in the pool.
    hit = int(torch.argmin(((torch.tensor(L["X"][pool]) - cand[0]) ** 2).sum(dim=1)))
    return int(pool[hit]), time.perf_counter() - t0


def run_seed(args):
    path, seed, budget, deadline, n_candidates, noise = args
    NOISE.update(noise)
    import torch
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    L = load(path)
    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    target = 0.99 * L["true"].max()
    n_params = len(L["knobs"])
    n_init = min(10, max(4, n_params + 1))
    observed, ys, times = [L["ref"]], [], []
    fallbacks = 0
    ys.append(measure(L, L["ref"], rng))
    if L["true"][L["ref"]] >= target:
        return dict(seed=seed, trials=1, ms=None, done=True)
    for i in rng.permutation(len(L["X"])):
        if len(observed) >= 1 + n_init:
            break
        if i in observed:
            continue
        observed.append(int(i))
        ys.append(measure(L, i, rng))
        if L["true"][i] >= target:
            return dict(seed=seed, trials=len(observed), ms=None, done=True)
    while len(observed) < budget:
        if time.perf_counter() - start > deadline:
            return dict(seed=seed, trials=None, ms=1e3 * np.mean(times) if times else None, done=False,
                        reached=len(observed), fallbacks=fallbacks)
        try:
            i, dt = suggest(L, observed, ys, rng, n_candidates)
            times.append(dt)
        except Exception as e:  # a failed fit: fall back to a random unseen config (counted and reported)
            if fallbacks == 0:
                traceback.print_exc()
            fallbacks += 1
            i = int(next(j for j in rng.permutation(len(L["X"])) if j not in observed))
        observed.append(i)
        ys.append(measure(L, i, rng))
        if L["true"][i] >= target:
            return dict(seed=seed, trials=len(observed), ms=1e3 * np.mean(times) if times else None, done=True,
                        fallbacks=fallbacks)
    return dict(seed=seed, trials=budget + 1, ms=1e3 * np.mean(times) if times else None, done=True,
                fallbacks=fallbacks)


def timing_at(args):
    path, n_obs, n_candidates, noise = args
    NOISE.update(noise)
    import torch
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    L = load(path)
    rng = np.random.default_rng(5)
    observed = [L["ref"]] + [int(i) for i in rng.permutation(len(L["X"]))[: n_obs - 1] if i != L["ref"]][: n_obs - 1]
    ys = [measure(L, i, rng) for i in observed]
    ms = []
    for _ in range(2):
        _, dt = suggest(L, observed, ys, rng, n_candidates)
        ms.append(1e3 * dt)
    return dict(timing_obs=n_obs, timing_ms=ms)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("landscape")
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--budget", type=int, default=60)
    ap.add_argument("--procs", type=int, default=16)
    ap.add_argument("--deadline", type=float, default=200.0)
    ap.add_argument("--candidates", type=int, default=2048)
    ap.add_argument("--json", default="")
    ap.add_argument("--no-noise", action="store_true",
                    help="measurements are the table's values (bo_bench's replay landscape adds no noise)")
    a = ap.parse_args()
    noise = {"duration": 0.0, "accuracy": 0.0} if a.no_noise else dict(NOISE)
    jobs = [(a.landscape, 1000 + s, a.budget, a.deadline, a.candidates, noise) for s in range(a.seeds)]
    with mp.get_context("spawn").Pool(a.procs) as pool:
        timing = pool.apply_async(timing_at, ((a.landscape, min(300, len(load(a.landscape)["X"]) - 1), a.candidates, noise),))
        results = pool.map(run_seed, jobs, chunksize=1)
        try:
            t = timing.get(timeout=max(1.0, a.deadline))
        except Exception as e:
            t = dict(timing_error=str(e))
    done = [r["trials"] for r in results if r["done"]]
    unfinished = [r for r in results if not r["done"]]
    ms = [r["ms"] for r in results if r["ms"] is not None]
    summary = dict(seeds=a.seeds, budget=a.budget, finished=len(done), unfinished=len(unfinished),
                   median_trials=float(np.median(done)) if done else None,
                   min_trials=min(done) if done else None, max_trials=max(done) if done else None,
                   mean_suggestion_ms=float(np.mean(ms)) if ms else None,
                   fallbacks=sum(r.get("fallbacks", 0) for r in results), results=results, **t)
    print(json.dumps({k: v for k, v in summary.items() if k != "results"}, indent=1))
    for r in results:
        print(r)
    sys.stdout.flush()
    if a.json:
        with open(a.json, "w") as f:
            json.dump(summary, f, indent=1, default=float)


if __name__ == "__main__":
    main()
