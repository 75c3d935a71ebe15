"""A Llama decoder (LlamaForCausalLM's architecture) in plain PyTorch, written from the architecture itself.

RMSNorm before attention and MLP, grouped-query attention with rotary position embeddings (half-split rotation
as in Hugging Face's rotate_half), SwiGLU MLP, a final RMSNorm and an lm_head tied to the token embeddings.
Parameter names follow Hugging Face's checkpoint layout, so state_dict() is what config.json describes.
"""
import dataclasses
import math

import torch
import torch.nn.functional as F


@dataclasses.dataclass
class LlamaConfig:
    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    head_dim: int = 64
    rms_norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(c, positions):
    """cos, sin: [T][head_dim], the half-split layout (the two halves share each frequency)."""
    inv_freq = 1.0 / (c.rope_theta ** (torch.arange(0, c.head_dim, 2, dtype=torch.float64) / c.head_dim))
    angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().float(), angles.sin().float()


def rotate_half(x):
    h = x.shape[-1] // 2
    return torch.cat([-x[..., h:], x[..., :h]], dim=-1)


class Attention(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c = c
        self.q_proj = torch.nn.Linear(c.hidden_size, c.num_attention_heads * c.head_dim, bias=False)
        self.k_proj = torch.nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.v_proj = torch.nn.Linear(c.hidden_size, c.num_key_value_heads * c.head_dim, bias=False)
        self.o_proj = torch.nn.Linear(c.num_attention_heads * c.head_dim, c.hidden_size, bias=False)

    def forward(self, x, cos, sin, past=None):
        """past: (k, v) of the earlier positions [B][KV][P][hd], or None; returns (out, (k, v) with these appended)."""
        c, (B, T, _) = self.c, x.shape
        q = self.q_proj(x).view(B, T, c.num_attention_heads, c.head_dim).transpose(1, 2)   # [B][H][T][hd]
        k = self.k_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)   # [B][KV][T][hd]
        v = self.v_proj(x).view(B, T, c.num_key_value_heads, c.head_dim).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        if past is not None:
            k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
        P = k.shape[2] - T
        group = c.num_attention_heads // c.num_key_value_heads
        kr = k.repeat_interleave(group, dim=1)
        vr = v.repeat_interleave(group, dim=1)
        scores = (q @ kr.transpose(-1, -2)) / math.sqrt(c.head_dim)                          # [B][H][T][P+T]
        causal = torch.ones(T, P + T, dtype=torch.bool).tril(diagonal=P)
        scores = scores.masked_fill(~causal, float("-inf"))
        out = F.softmax(scores, dim=-1) @ vr                                                  # [B][H][T][hd]
        return self.o_proj(out.transpose(1, 2).reshape(B, T, -1)), (k, v)


class MLP(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.gate_proj = torch.nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.up_proj = torch.nn.Linear(c.hidden_size, c.intermediate_size, bias=False)
        self.down_proj = torch.nn.Linear(c.intermediate_size, c.hidden_size, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.input_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.self_attn = Attention(c)
        self.post_attention_layernorm = RMSNorm(c.hidden_size, c.rms_norm_eps)
        self.mlp = MLP(c)

    def forward(self, x, cos, sin, past=None):
        a, kv = self.self_attn(self.input_layernorm(x), cos, sin, past)
        x = x + a
        return x + self.mlp(self.post_attention_layernorm(x)), kv


class Body(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.embed_tokens = torch.nn.Embedding(c.vocab_size, c.hidden_size)
        self.layers = torch.nn.ModuleList(DecoderLayer(c) for _ in range(c.num_hidden_layers))
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps)


class LlamaForCausalLM(torch.nn.Module):
    def __init__(self, c):
        super().__init__()
        self.config = c
        self.model = Body(c)

    def init_weights(self, generator):
        """Normal(0, 0.02) for every matrix, as Llama's initializer_range; the residual outputs scaled down by
        sqrt(2 * layers) so the residual stream starts at unit scale (GPT-2's rule)."""
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or "layernorm" in name:
                continue
            std = 0.02 / math.sqrt(2 * self.config.num_hidden_layers) if name.endswith(("o_proj.weight", "down_proj.weight")) else 0.02
            with torch.no_grad():
                p.normal_(0.0, std, generator=generator)

    def forward(self, ids, past=None):
        """ids [B][T] -> logits [B][T][vocab]; the lm_head is the embedding matrix (tie_word_embeddings).
        With `past` (the cache a previous call returned) the ids continue those positions, and the call returns
        (logits, cache); without it, logits only."""
        start = 0 if past is None else past[0][0].shape[2]
        cos, sin = rope_tables(self.config, torch.arange(start, start + ids.shape[1]))
        x = self.model.embed_tokens(ids)
        cache = []
        for i, layer in enumerate(self.model.layers):
            x, kv = layer(x, cos, sin, None if past is None else past[i])
            cache.append(kv)
        logits = self.model.norm(x) @ self.model.embed_tokens.weight.t()
        return logits if past is None else (logits, cache)
