#!/usr/bin/env python3
"""Writes GPTQ checkpoints the way AutoGPTQ / GPTQModel lay them out, from their public format description (not
from soartune's C++), out of a 16-bit Hugging Face Llama checkpoint, with numpy only:

- safetensors: 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets}}, then
  the tensor bytes; sharded checkpoints add model.safetensors.index.json {"metadata", "weight_map": {name: file}}.
- A quantised linear m [out, in]: m.qweight int32 [in * bits / 32, out] (32 / bits unsigned codes per word along
  the input dim, input i in word i // pack at bit (i % pack) * bits), m.qzeros int32 [groups, out * bits / 32]
  (zero points packed the same way along the output dim; checkpoint_format "gptq" (v1) stores zero - 1,
  "gptq_v2" the zero itself), m.scales fp16 [groups, out], m.g_idx int32 [in] (group of input i; i // group_size
  when desc_act is false or the groups are static and not reordered), m.bias fp16 [out] where the layer has one.
  W[o, i] = (code - zero) * scale of input i's group.
- quantize_config.json (AutoGPTQ; GPTQModel also writes quantization_config into config.json): bits, group_size
  (-1: per channel), sym, desc_act, static_groups, checkpoint_format, quant_method "gptq", lm_head, and
  GPTQModel's `dynamic` {"-:regex": {} (module left 16-bit), "+:regex": {bits, group_size}} matched in order
  against the module name. Modules left unquantised (lm_head, embeddings, norms) are fp16 tensors.

Usage: gptq_thirdparty.py SOURCE_DIR OUT_DIR
Writes OUT_DIR/<variant>/ (a checkpoint) for every variant below, OUT_DIR/<variant>.expected/model.safetensors (F32:
every linear's dequantised [out, in] weight as "<module>.weight" and its bias as "<module>.bias", as numpy
computes them) for the variants a loader should accept, and OUT_DIR/manifest.json: {variant: {"accept": bool,
"error": substring a refusal must contain}}.
"""
import json
import os
import re
import shutil
import sys

import numpy as np

# Reading a 16-bit checkpoint is the independent decoder's own reader (same directory, numpy only).
from gptq_decode import read_checkpoint  # noqa: E402

NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int32): "I32"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        raw = a.tobytes()
        header[name] = {"dtype": NAMES[a.dtype], "shape": list(a.shape), "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(len(h).to_bytes(8, "little"))
        f.write(h)
        for b in blobs:
            f.write(b)


def pack_rows(codes, bits):
    """codes uint32 [n, m] -> int32 [n * bits / 32, m]: 32 / bits consecutive rows per word, low bits first."""
    pack = 32 // bits
    c = codes.reshape(codes.shape[0] // pack, pack, codes.shape[1]).astype(np.uint32)
    word = np.zeros((c.shape[0], c.shape[2]), dtype=np.uint32)
    for j in range(pack):
        word |= c[:, j, :] << np.uint32(j * bits)
    return word.view(np.int32)


def quantise(w, bits, group, sym=True):
    """Round to nearest on a per-group grid. Returns codes uint32 [out, in], zeros int [groups, out], scales fp16
    [groups, out] and the dequantised weight (float32, (code - zero) * scale)."""
    out_f, in_f = w.shape
    gs = in_f if group == -1 else group
    groups = in_f // gs
    wg = w.reshape(out_f, groups, gs)
    maxq = 2 ** bits - 1
    if sym:
        scale = (np.abs(wg).max(axis=2) / (2 ** (bits - 1) - 1)).astype(np.float16)
        scale[scale == 0] = np.float16(1)
        zero = np.full((out_f, groups), 2 ** (bits - 1), dtype=np.int64)
    else:   # asymmetric min/max grid, as GPTQ with sym false
        lo, hi = np.minimum(wg.min(axis=2), 0), np.maximum(wg.max(axis=2), 0)
        scale = ((hi - lo) / maxq).astype(np.float16)
        scale[scale == 0] = np.float16(1)
        zero = np.clip(np.rint(-lo / scale.astype(np.float32)), 0, maxq).astype(np.int64)
    s32 = scale.astype(np.float32)
    codes = np.clip(np.rint(wg / s32[:, :, None]) + zero[:, :, None], 0, maxq).astype(np.int64)
    deq = ((codes - zero[:, :, None]).astype(np.float32) * s32[:, :, None]).reshape(out_f, in_f)
    return codes.reshape(out_f, in_f).astype(np.uint32), zero.T, scale.T, deq


def module_config(qc, module):
    bits, group = qc["bits"], qc["group_size"]
    for rule, over in qc.get("dynamic", {}).items():
        neg = rule.startswith("-:")
        pattern = rule[2:] if rule[:2] in ("-:", "+:") else rule
        if re.match(pattern, module):
            if neg:
                return None
            return over.get("bits", bits), over.get("group_size", group)
    return bits, group


LINEARS = ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
           "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"]


def write_variant(src_dir, src, out_dir, name, qc, in_config, shards=1, biases=False, reorder_g_idx=False,
                  raw_bits=None):
    d = os.path.join(out_dir, name)
    os.makedirs(d)
    layers = json.load(open(os.path.join(src_dir, "config.json")))["num_hidden_layers"]
    rng = np.random.default_rng(7)
    tensors, expected = {}, {}
    v2 = qc.get("checkpoint_format", "gptq") == "gptq_v2"
    quantised_modules = set()
    for layer in range(layers):
        for lin in LINEARS:
            m = "model.layers.%d.%s" % (layer, lin)
            w = src[m + ".weight"].astype(np.float32)
            mc = module_config(qc, m)
            if biases and lin in LINEARS[:3]:
                b = (rng.standard_normal(w.shape[0]) * 0.01).astype(np.float16)
                tensors[m + ".bias"] = b
                expected[m + ".bias"] = b.astype(np.float32)
            if mc is None:
                w16 = w.astype(np.float16)
                tensors[m + ".weight"] = w16
                expected[m + ".weight"] = w16.astype(np.float32)
                continue
            bits, group = mc
            quantised_modules.add(m)
            if raw_bits:   # a width the format packs differently (2 / 3 bits): only the shapes matter here
                tensors[m + ".qweight"] = np.zeros((w.shape[1] * raw_bits // 32, w.shape[0]), dtype=np.int32)
                tensors[m + ".qzeros"] = np.zeros((w.shape[1] // group, w.shape[0] * raw_bits // 32), dtype=np.int32)
                tensors[m + ".scales"] = np.ones((w.shape[1] // group, w.shape[0]), dtype=np.float16)
                tensors[m + ".g_idx"] = (np.arange(w.shape[1]) // group).astype(np.int32)
                continue
            codes, zero, scale, deq = quantise(w, bits, group, qc.get("sym", True))
            tensors[m + ".qweight"] = pack_rows(codes.T, bits)
            stored = zero if v2 else zero - 1
            # zeros [groups, out] packed along the output dim: pack the transpose's rows, transpose back
            tensors[m + ".qzeros"] = pack_rows((stored.astype(np.uint32) & np.uint32(2 ** bits - 1)).T, bits).T.copy()
            tensors[m + ".scales"] = scale
            gs = w.shape[1] if group == -1 else group
            g_idx = (np.arange(w.shape[1]) // gs).astype(np.int32)
            if reorder_g_idx:   # act-order: input columns visited by a permutation, their groups follow it
                g_idx = g_idx[::-1].copy()
            tensors[m + ".g_idx"] = g_idx
            expected[m + ".weight"] = deq
    for n in ("model.embed_tokens.weight", "lm_head.weight", "model.norm.weight"):
        tensors[n] = src[n].astype(np.float16)
    for layer in range(layers):
        for n in ("input_layernorm.weight", "post_attention_layernorm.weight"):
            tensors["model.layers.%d.%s" % (layer, n)] = src["model.layers.%d.%s" % (layer, n)].astype(np.float16)
    expected["lm_head.weight"] = tensors["lm_head.weight"].astype(np.float32)

    names = sorted(tensors)
    if shards == 1:
        write_safetensors(os.path.join(d, "model.safetensors"), tensors)
    else:
        weight_map = {}
        for k in range(shards):
            part = names[k::shards]
            f = "model-%05d-of-%05d.safetensors" % (k + 1, shards)
            write_safetensors(os.path.join(d, f), {n: tensors[n] for n in part})
            weight_map.update({n: f for n in part})
        json.dump({"metadata": {}, "weight_map": weight_map}, open(os.path.join(d, "model.safetensors.index.json"), "w"))
    config = json.load(open(os.path.join(src_dir, "config.json")))
    config["torch_dtype"] = "float16"
    config.pop("dtype", None)
    if in_config:
        config["quantization_config"] = qc
    json.dump(config, open(os.path.join(d, "config.json"), "w"), indent=2)
    json.dump(qc, open(os.path.join(d, "quantize_config.json"), "w"), indent=2)
    for f in ("tokenizer.json", "generation_config.json"):
        if os.path.exists(os.path.join(src_dir, f)):
            shutil.copy(os.path.join(src_dir, f), d)
    return expected


def qconfig(**kw):
    qc = {"bits": 4, "group_size": 128, "desc_act": False, "sym": True, "static_groups": False,
          "true_sequential": True, "lm_head": False, "quant_method": "gptq", "checkpoint_format": "gptq"}
    qc.update(kw)
    return qc


def main():
    src_dir, out_dir = sys.argv[1], sys.argv[2]
    os.makedirs(out_dir, exist_ok=True)
    src = read_checkpoint(src_dir)
    manifest = {}

    def accept(name, qc, **kw):
        expected = write_variant(src_dir, src, out_dir, name, qc, **kw)
        os.makedirs(os.path.join(out_dir, name + ".expected"))
        write_safetensors(os.path.join(out_dir, name + ".expected", "model.safetensors"), expected)
        manifest[name] = {"accept": True, "error": ""}

    def refuse(name, qc, error, **kw):
        write_variant(src_dir, src, out_dir, name, qc, **kw)
        manifest[name] = {"accept": False, "error": error}

    # AutoGPTQ: quantize_config.json only, v1 zeros, one file.
    accept("autogptq-v1-w4g128", qconfig(), in_config=False)
    # GPTQModel: quantization_config in config.json, gptq_v2 zeros, 8 bits, per-module dynamic overrides, shards.
    accept("gptqmodel-v2-w8g64-dynamic-sharded",
           qconfig(bits=8, group_size=64, checkpoint_format="gptq_v2",
                   dynamic={r"-:model\.layers\.1\.mlp\..*": {},
                            r"+:model\.layers\.2\.self_attn\..*": {"bits": 4, "group_size": 32}}),
           in_config=True, shards=2)
    # desc_act true with static groups: g_idx stays i // group_size, so the layout is plain; q/k/v biases.
    accept("desc-act-static-groups-bias", qconfig(desc_act=True, static_groups=True), in_config=True, biases=True)
    # One scale per output channel.
    accept("per-channel-w4", qconfig(group_size=-1), in_config=False)

    refuse("desc-act-reordered", qconfig(desc_act=True), ".g_idx[", in_config=True, reorder_g_idx=True)
    refuse("bits3", qconfig(bits=3), "bits: 3", in_config=True, raw_bits=3)
    refuse("bits2", qconfig(bits=2), "bits: 2", in_config=False, raw_bits=2)
    refuse("asym", qconfig(sym=False), "sym: false", in_config=True)
    refuse("marlin-format", qconfig(checkpoint_format="marlin"), "checkpoint_format: marlin", in_config=True)
    json.dump(manifest, open(os.path.join(out_dir, "manifest.json"), "w"), indent=2)
    print(json.dumps({"variants": len(manifest)}))


if __name__ == "__main__":
    main()
