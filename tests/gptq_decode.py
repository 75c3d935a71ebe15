#!/usr/bin/env python3
"""Independent decoder of a GPTQ-format checkpoint (checkpoint_format "gptq", i.e. v1), written from the
format's public description, not from soartune's C++:

- safetensors: an 8-byte little-endian header length N, N bytes of JSON {name: {dtype, shape,
  data_offsets: [begin, end]}, "__metadata__": ...}, then the tensor bytes (offsets relative to the end of
  the header).
- A quantised linear `m` of shape [out, in] is stored as m.qweight int32 [in * bits / 32, out] (32 / bits
  unsigned codes per word along the input dimension, input i in word i // pack at bit (i % pack) * bits),
  m.qzeros int32 [groups, out * bits / 32] (zero points packed the same way along the output dimension; v1
  stores zero - 1, a reader adds 1 back), m.scales fp16 [groups, out], m.g_idx int32 [in] (group of input i).
  W[o, i] = (code[i, o] - zero[g_idx[i], o]) * scales[g_idx[i], o].
- quantize_config.json: bits, group_size (-1: per channel), sym, desc_act, lm_head and GPTQModel's `dynamic`
  rules {regex: overrides}, tried in order against the module name with re.match: "-:regex" leaves the module
  unquantised (a plain 16-bit `.weight`), "+:regex" (or no prefix) overrides bits / group_size.

Usage: gptq_decode.py CHECKPOINT_DIR REFERENCE.safetensors
REFERENCE holds F32 [out, in] weights by module name (the `.weight` names of the 16-bit model). Every one is
compared with the decoded checkpoint: exit 0 when all are bitwise equal, 1 otherwise; one JSON summary line.
"""
import json
import os
import re
import sys

import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16, "I32": np.int32}


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    n = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + n])
    base = 8 + n
    out = {}
    for name, t in header.items():
        if name == "__metadata__":
            continue
        b, e = t["data_offsets"]
        a = np.frombuffer(data, dtype=DTYPES[t["dtype"]], count=(e - b) // np.dtype(DTYPES[t["dtype"]]).itemsize, offset=base + b)
        if t["dtype"] == "BF16":   # bf16 is the top half of an fp32
            a = (a.astype(np.uint32) << 16).view(np.float32)
        out[name] = a.reshape(t["shape"])
    return out


def read_checkpoint(d):
    index = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(index))["weight_map"].values())) if os.path.exists(index) else ["model.safetensors"]
    tensors = {}
    for f in files:
        tensors.update(read_safetensors(os.path.join(d, f)))
    return tensors


def module_config(qc, module):
    """(bits, group_size) of a module, or None when the dynamic rules leave it unquantised."""
    bits, group = qc["bits"], qc["group_size"]
    # GPTQ quantises the linears of the decoder blocks, and the lm_head only when "lm_head" is true;
    # embeddings never.
    if module == "lm_head":
        if not qc.get("lm_head", False):
            return None
    elif not module.startswith("model.layers."):
        return None
    for pattern, override in (qc.get("dynamic") or {}).items():
        if pattern.startswith("-:"):
            if re.match(pattern[2:], module):
                return None
        elif re.match(pattern[2:] if pattern.startswith("+:") else pattern, module):
            return override.get("bits", bits), override.get("group_size", group)
    return bits, group


def unpack(words, bits, axis):
    """Unsigned codes of int32 words packed 32 / bits per word along `axis` (lowest bits first)."""
    pack = 32 // bits
    w = words.view(np.uint32)
    shifts = np.arange(pack, dtype=np.uint32) * bits
    codes = (w[..., None] >> shifts) & np.uint32((1 << bits) - 1)   # [..., pack]
    if axis == 0:   # words [rows, cols] -> codes [rows * pack, cols]
        return np.moveaxis(codes, -1, 1).reshape(w.shape[0] * pack, w.shape[1]).astype(np.int32)
    return codes.reshape(w.shape[0], w.shape[1] * pack).astype(np.int32)


def dequantize(t, module, bits, group):
    qweight, qzeros, scales, g_idx = (t[module + s] for s in (".qweight", ".qzeros", ".scales", ".g_idx"))
    codes = unpack(qweight, bits, axis=0)          # [in, out]
    zeros = unpack(qzeros, bits, axis=1) + 1       # [groups, out]; v1 stores zero - 1
    n_in = codes.shape[0]
    expect_groups = 1 if group == -1 else n_in // group
    assert scales.shape[0] == expect_groups, f"{module}: {scales.shape[0]} scale rows, config says {expect_groups}"
    g = g_idx.astype(np.int64)
    w = (codes - zeros[g, :]).astype(np.float32) * scales.astype(np.float32)[g, :]   # [in, out]
    return np.ascontiguousarray(w.T)                # [out, in]


def main():
    ckpt, ref_path = sys.argv[1], sys.argv[2]
    qc = json.load(open(os.path.join(ckpt, "quantize_config.json")))
    assert qc.get("quant_method", "gptq") == "gptq" and qc.get("checkpoint_format", "gptq") == "gptq", "only gptq v1"
    assert qc["sym"] is True and qc["desc_act"] is False
    t = read_checkpoint(ckpt)
    ref = read_safetensors(ref_path)
    checked, quantised, bad = 0, 0, []
    for name, want in ref.items():
        module = name[: -len(".weight")]
        cfg = module_config(qc, module)
        if cfg is None:
            got = t[name].astype(np.float32)
        else:
            bits, group = cfg
            assert module + ".qweight" in t, f"{module}: the config quantises it, the checkpoint has no qweight"
            assert t[module + ".qweight"].shape[0] * 32 // bits == want.shape[1], f"{module}: qweight rows disagree with {bits} bits"
            got = dequantize(t, module, bits, group)
            quantised += 1
        checked += 1
        if got.shape != want.shape or not np.array_equal(got.view(np.uint32), want.view(np.uint32)):
            diff = float(np.max(np.abs(got - want))) if got.shape == want.shape else float("inf")
            bad.append({"module": module, "max_abs_diff": diff})
    print(json.dumps({"checked": checked, "quantised": quantised, "mismatches": bad}))
    return 0 if not bad and checked > 0 else 1


if __name__ == "__main__":
    sys.exit(main())
