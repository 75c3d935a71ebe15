#!/usr/bin/env python3
"""PyTorch peer for soartune-bench: a gpt-fast-style Llama decode with bf16 weights, a static KV cache and
CUDA-graph replay, on the same shapes (default llama3-8b) and the same random-weight scale; plus a 4k-token
prefill through SDPA. Prints one line per result and appends JSON objects to --json."""
import argparse
import json
import sys

import torch
import torch.nn.functional as F

SHAPES = {
    "llama3-8b": dict(d=4096, f=14336, layers=32, heads=32, kv_heads=8, hd=128, vocab=128256, theta=500000.0),
    "tiny": dict(d=512, f=1536, layers=6, heads=4, kv_heads=2, hd=128, vocab=4096, theta=10000.0),
}


def rmsnorm(x, g, eps=1e-5):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * g).to(torch.bfloat16)


def rope(x, cos, sin):  # x [B, h, T, hd]; cos/sin [T, hd/2]
    x1, x2 = x.float().chunk(2, dim=-1)
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1).to(torch.bfloat16)


class Model:
    def __init__(self, s, max_ctx, batch):
        dev, bf = "cuda", torch.bfloat16
        self.s = s
        d, f, H, KVH, hd = s["d"], s["f"], s["heads"], s["kv_heads"], s["hd"]
        qkv = (H + 2 * KVH) * hd
        w = lambda *shape: (torch.rand(*shape, device=dev, dtype=torch.float32) * 0.04 - 0.02).to(bf)
        self.emb = w(s["vocab"], d)
        self.lm_head = w(d, s["vocab"])
        self.layers = [dict(wqkv=w(d, qkv), wo=w(H * hd, d), wgu=w(d, 2 * f), wd=w(f, d),
                            g1=torch.ones(d, device=dev), g2=torch.ones(d, device=dev)) for _ in range(s["layers"])]
        self.gf = torch.ones(d, device=dev)
        self.k = torch.zeros(s["layers"], batch, KVH, max_ctx, hd, device=dev, dtype=bf).uniform_(-1, 1)
        self.v = torch.zeros_like(self.k).uniform_(-1, 1)
        inv = 1.0 / (s["theta"] ** (torch.arange(0, hd, 2, device=dev).float() / hd))
        ang = torch.arange(max_ctx, device=dev).float()[:, None] * inv[None]
        self.cos, self.sin = ang.cos(), ang.sin()
        self.max_ctx = max_ctx

    def decode(self, tok, pos):  # tok [B], pos [1] (int64 tensor)
        s = self.s
        B, H, KVH, hd = tok.shape[0], s["heads"], s["kv_heads"], s["hd"]
        x = self.emb[tok].float()
        cos, sin = self.cos[pos], self.sin[pos]
        mask = torch.arange(self.max_ctx, device=tok.device)[None, None, None, :] <= pos
        for li, L in enumerate(self.layers):
            h = rmsnorm(x, L["g1"])
            q, k, v = (h @ L["wqkv"]).split([H * hd, KVH * hd, KVH * hd], dim=-1)
            q = rope(q.view(B, H, 1, hd), cos, sin)
            k = rope(k.view(B, KVH, 1, hd), cos, sin)
            self.k[li].index_copy_(2, pos, k)
            self.v[li].index_copy_(2, pos, v.view(B, KVH, 1, hd))
            a = F.scaled_dot_product_attention(q, self.k[li], self.v[li], attn_mask=mask, enable_gqa=True)
            x = x + (a.reshape(B, H * hd) @ L["wo"]).float()
            h = rmsnorm(x, L["g2"])
            g, u = (h @ L["wgu"]).chunk(2, dim=-1)
            x = x + ((F.silu(g.float()) * u.float()).to(torch.bfloat16) @ L["wd"]).float()
        return (rmsnorm(x, self.gf) @ self.lm_head).argmax(-1)

    def prefill(self, tok):  # tok [T], one sequence, no cache
        s = self.s
        T, H, KVH, hd = tok.shape[0], s["heads"], s["kv_heads"], s["hd"]
        x = self.emb[tok].float()
        cos, sin = self.cos[:T], self.sin[:T]
        for L in self.layers:
            h = rmsnorm(x, L["g1"])
            q, k, v = (h @ L["wqkv"]).split([H * hd, KVH * hd, KVH * hd], dim=-1)
            q = rope(q.view(T, H, hd).transpose(0, 1)[None], cos, sin)
            k = rope(k.view(T, KVH, hd).transpose(0, 1)[None], cos, sin)
            v = v.view(T, KVH, hd).transpose(0, 1)[None]
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            x = x + (a[0].transpose(0, 1).reshape(T, H * hd) @ L["wo"]).float()
            h = rmsnorm(x, L["g2"])
            g, u = (h @ L["wgu"]).chunk(2, dim=-1)
            x = x + ((F.silu(g.float()) * u.float()).to(torch.bfloat16) @ L["wd"]).float()
        return (rmsnorm(x[-1:], self.gf) @ self.lm_head).argmax(-1)


def time_ms(fn, warm=3, reps=20):
    for _ in range(warm):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="llama3-8b", choices=sorted(SHAPES))
    ap.add_argument("--context", type=int, default=512)
    ap.add_argument("--prefill", type=int, default=4096)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    s = SHAPES[args.shape]
    results = []
    with torch.no_grad():
        for batch in (1, 8):
            m = Model(s, max_ctx=max(args.context + 8, 1024), batch=batch)
            tok = torch.randint(0, s["vocab"], (batch,), device="cuda")
            pos = torch.tensor([args.context - 1], device="cuda")
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    m.decode(tok, pos)
            torch.cuda.current_stream().wait_stream(side)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                m.decode(tok, pos)
            ms = time_ms(g.replay)
            results.append(dict(what="peer_decode", weights="bf16", kv="bf16", batch=batch, context=args.context, ms=ms))
            print(f"peer decode  bf16 batch {batch} ctx {args.context}: {ms:.3f} ms/step (CUDA graph, static KV)", flush=True)
            del m, g
            torch.cuda.empty_cache()
        m = Model(s, max_ctx=args.prefill, batch=1)
        tok = torch.randint(0, s["vocab"], (args.prefill,), device="cuda")
        ms = time_ms(lambda: m.prefill(tok), warm=2, reps=5)
        results.append(dict(what="peer_prefill", weights="bf16", kv="bf16", batch=1, context=args.prefill, ms=ms))
        print(f"peer prefill bf16 {args.prefill} tokens: {ms:.3f} ms", flush=True)
    if args.json:
        with open(args.json, "a") as f:
            for r in results:
                f.write(json.dumps(r) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
