#!/usr/bin/env python3
"""Which of the CUDA engine's bf16 rounding points flips tiny-sala's greedy decoding away from the fp32 reference.

The CUDA engine's greedy decoding of tiny-sala leaves the recorded fp32 tokens (`greedy_reference.jsonl`) on a few
rows; all but one do so at a recorded fp32 top-1/top-2 margin under 0.05 (accepted), but row 12 leaves them at step
23 where the recorded margin is 0.0706.  This script replays greedy decoding on the CPU in fp32 with the model's
bf16 weights, following the model's own reference (`sala_ref.py`, shipped beside the model and imported here as a
peer for its loaders and building blocks), and rounds to bf16 (x.to(torch.bfloat16).float()) only at a chosen
subset of the places where the engine stores bf16 on a decode (and prefill) step:

    norm        layer RMSNorm outputs (input_layernorm, post_attention_layernorm): the input of every linear
    qkv         q | k | v projection outputs (lightning and softmax layers)
    gate_proj   output-gate projection outputs (lightning z_proj, softmax o_gate; fused into the qkv GEMV)
    lit_qk      lightning q, k after per-head RMSNorm + RoPE (computed in fp32 from the qkv values)
    lit_out     lightning output after the all-heads output RMSNorm and the sigmoid gate (input of o_proj)
    kv_cache    softmax-layer K/V cache (a no-op whenever `qkv` is on: the cache holds the qkv values)
    sm_out      softmax attention output, rounded before the sigmoid gate and again after it (input of o_proj)
    gate_up     MLP gate | up projection outputs
    swiglu      SwiGLU result silu(gate) * up (input of down_proj)
    final_norm  final RMSNorm output (input of lm_head)

and, kept apart from those (PROB_POINTS, two variants of one rounding, not both at once), the softmax layers'
attention probabilities, which the engine's flash-style attention kernels (prefill and decode) feed to a bf16
tensor-core P.V product: scores s = q.k * scale in fp32, per query row the max m, p = exp(s - m) in fp32, then

    sm_probs    o = sum_j bf16(p_j) v_j / l with l = sum_j p_j (row sum of the unrounded p; fp32 accumulation)
    sm_probs_l  the same with l = sum_j bf16(p_j) (row sum of the rounded p)

By default m is the max over the whole (causal) row, i.e. one KV tile: tiny-sala's prompts are 32 tokens and its
rows at most 79, so the prefill kernel's 64-token tiles never split a prefill row, and row 12's step-23 logits see
55 keys.  --sm-tile N models the running-max rescaling over KV tiles of N tokens (acc and l *= exp(m_old - m_new),
p rounded against the running max) for prefill and decode alike.

Everything else stays fp32: residual stream, linear accumulation, lightning state and output, attention
accumulation, logits.  With no point on the replay is sala_ref's fp32 computation, op for op, so it must
reproduce the recorded tokens on all 16 rows (checked first).  It then runs all points on, each point alone,
all-but-one, and -- when all points on do move row 12 by step 23 -- a greedy reduction of the full set to a
1-minimal set that still does, then all points on except that set over all 16 rows.  --exhaustive also tries
every subset on row 12 (about 9 minutes) and lists the minimal ones that move it; --extra adds, on top of all
points, one at a time, roundings the engine is NOT said to make (EXTRA_POINTS: residual stream, o/down outputs,
lightning state, lightning output before its norm, RoPE cos/sin tables, logits), as hypotheses.  The default
run also tries each of PROB_POINTS alone and on top of all points, over all 16 rows.

For each configuration it prints row 12's first divergence step, the recorded fp32 margin there, and the
probe's own gap at step 23 = logit(recorded token) - max logit(any other token) (negative means the step flips;
shown when the probe's tokens still match the record before step 23), and, for 16-row runs, how many rows are
exact and which diverge at a recorded margin >= 0.05.

    /usr/bin/python3 scripts/sala_rounding_probe.py [MODEL_DIR]          # default ../shared/models/tiny-sala
    /usr/bin/python3 scripts/sala_rounding_probe.py [MODEL_DIR] --points qkv,lit_qk   # one subset, all rows
    /usr/bin/python3 scripts/sala_rounding_probe.py --points all,sm_probs               # 'all' = every POINT
    /usr/bin/python3 scripts/sala_rounding_probe.py --exhaustive --extra                 # everything (~10 min)
    /usr/bin/python3 scripts/sala_rounding_probe.py --teacher-forced [--points P] [--prefill chunked] [--sm-tile 64]
    /usr/bin/python3 scripts/sala_rounding_probe.py --reference-logits [--points P] [--prefill chunked]
    /usr/bin/python3 scripts/sala_rounding_probe.py --order-seeds 40 [--points P] [--order-eps 1e-6] [--order-first-seed S]
--teacher-forced: top-1 agreement on eval_public.jsonl as its README defines it (one full-sequence prefill of
prompt + continuation per row; the argmax at each of the 32 continuation positions against the recorded
`ref_teacher_forced_top1`; 1024 positions); with --points that subset, else none / all / all+sm_probs /
all+sm_probs_l (~1.5 min).  Each flip's fp32 top1-top2 margin is from the no-rounding recurrent replay.
--order-seeds N: the greedy rows N times with summation-order noise on every linear output (each output times
1 + eps N(0, 1), eps = --order-eps, fresh draws each call): a GPU sums a dot product in another order than torch's
CPU matmul, which moves an fp32 result by about 1e-6 relative, and the bf16 roundings downstream then fall as one of
those orders would make them.  Counts the draws in which no row leaves the recorded tokens at a recorded margin >=
0.05 (the CUDA greedy test's line), and row --row's gap at --step over the draws.
options: --prefill chunked (the engine's chunked lightning prefill, chunk 64; default recurrent = sala_ref's
greedy), --row N (row to probe, default 12), --step N (its step of interest, default 23).

Result on tiny-sala (CPU, torch 1.13, prefill recurrent): no subset of POINTS moves row 12 at or before step
23; with all points on, row 12 stays exact (gap@23 +0.0977 vs the recorded +0.0706), and 9/16 rows are exact,
the other 7 leaving at recorded margins < 0.05 (with --prefill chunked: exact too, gap@23 +0.0624).  So these
roundings, in torch's own summation order, do not give the engine's step-23 flip (in some other orders they do:
--order-seeds, below).  Of the --extra hypotheses only bf16
logits flips row 12 at step 23 (its top-2 fp32 logits 16.656 / 16.586 round to one bf16 value and the tie goes
to the lower id), but it also flips rows 3, 5, 8 and 15 at recorded margins >= 0.05.
bf16 attention probabilities do not explain it either: all points + sm_probs moves row 12 only at step 34 (recorded
margin 0.0756; gap@23 +0.0886), 6/16 rows exact, row 12@34 the only divergence at a margin >= 0.05 (the same
with --sm-tile 64; with --prefill chunked row 12 stays exact, gap@23 +0.0796, 9/16 exact, none >= 0.05); all
points + sm_probs_l moves row 12 at step 27 (margin 0.0126; gap@23 +0.0512), 10/16 exact, none >= 0.05
(chunked: the same step 27, gap@23 +0.0502, 11/16); sm_probs alone: row 12 exact, gap@23 +0.0704, 15/16;
sm_probs_l alone: 16/16 exact, gap@23 +0.0700.
Teacher-forced (eval_public, 1024 positions; recurrent / chunked prefill): no points 100.00 / 100.00%, all 99.02 /
99.22%, all+sm_probs 99.32 / 98.93%, all+sm_probs_l 99.12 / 99.22% (with --sm-tile 64: all+sm_probs 99.02 / 98.73%,
all+sm_probs_l 99.32 / 98.83%); every flip at an fp32 margin < 0.065 -- the engine's 99.02% is in this range.
--reference-logits: the 4 prompts of reference_logits.safetensors, logits and prompt 0's residual stream per layer
against the recorded fp32 values (the CUDA test CudaSala.LogitsAgainstTheFp32ReferenceLayerByLayer prints the
engine's): all points on, logits max |diff| 0.15, RMS 0.022, top-1 254/256 (chunked prefill 255/256); residual max
|diff| / max |ref| after layers 0..7: 1.1e-3 1.8e-3 2.6e-3 3.8e-3 4.0e-3 5.6e-3 4.9e-3 5.2e-3 (no points: 0).
With --order-seeds 46 --points all,sm_probs: logits max |diff| 0.14-0.17, RMS 0.0213-0.0217, top-1 252-256 of 256,
residual at most 6.1e-3.
--points all --trace: the gaps move by a median 0.0211 (90th percentile 0.0510, 99th 0.0768, max 0.0839) over
627 steps of the 16 rows; 39 steps moved down by more than 0.05.
--order-seeds 40 (greedy, all 16 rows; with no point on, the noise alone leaves all 16 exact and row 12's gap@23 at
+0.0706): all points, eps 1e-6: 36 of 40 draws pass the 0.05 line, row 12 leaves at step 23 in 1 (gap@23 -0.0039
.. +0.1103, median +0.0641), the other failures at rows 3@13 (recorded margin 0.1017), 9@29, 12@34, 15@22;
all + sm_probs: 37 of 40, row 12@23 in 1 (gap@23 -0.0327 .. +0.1116), and over seeds 0-159 148 of 160, row 12@23
in 3; all, eps 1e-5: 33 of 40, row 12@23 in 2.  So the engine's batched flip at row 12 step 23 is one of the
outcomes these roundings give under some summation orders (about 1 in 50), and a bf16 engine with exactly these
roundings misses the line under 7.5% of orders (7-18% over these settings).
"""
import argparse
import itertools
import json
import math
import os
import sys
import time

import torch

POINTS = ["norm", "qkv", "gate_proj", "lit_qk", "lit_out", "kv_cache", "sm_out", "gate_up", "swiglu", "final_norm"]
# Not roundings the engine is said to make: hypotheses for when POINTS do not explain a divergence (--extra).
EXTRA_POINTS = ["residual", "o_down", "lit_state", "lit_attn", "rope_table", "logits"]
# The engine's bf16 P.V operand in softmax attention; two variants of the row sum l (mutually exclusive).
PROB_POINTS = ["sm_probs", "sm_probs_l"]
ACCEPT_MARGIN = 0.05


def bf16(x):
    return x.to(torch.bfloat16).float()


class RoundingModel:
    """fp32 forward of MiniCPM-SALA following sala_ref.SALAModel op for op, with a bf16 rounding switch per point."""

    def __init__(self, ref, cfg, weights, points, prefill="recurrent", sm_tile=0, order_noise=None):
        unknown = set(points) - set(POINTS) - set(EXTRA_POINTS) - set(PROB_POINTS)
        assert not unknown, f"unknown rounding points {sorted(unknown)}"
        assert not set(PROB_POINTS) <= set(points), f"{' and '.join(PROB_POINTS)} are exclusive variants"
        self.ref, self.cfg, self.points, self.sm_tile = ref, cfg, frozenset(points), sm_tile
        self.order_noise = order_noise  # None, or (relative size, torch.Generator): see lin()
        self.w = {n: t.float() for n, t in weights.items()}  # bf16 -> fp32 is exact
        self.g = ref.lightning_log_decay(cfg.lightning_nh, torch.float32)
        self.prefill_fn = {"recurrent": ref.lightning_recurrent,
                           "chunked": lambda *a: ref.lightning_chunked(*a, chunk=64)}[prefill]

    def r(self, point, x):
        return bf16(x) if point in self.points else x

    def lin(self, x, wt):
        """x @ wt.T; with order_noise (eps, gen), every output times (1 + eps * N(0, 1)): the size of the
        difference another summation order makes to an fp32 dot product (a few units in the last place of a
        sum of ~1000 terms), drawn afresh on every call, so that the bf16 roundings downstream fall as they
        would under one of the many orders a GPU's kernels use."""
        y = x @ wt.T
        if self.order_noise is None:
            return y
        eps, gen = self.order_noise
        return y * (1 + eps * torch.randn(y.shape, generator=gen))

    def _attention(self, q, k, v, pos0, scale):
        """Causal GQA softmax attention; sala_ref's own op for op unless a PROB_POINTS rounding is on."""
        ref = self.ref
        rounded_l = "sm_probs_l" in self.points
        if not rounded_l and "sm_probs" not in self.points:
            return ref.causal_softmax_attention(q, k, v, pos0, scale)
        Tq, H, d = q.shape
        Tk, Hkv, _ = k.shape
        k, v = ref.repeat_kv(k, H // Hkv), ref.repeat_kv(v, H // Hkv)
        s = torch.einsum("qhd,khd->hqk", q, k) * scale  # fp32 scores
        qpos = torch.arange(pos0, pos0 + Tq)[:, None]
        s = s.masked_fill((torch.arange(Tk)[None, :] > qpos)[None], float("-inf"))
        tile = self.sm_tile if self.sm_tile > 0 else Tk
        m = torch.full((H, Tq, 1), float("-inf"))
        l = torch.zeros(H, Tq, 1)
        acc = torch.zeros(H, Tq, d)
        for j0 in range(0, Tk, tile):  # key 0 is in the first tile and visible to every query: m is finite after it
            st = s[:, :, j0:j0 + tile]
            m_new = torch.maximum(m, st.amax(-1, keepdim=True))
            alpha = torch.exp(m - m_new)  # 0 on the first tile
            p = torch.exp(st - m_new)  # fp32, masked keys -> 0
            pb = bf16(p)  # the MMA operand
            acc = acc * alpha + torch.einsum("hqk,khd->hqd", pb, v[j0:j0 + tile])
            l = l * alpha + (pb if rounded_l else p).sum(-1, keepdim=True)
            m = m_new
        return (acc / l).permute(1, 0, 2)

    def new_cache(self):
        return [self.ref.LayerCache() for _ in range(self.cfg.num_hidden_layers)]

    def _softmax_mixer(self, i, x, pos0, cache):
        cfg, w, p = self.cfg, self.w, f"model.layers.{i}.self_attn."
        T = x.shape[0]
        H, Hkv, d = cfg.num_attention_heads, cfg.num_key_value_heads, cfg.attn_head_dim
        q = self.r("qkv", self.lin(x, w[p + "q_proj.weight"])).view(T, H, d)
        k = self.r("qkv", self.lin(x, w[p + "k_proj.weight"])).view(T, Hkv, d)
        v = self.r("qkv", self.lin(x, w[p + "v_proj.weight"])).view(T, Hkv, d)
        assert not cfg.attn_use_rope
        k, v = self.r("kv_cache", k), self.r("kv_cache", v)
        if cache.k is not None:
            k, v = torch.cat([cache.k, k], 0), torch.cat([cache.v, v], 0)
        cache.k, cache.v = k, v
        o = self._attention(q, k, v, pos0, d ** -0.5).reshape(T, H * d)
        o = self.r("sm_out", o)
        if cfg.attn_use_output_gate:
            o = self.r("sm_out", o * torch.sigmoid(self.r("gate_proj", self.lin(x, w[p + "o_gate.weight"]))))
        return self.lin(o, w[p + "o_proj.weight"])

    def _lightning_mixer(self, i, x, pos0, cache):
        ref, cfg, w, p = self.ref, self.cfg, self.w, f"model.layers.{i}.self_attn."
        T = x.shape[0]
        H, Hkv, d = cfg.lightning_nh, cfg.lightning_nkv, cfg.lightning_head_dim
        q = self.r("qkv", self.lin(x, w[p + "q_proj.weight"])).view(T, H, d)
        k = self.r("qkv", self.lin(x, w[p + "k_proj.weight"])).view(T, Hkv, d)
        v = self.r("qkv", self.lin(x, w[p + "v_proj.weight"])).view(T, Hkv, d)
        if cfg.qk_norm:
            q = ref.rms_norm(q, w[p + "q_norm.weight"], cfg.rms_norm_eps)
            k = ref.rms_norm(k, w[p + "k_norm.weight"], cfg.rms_norm_eps)
        if cfg.lightning_use_rope:
            cos, sin = ref.rope_cos_sin(torch.arange(pos0, pos0 + T), d, cfg.rope_theta, torch.float32)
            cos, sin = self.r("rope_table", cos), self.r("rope_table", sin)
            q, k = ref.apply_rope(q, cos, sin), ref.apply_rope(k, cos, sin)
        q, k = self.r("lit_qk", q), self.r("lit_qk", k)
        k, v = ref.repeat_kv(k, H // Hkv), ref.repeat_kv(v, H // Hkv)
        fn = ref.lightning_recurrent if T == 1 else self.prefill_fn
        if "lit_state" in self.points:  # token by token, state rounded after every update
            outs = []
            for t in range(T):
                o_t, cache.S = ref.lightning_recurrent(q[t:t + 1], k[t:t + 1], v[t:t + 1], self.g,
                                                       cfg.lightning_scale_value(), cache.S)
                cache.S = bf16(cache.S)
                outs.append(o_t)
            o = torch.cat(outs, 0)
        else:
            o, cache.S = fn(q, k, v, self.g, cfg.lightning_scale_value(), cache.S)
        o = self.r("lit_attn", o.reshape(T, H * d))
        if cfg.use_output_norm:
            o = ref.rms_norm(o, w[p + "o_norm.weight"], cfg.rms_norm_eps)
        if cfg.use_output_gate:
            o = o * torch.sigmoid(self.r("gate_proj", self.lin(x, w[p + "z_proj.weight"])))
        o = self.r("lit_out", o)
        return self.lin(o, w[p + "o_proj.weight"])

    def _mlp(self, i, x):
        w, p = self.w, f"model.layers.{i}.mlp."
        gate = self.r("gate_up", self.lin(x, w[p + "gate_proj.weight"]))
        up = self.r("gate_up", self.lin(x, w[p + "up_proj.weight"]))
        return self.lin(self.r("swiglu", torch.nn.functional.silu(gate) * up), w[p + "down_proj.weight"])

    @torch.no_grad()
    def forward(self, ids, cache, pos0, trace=None):
        """Logits of every position of ids; trace (a list) receives the residual stream after every layer."""
        ref, cfg, w = self.ref, self.cfg, self.w
        ids = torch.as_tensor(ids, dtype=torch.long).reshape(-1)
        eps, rs = cfg.rms_norm_eps, cfg.residual_scale
        h = w["model.embed_tokens.weight"][ids] * cfg.scale_emb
        for i, m in enumerate(cfg.mixer_types):
            p = f"model.layers.{i}."
            x = self.r("norm", ref.rms_norm(h, w[p + "input_layernorm.weight"], eps))
            mixer = self._softmax_mixer if m in ref.SOFTMAX_NAMES else self._lightning_mixer
            h = self.r("residual", h + self.r("o_down", mixer(i, x, pos0, cache[i])) * rs)
            x = self.r("norm", ref.rms_norm(h, w[p + "post_attention_layernorm.weight"], eps))
            h = self.r("residual", h + self.r("o_down", self._mlp(i, x)) * rs)
            if trace is not None:
                trace.append(h.clone())
        h = self.r("final_norm", ref.rms_norm(h, w["model.norm.weight"], eps))
        return self.r("logits", self.lin(h / cfg.logit_divisor, w["lm_head.weight"]))

    @torch.no_grad()
    def greedy(self, prompt, want):
        """Greedy decoding of len(want) tokens.  Returns (tokens, gaps): gaps[s] = logit(want[s]) - max other
        logit at step s, for the steps before the first divergence and the divergence step itself."""
        cache = self.new_cache()
        logits = self.forward(prompt, cache, 0)[-1]
        out, gaps, pos, on_track = [], [], len(prompt), True
        for step in range(len(want)):
            tok = int(torch.argmax(logits))
            if on_track:
                other = logits.clone()
                other[want[step]] = float("-inf")
                gaps.append(float(logits[want[step]] - other.max()))
                on_track = tok == want[step]
            out.append(tok)
            if step + 1 < len(want):
                logits = self.forward([tok], cache, pos)[-1]
                pos += 1
        return out, gaps

    @torch.no_grad()
    def teacher_forced(self, prompt, cont):
        """One full-sequence prefill of prompt + cont, as sala_ref.SALAModel.teacher_forced: the logits at
        positions len(prompt)-1 .. len(seq)-2 (the ones that predict cont).  Returns (top1, gaps): the argmax at
        each of them and gaps[j] = logit(cont[j]) - max other logit (top1-top2 margin where top1 == cont[j])."""
        seq = list(prompt) + list(cont)
        logits = self.forward(seq, self.new_cache(), 0)[len(prompt) - 1: len(seq) - 1]
        j, want = torch.arange(len(cont)), torch.tensor(cont)
        other = logits.clone()
        other[j, want] = float("-inf")
        return logits.argmax(-1).tolist(), (logits[j, want] - other.amax(-1)).tolist()


def first_divergence(got, want):
    return next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)


def points_name(points):
    """Short display name of a set of rounding points ('ALL -x +y' relative to POINTS)."""
    name = "+".join(p for p in POINTS + EXTRA_POINTS + PROB_POINTS if p in points) or "(none)"
    extras = "".join(f" +{p}" for p in EXTRA_POINTS + PROB_POINTS if p in points)
    if set(POINTS) <= set(points) and len(points) > len(POINTS) - 2:  # shorten the long names
        name = "ALL" + "".join(f" -{p}" for p in POINTS if p not in points) + extras
    elif len(set(POINTS) - set(points)) == 1:
        name = "ALL -" + next(p for p in POINTS if p not in points) + extras
    return name


class Probe:
    def __init__(self, ref, cfg, weights, rows, args):
        self.ref, self.cfg, self.weights, self.rows, self.args = ref, cfg, weights, rows, args
        self.cache = {}

    def run_row(self, points, i):
        key = (frozenset(points), i)
        if key not in self.cache:
            m = RoundingModel(self.ref, self.cfg, self.weights, points, self.args.prefill, self.args.sm_tile)
            want = self.rows[i]["reference_greedy_fp32"]
            got, gaps = m.greedy(self.rows[i]["prompt_ids"], want)
            self.cache[key] = (first_divergence(got, want), gaps)
        return self.cache[key]

    def moves_row(self, points):
        """True when row `--row` leaves the recorded tokens at or before `--step`."""
        div, _ = self.run_row(points, self.args.row)
        return div is not None and div <= self.args.step

    def describe(self, points, all_rows=False):
        a = self.args
        div, gaps = self.run_row(points, a.row)
        margins = self.rows[a.row]["top1_top2_logit_margin"]
        name = points_name(points)
        row_s = "exact" if div is None else f"step {div:2} (rec. margin {margins[div]:.4f})"
        gap_s = f"{gaps[a.step]:+.4f}" if len(gaps) > a.step else "   n/a "
        line = f"{name:<60} row {a.row}: {row_s:<32} gap@{a.step} {gap_s}"
        if all_rows:
            exact, bad, small = 0, [], []
            for i in range(len(self.rows)):
                d, _ = self.run_row(points, i)
                if d is None:
                    exact += 1
                    continue
                mg = self.rows[i]["top1_top2_logit_margin"][d]
                (bad if mg >= ACCEPT_MARGIN else small).append(f"{i}@{d}({mg:.4f})")
            line += (f"  | {exact:2}/{len(self.rows)} exact; margin>=0.05: {' '.join(bad) or '-'}"
                     f"; <0.05: {' '.join(small) or '-'}")
        print(line, flush=True)
        return div


def order_noise_report(ref, cfg, weights, rows, points, args):
    """Greedy over all rows under `--order-seeds` draws of summation-order noise (RoundingModel.lin) on top of
    `points`: per draw, whether any row leaves the recorded tokens at a recorded margin >= ACCEPT_MARGIN (the
    CUDA greedy test's line) and row --row's gap at --step; then how many draws pass the line."""
    passed, row_moved, gaps_at = 0, 0, []
    for seed in range(args.order_first_seed, args.order_first_seed + args.order_seeds):
        gen = torch.Generator().manual_seed(seed)
        m = RoundingModel(ref, cfg, weights, points, args.prefill, args.sm_tile, (args.order_eps, gen))
        exact, bad, g_row = 0, [], "n/a"
        for i, row in enumerate(rows):
            want = row["reference_greedy_fp32"]
            got, gaps = m.greedy(row["prompt_ids"], want)
            d = first_divergence(got, want)
            if i == args.row:
                if d is not None and d <= args.step:
                    row_moved += 1
                if len(gaps) > args.step:
                    gaps_at.append(gaps[args.step])
                    g_row = f"{gaps[args.step]:+.4f}"
            if d is None:
                exact += 1
            elif row["top1_top2_logit_margin"][d] >= ACCEPT_MARGIN:
                bad.append(f"{i}@{d}({row['top1_top2_logit_margin'][d]:.4f})")
        passed += not bad
        print(f"  draw {seed:3}: row {args.row} gap@{args.step} {g_row}; {exact:2}/{len(rows)} exact; leave at a recorded margin >= {ACCEPT_MARGIN}: "
              f"{' '.join(bad) or '-'}", flush=True)
    n = args.order_seeds
    gs = sorted(gaps_at)
    q = lambda f: gs[min(len(gs) - 1, int(f * len(gs)))]
    print(f"{points_name(points)}, summation-order noise {args.order_eps:g}: {passed} of {n} draws pass the line "
          f"(no row leaves at a recorded margin >= {ACCEPT_MARGIN}); row {args.row} leaves by step {args.step} in "
          f"{row_moved} of {n}" + (f"; its gap@{args.step} over the {len(gs)} draws that reach it: min {gs[0]:+.4f}, "
                                   f"median {q(0.5):+.4f}, max {gs[-1]:+.4f}" if gs else ""), flush=True)


def fp32_margins(ref, cfg, weights, rows):
    """Per row, per continuation position: the fp32 top1-top2 logit margin of the no-rounding recurrent replay
    (sala_ref's computation), to tell at what fp32 margin a teacher-forced flip happens."""
    m = RoundingModel(ref, cfg, weights, [])
    return [m.teacher_forced(row["prompt_ids"], row["continuation_ids"])[1] for row in rows]


def teacher_forced_report(ref, cfg, weights, rows, points, args, margins):
    """Teacher-forced top-1 agreement on eval_public as its README defines it: at every continuation position of
    every row, the probe's argmax against the recorded fp32 top-1 (`ref_teacher_forced_top1`)."""
    m = RoundingModel(ref, cfg, weights, points, args.prefill, args.sm_tile)
    total, flips = 0, []
    for i, row in enumerate(rows):
        top1, _ = m.teacher_forced(row["prompt_ids"], row["continuation_ids"])
        want = row["ref_teacher_forced_top1"]
        total += len(want)
        flips += [(i, j) for j, (a, b) in enumerate(zip(top1, want)) if a != b]
    agree = total - len(flips)
    print(f"{points_name(points):<22} prefill {args.prefill:<9} top-1 agreement {agree}/{total} = "
          f"{100 * agree / total:.2f}%", flush=True)
    if flips:
        mg = sorted(margins[i][j] for i, j in flips)
        print(f"    flips (row@position): {' '.join(f'{i}@{j}' for i, j in flips)}\n"
              f"    fp32 margin at the flips: max {mg[-1]:.4f}, median {mg[len(mg) // 2]:.4f}, "
              f"{sum(g < ACCEPT_MARGIN for g in mg)} of {len(mg)} < {ACCEPT_MARGIN}", flush=True)
    return agree, total


def reference_logits_report(ref, cfg, weights, model_dir, points, args, order_noise=None):
    """The 4 prompts of reference_logits.safetensors through the rounding model (one full-sequence prefill each):
    logits error against the recorded fp32 logits (max abs, RMS, top-1 agreement over the 256 positions) and, for
    prompt 0, the residual stream after every layer against `residual_stream_prompt0` (max abs error over the
    layer's max abs value). With no point on this is sala_ref's own computation (errors at fp32 level); with the
    engine's points on it is what those roundings alone cost, to set beside the CUDA test
    CudaSala.LogitsAgainstTheFp32ReferenceLayerByLayer, which prints the engine's own figures in the same form."""
    recorded = ref.load_safetensors(os.path.join(model_dir, "reference_logits.safetensors"))
    ids, want, resid = recorded["input_ids"], recorded["logits"].float(), recorded["residual_stream_prompt0"].float()
    m = RoundingModel(ref, cfg, weights, points, args.prefill, args.sm_tile, order_noise)
    worst = rms = 0.0
    agree = total = 0
    layers = []
    for p in range(ids.shape[0]):
        trace = [] if p == 0 else None
        got = m.forward(ids[p].tolist(), m.new_cache(), 0, trace)
        d = got - want[p]
        worst = max(worst, float(d.abs().max()))
        rms += float((d * d).mean())
        agree += int((got.argmax(-1) == want[p].argmax(-1)).sum())
        total += got.shape[0]
        if trace is not None:
            layers = [float((t - resid[i + 1]).abs().max() / resid[i + 1].abs().max()) for i, t in enumerate(trace)]
    print(f"  {points_name(points):40s} logits max |diff| {worst:.3g}, RMS {math.sqrt(rms / ids.shape[0]):.3g}, "
          f"top-1 {agree}/{total}; prompt 0 residual after each layer, max |diff| / max |ref|: "
          + " ".join(f"{x:.2e}" for x in layers))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("model_dir", nargs="?", default=os.path.join(here, "..", "..", "shared", "models", "tiny-sala"))
    ap.add_argument("--points", help="comma-separated rounding points: run only this subset (all rows); "
                    "'all' stands for every one of POINTS")
    ap.add_argument("--prefill", choices=["recurrent", "chunked"], default="recurrent")
    ap.add_argument("--sm-tile", type=int, default=0,
                    help="KV tile for sm_probs/sm_probs_l running max (0: one max over the whole row)")
    ap.add_argument("--row", type=int, default=12)
    ap.add_argument("--step", type=int, default=23)
    ap.add_argument("--exhaustive", action="store_true", help="every subset on the probed row (~9 min)")
    ap.add_argument("--extra", action="store_true", help="also all points + each of EXTRA_POINTS")
    ap.add_argument("--teacher-forced", action="store_true",
                    help="top-1 agreement on eval_public.jsonl (--points subset, else none / all / all+each of "
                    "PROB_POINTS)")
    ap.add_argument("--trace", action="store_true",
                    help="with --points: print row --row's gap at every step beside the recorded margin (to set "
                    "beside the CUDA test CudaSala.GreedyReferenceFedAloneKeepsTop1AboveTheLine's trace)")
    ap.add_argument("--reference-logits", action="store_true",
                    help="the 4 prompts of reference_logits.safetensors: logits and (prompt 0) per-layer residual "
                    "error against the recorded fp32 values (--points subset, else none / all / all+each of PROB_POINTS)")
    ap.add_argument("--order-seeds", type=int, default=0,
                    help="greedy over all rows under N draws of summation-order noise (--points subset, default "
                    "all): how many draws pass the 0.05 line; with --reference-logits, its figures once per draw")
    ap.add_argument("--order-first-seed", type=int, default=0,
                    help="first seed of the --order-seeds draws (to split a long run across processes)")
    ap.add_argument("--order-eps", type=float, default=1e-6,
                    help="relative size of the summation-order noise on every linear output (default 1e-6)")
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    sys.path.insert(0, a.model_dir)
    import sala_ref  # the model's reference implementation: loaders and building blocks

    cfg = sala_ref.load_config(a.model_dir)
    weights = sala_ref.load_model_dir_weights(a.model_dir)
    parse_points = lambda spec: list(dict.fromkeys(
        q for p in spec.split(",") if p for q in (POINTS if p == "all" else [p])))

    if a.reference_logits:
        t0 = time.time()
        print(f"model {os.path.abspath(a.model_dir)}, reference_logits.safetensors (4 prompts x 64 tokens, one "
              f"full-sequence prefill each), prefill {a.prefill}, sm tile {a.sm_tile or 'row'}")
        configs = [parse_points(a.points)] if a.points is not None else \
            [[], POINTS] + [POINTS + [p] for p in PROB_POINTS]
        for pts in configs:
            if a.order_seeds > 0:  # one line per draw of summation-order noise
                print(f"  {a.order_seeds} draws of summation-order noise {a.order_eps:g}:")
                for seed in range(a.order_first_seed, a.order_first_seed + a.order_seeds):
                    reference_logits_report(sala_ref, cfg, weights, a.model_dir, pts, a,
                                            (a.order_eps, torch.Generator().manual_seed(seed)))
            else:
                reference_logits_report(sala_ref, cfg, weights, a.model_dir, pts, a)
        print(f"({time.time() - t0:.0f} s)")
        return 0

    if a.teacher_forced:
        rows = [json.loads(line) for line in open(os.path.join(a.model_dir, "eval_public.jsonl"))]
        t0 = time.time()
        print(f"model {os.path.abspath(a.model_dir)}, eval_public.jsonl teacher-forced ({len(rows)} rows, one "
              f"full-sequence prefill each), prefill {a.prefill}, sm tile {a.sm_tile or 'row'}")
        margins = fp32_margins(sala_ref, cfg, weights, rows)
        configs = [parse_points(a.points)] if a.points is not None else \
            [[], POINTS] + [POINTS + [p] for p in PROB_POINTS]
        for pts in configs:
            teacher_forced_report(sala_ref, cfg, weights, rows, pts, a, margins)
        print(f"({time.time() - t0:.0f} s)")
        return 0

    rows = [json.loads(line) for line in open(os.path.join(a.model_dir, "greedy_reference.jsonl"))]
    if a.order_seeds > 0:
        t0 = time.time()
        pts = parse_points(a.points if a.points is not None else "all")
        print(f"model {os.path.abspath(a.model_dir)}, prefill {a.prefill}, sm tile {a.sm_tile or 'row'}, greedy over "
              f"{len(rows)} rows, {a.order_seeds} draws of summation-order noise {a.order_eps:g}")
        order_noise_report(sala_ref, cfg, weights, rows, pts, a)
        print(f"({time.time() - t0:.0f} s)")
        return 0
    pr = Probe(sala_ref, cfg, weights, rows, a)
    t0 = time.time()
    print(f"model {os.path.abspath(a.model_dir)}, prefill {a.prefill}, sm tile {a.sm_tile or 'row'}, "
          f"row {a.row}, step {a.step}; "
          f"gap@{a.step} = probe logit(recorded token) - best other logit at step {a.step}")

    if a.points is not None:
        pts = parse_points(a.points)
        pr.describe(pts, all_rows=True)
        if a.trace:
            _, gaps = pr.run_row(pts, a.row)
            for i, (g, m) in enumerate(zip(gaps, rows[a.row]["top1_top2_logit_margin"])):
                print(f"  row {a.row} step {i:2}: gap {g:+.4f}, recorded fp32 margin {m:.4f}")
            # How far these roundings move a gap, over every row's steps up to its first divergence.
            shifts = []
            for i in range(len(rows)):
                _, g_i = pr.run_row(pts, i)
                shifts += [g - m for g, m in zip(g_i, rows[i]["top1_top2_logit_margin"])]
            mag = sorted(abs(x) for x in shifts)
            q = lambda f: mag[min(len(mag) - 1, int(f * len(mag)))]
            print(f"gap shift (probe gap - recorded margin) over {len(mag)} steps of {len(rows)} rows: median |shift| "
                  f"{q(0.5):.4f}, 90th percentile {q(0.9):.4f}, 99th {q(0.99):.4f}, max {mag[-1]:.4f}; "
                  f"{sum(x < -ACCEPT_MARGIN for x in shifts)} steps moved down by more than {ACCEPT_MARGIN}")
        return 0

    print("\n== sanity: no rounding (must be 16/16 exact) and all points on")
    pr.describe([], all_rows=True)
    pr.describe(POINTS, all_rows=True)

    print("\n== one point on")
    for p in POINTS:
        pr.describe([p], all_rows=True)

    print("\n== all points on but one")
    for p in POINTS:
        pr.describe([q for q in POINTS if q != p], all_rows=True)

    culprits = None
    if pr.moves_row(POINTS):
        print(f"\n== greedy reduction of the full set (drop a point while row {a.row} still moves by step {a.step})")
        cur = list(POINTS)
        for p in POINTS:
            trial = [q for q in cur if q != p]
            if pr.moves_row(trial):
                cur = trial
        pr.describe(cur, all_rows=True)
        culprits = cur

    if a.exhaustive:
        print(f"\n== every subset on row {a.row} (kv_cache left out: it is a no-op under qkv): minimal subsets "
              f"that move row {a.row} by step {a.step}")
        base = [p for p in POINTS if p != "kv_cache"]
        moving = []
        for n in range(1, len(base) + 1):
            for sub in itertools.combinations(base, n):
                s = set(sub)
                if any(m <= s for m in moving):
                    continue  # a superset of a known minimal set
                if pr.moves_row(sub):
                    moving.append(s)
                    pr.describe(sub)
        n_sets = 2 ** len(base)
        n_move = sum(1 for k in range(n_sets) if pr.moves_row([base[j] for j in range(len(base)) if k >> j & 1]))
        print(f"{n_move} of {n_sets} subsets move row {a.row} by step {a.step}")

    print("\n== bf16 attention probabilities in the softmax layers' P.V (alone, and on top of all points)")
    for p in PROB_POINTS:
        pr.describe([p], all_rows=True)
        pr.describe(POINTS + [p], all_rows=True)

    if a.extra:
        print("\n== all points on plus one rounding the engine is NOT said to make (hypotheses)")
        for p in EXTRA_POINTS:
            pr.describe(POINTS + [p], all_rows=True)

    if culprits:
        print(f"\n== all points on except the culprit set {'+'.join(culprits)}")
        pr.describe([p for p in POINTS if p not in culprits], all_rows=True)
    print(f"\n({time.time() - t0:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
