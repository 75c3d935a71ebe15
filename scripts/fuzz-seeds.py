#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora (tests/fuzz/corpus/<target>/) from the repository's own files and from
small, well-formed examples of each format (docs/FORMATS.md), so that fuzzing starts from inputs that reach deep
into each parser. Deterministic: running it again rewrites the same files. Usage: scripts/fuzz-seeds.py"""
import json
import pathlib
import re
import struct

ROOT = pathlib.Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
FIXTURES = "/tmp/soartune-fuzz"   # tests/fuzz/fixture_dir.h: the model, workloads and accuracy set of job_spec_fuzz


def put(target, name, data):
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(data if isinstance(data, bytes) else data.encode())


# --- job_spec: the example jobs, their paths pointed at the fuzz fixtures, and specs reaching the rarer keys.
def job_specs():
    for f in sorted((ROOT / "configs" / "jobs").glob("*.yaml")):
        text = f.read_text()
        text = re.sub(r"model: hf:\S+", f"model: hf:{FIXTURES}/model", text)
        text = re.sub(r"set: \.\./\S+\.jsonl", f"set: {FIXTURES}/accuracy.jsonl", text)
        put("job_spec", f.stem + ".yaml", text)
    put("job_spec", "inline-workload.yaml", f"""name: inline
model: hf:{FIXTURES}/model
backend: cpu
strategy: random
seed: 7
budget: {{trials: 5, time_s: 60, stop_when: {{ei_below_pct: 1.5, rounds: 2}}}}
parallel_trials: 2
trial_timeout_s: 30
workload:
  name: mine
  requests:
    - {{name: a, input_len: 16, output_len: 8, count: 2}}
    - {{input_len: 100, output_len: 100, count: 1}}
accuracy: {{set: {FIXTURES}/accuracy.jsonl, samples: 4}}
layer_overrides: {{"0": 8, "3.attn": 16, "2.mlp": 8}}
reference: {{kv_cache_dtype: fp16}}
fixed: {{weight_group_size: 64}}
space:
  weight_bits: {{type: choice, values: [16, 8, 4]}}
  max_running_requests: {{type: pow2, low: 2, high: 64}}
  cuda_graphs: {{type: bool}}
submissions: {{per_day: 3, timezone: Asia/Shanghai}}
""")
    put("job_spec", "proxy-accuracy.yaml", f"""model: synthetic:llama3-8b
workload: tiny-test
accuracy: {{model: hf:{FIXTURES}/model, set: synthetic, samples: 8, prompt_len: 16, continuation_len: 8}}
scoring:
  weights: {{c1: 0.5, c8: 0.25, cinf: 0.25}}
  gate: [{{above: 99, c: 1.0}}, {{above: 95, c: 0.5}}]
space:
  weight_bits: {{type: choice, values: [8, 4]}}
  weight_group_size: {{type: choice, values: [32, 128], when: {{weight_bits: [4]}}}}
serving: {{engine: sglang-upstream, base_args: ["--tp", "1"]}}
""")


# --- trial_file: FORMATS section 3 as the daemon writes it.
def trial_files():
    put("trial_file", "full.yaml", """# trial 3 of job j1
model: synthetic:tiny
backend: auto
seed: 1
launch:
  weight_bits: 4
  weight_group_size: 128
  kv_cache_dtype: fp8_e4m3
  max_running_requests: 8
layer_overrides: {"0": 8, "5.attn": 16}
workload:
  name: race-cpu
  requests:
    - {name: short-long, input_len: 16, output_len: 96, count: 2}
    - {name: short-short, input_len: 16, output_len: 16, count: 4}
    - {name: long-short, input_len: 384, output_len: 16, count: 2}
tiers: [1, 8, 0]
accuracy:
  set: synthetic
  samples: 16
  prompt_len: 32
  continuation_len: 16
calibration:
  samples: 32
  damp_pct: 1
  cache_dir: /tmp/soartune-fuzz/quantized
reference:
  write: /tmp/soartune-fuzz/reference.json
""")
    put("trial_file", "minimal.yaml", "model: hf:/tmp/soartune-fuzz/model\nlaunch: {}\n"
        "workload: {requests: [{input_len: 4, output_len: 4}]}\n")
    put("trial_file", "sala.yaml", """model: synthetic:tiny-sala
backend: cpu
launch: {softmax_attn_bits: 8, lightning_attn_bits: 4, mlp_bits: 0, lightning_state_dtype: bf16, lightning_chunk: 64}
workload: {name: w, requests: [{name: x, input_len: 32, output_len: 8, count: 3}]}
tiers: [1]
reference: {read: /tmp}
""")


# --- worker_result: FORMATS section 4, success and failure, and the log-lines-before-the-result case.
def worker_results():
    ok = {"ok": True, "backend": "cpu", "device": "cpu: 2 threads", "engine_build": "0.1.0+abc123def456",
          "tiers": [{"tier": t, "concurrency": c, "duration_s": 1.25, "requests": 8, "output_tokens": 400,
                     "ttft_ms": {"p50": 1, "p90": 2, "p99": 3}, "tpot_ms": {"p50": 1, "p90": 2, "p99": 3},
                     "output_tokens_per_s": 325.2} for t, c in (("c1", 1), ("c8", 8), ("cinf", 0))],
          "accuracy": {"metric": "task", "relative_pct": 99.1, "candidate": 0.556, "reference": 0.561,
                       "positions": 1024, "proxy": True, "proxy_model": "hf:/models/tiny-llama"},
          "peak_memory_bytes": 123456789, "timings_s": {"load": 0.2, "accuracy": 0.5, "tiers": 3.1},
          "plans": [{"op": "gemv", "shape": "m1 n4096 k4096", "choice": {"variant": "m1w8u2b4"}}],
          "env": {"CUDA_VISIBLE_DEVICES": "0", "OMP_NUM_THREADS": "2"}}
    put("worker_result", "ok.json", json.dumps(ok) + "\n")
    # Log lines before the result, one with a byte that is not UTF-8 (Latin-1 "été").
    put("worker_result", "ok-after-logs.txt", b"[info] loading model\n[warn] \xe9t\xe9\n" + json.dumps(ok).encode() + b"\n")
    put("worker_result", "error.json", json.dumps(
        {"ok": False, "error": {"kind": "invalid_config", "field": "launch.kv_cache_dtype",
                                "message": "fp8_e4m3 is not supported here"}}) + "\n")
    put("worker_result", "oom.json", json.dumps(
        {"ok": False, "error": {"kind": "out_of_memory", "message": "cudaMalloc failed"}}))
    put("worker_result", "wrong-type.json", '{"ok": 1}\n')


# --- safetensors: small files of each dtype, as the engine's writer lays them out.
def safetensors(tensors, metadata=None):
    header, blobs, off = {}, b"", 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, data in tensors:
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + len(data)]}
        blobs += data
        off += len(data)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * (-len(h) % 8)
    return struct.pack("<Q", len(h)) + h + blobs


def safetensors_files():
    f32 = struct.pack("<4f", 1.0, -2.0, 0.5, 3.0)
    bf16 = struct.pack("<4H", 0x3F80, 0xC000, 0x3F00, 0x4040)
    put("safetensors", "single.safetensors", safetensors([("model.norm.weight", "F32", [4], f32)]))
    put("safetensors", "mixed.safetensors", safetensors(
        [("model.embed_tokens.weight", "BF16", [2, 2], bf16), ("model.norm.weight", "F32", [4], f32),
         ("lm_head.weight", "F16", [2, 2], struct.pack("<4H", 0x3C00, 0xC000, 0x3800, 0x4200)),
         ("model.layers.0.mlp.up_proj.qweight", "I32", [1, 4], struct.pack("<4i", 1, -1, 7, 0))],
        metadata={"format": "pt"}))
    put("safetensors", "empty-tensor.safetensors", safetensors([("x", "F32", [0, 3], b"")]))
    put("safetensors_index", "index.json", json.dumps(
        {"metadata": {"total_size": 32},
         "weight_map": {"model.norm.weight": "model-00001-of-00001.safetensors",
                        "model.embed_tokens.weight": "model-00001-of-00001.safetensors"}}, indent=2))


# --- model_config: config.json of each family the loader reads.
def model_configs():
    llama = {"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,
             "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
             "vocab_size": 256, "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
             "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"}, "tie_word_embeddings": False,
             "bos_token_id": 0, "eos_token_id": [1, 2], "hidden_act": "silu", "model_type": "llama"}
    put("model_config", "llama.json", json.dumps(llama, indent=2))
    qwen = dict(llama, model_type="qwen2", architectures=["Qwen2ForCausalLM"], rope_theta=1e6,
                tie_word_embeddings=True, eos_token_id=1)
    del qwen["rope_parameters"]
    put("model_config", "qwen2.json", json.dumps(qwen, indent=2))
    sala = {"architectures": ["MiniCPMSALAForCausalLM"], "model_type": "minicpm_sala", "hidden_size": 64,
            "intermediate_size": 128, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "vocab_size": 256, "max_position_embeddings": 4096, "attn_use_output_gate": True,
            "attn_use_rope": False, "lightning_head_dim": 16, "lightning_nh": 4, "lightning_nkv": 4,
            "lightning_scale": "1/sqrt(d)", "lightning_use_rope": True, "qk_norm": True, "use_output_gate": True,
            "use_output_norm": True, "mixer_types": ["minicpm4", "lightning-attn", "lightning-attn", "minicpm4"],
            "scale_emb": 12, "scale_depth": 1.4, "dim_model_base": 16, "rope_scaling": None, "rope_theta": 10000.0,
            "sparse_config": {"block_size": 64, "dense_len": 8192, "init_blocks": 1, "kernel_size": 32,
                              "kernel_stride": 16, "topk": 64, "use_nope": False, "window_size": 2048}}
    put("model_config", "minicpm-sala.json", json.dumps(sala, indent=2))
    # The models shipped in the repository, as they are.
    for cfg in sorted((ROOT / "configs" / "models").glob("*/config.json")):
        put("model_config", cfg.parent.name + ".json", cfg.read_bytes())


# --- gptq_config / gptq_tensors: a one-layer Llama in the GPTQ format (engine/gptq_format.h: v1, symmetric,
# desc_act false), attention at 4 bits, the MLP at 8 through a `dynamic` rule, group 32, the lm_head in bf16. Each
# target fuzzes one of the two files; the other target's seed is its fixed counterpart (tests/fuzz/gptq_checkpoint.h).
def gptq_linear(name, out, inp, bits, group, seed):
    pack, zero = 32 // bits, 1 << (bits - 1)
    qmax = zero - 1
    codes = [[((seed * 7 + o * 13 + i * 5) % (2 * qmax + 2)) - zero for i in range(inp)] for o in range(out)]
    qweight = []
    for r in range(inp // pack):
        for o in range(out):
            word = 0
            for j in range(pack):
                word |= (codes[o][r * pack + j] + zero) << (j * bits)
            qweight.append(word - (1 << 32) if word >= 1 << 31 else word)
    groups = inp // group
    zword = 0
    for j in range(pack):
        zword |= (zero - 1) << (j * bits)   # v1 stores zero - 1
    zword = zword - (1 << 32) if zword >= 1 << 31 else zword
    qzeros = [zword] * (groups * (out // pack))
    scales = [0x2000 + (seed + k) % 64 for k in range(groups * out)]   # small positive fp16 values
    g_idx = [i // group for i in range(inp)]
    return [(name + ".qweight", "I32", [inp // pack, out], struct.pack(f"<{len(qweight)}i", *qweight)),
            (name + ".qzeros", "I32", [groups, out // pack], struct.pack(f"<{len(qzeros)}i", *qzeros)),
            (name + ".scales", "F16", [groups, out], struct.pack(f"<{len(scales)}H", *scales)),
            (name + ".g_idx", "I32", [inp], struct.pack(f"<{inp}i", *g_idx))]


def gptq_checkpoints():
    hidden, inter, vocab, group = 64, 128, 64, 32
    qc = {"quant_method": "gptq", "checkpoint_format": "gptq", "bits": 4, "group_size": group, "sym": True,
          "desc_act": False, "lm_head": False, "dynamic": {r"+:model\.layers\.0\.mlp\..*": {"bits": 8}}}
    cfg = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": hidden,
           "intermediate_size": inter, "num_hidden_layers": 1, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "vocab_size": vocab, "max_position_embeddings": 256, "rms_norm_eps": 1e-5,
           "rope_theta": 10000.0, "tie_word_embeddings": False, "quantization_config": qc}
    put("gptq_config", "w4-mlp-w8.json", json.dumps(cfg, indent=2))
    plain = {k: v for k, v in cfg.items() if k != "quantization_config"}
    put("gptq_config", "quantize-config-file.txt", json.dumps(plain, indent=2) + "\n#quantize_config.json\n" +
        json.dumps(dict(qc, checkpoint_format="gptq_v2"), indent=2))
    bf16 = lambda n, seed: struct.pack(f"<{n}H", *[0x3C00 + (seed * 31 + i * 17) % 512 for i in range(n)])
    ones = lambda n: struct.pack(f"<{n}f", *([1.0] * n))
    p = "model.layers.0."
    tensors = [("model.embed_tokens.weight", "BF16", [vocab, hidden], bf16(vocab * hidden, 1)),
               (p + "input_layernorm.weight", "F32", [hidden], ones(hidden)),
               (p + "post_attention_layernorm.weight", "F32", [hidden], ones(hidden))]
    tensors += gptq_linear(p + "self_attn.q_proj", 64, hidden, 4, group, 2)
    tensors += gptq_linear(p + "self_attn.k_proj", 32, hidden, 4, group, 3)
    tensors += gptq_linear(p + "self_attn.v_proj", 32, hidden, 4, group, 4)
    tensors += gptq_linear(p + "self_attn.o_proj", hidden, 64, 4, group, 5)
    tensors += gptq_linear(p + "mlp.gate_proj", inter, hidden, 8, group, 6)
    tensors += gptq_linear(p + "mlp.up_proj", inter, hidden, 8, group, 7)
    tensors += gptq_linear(p + "mlp.down_proj", hidden, inter, 8, group, 8)
    tensors += [("model.norm.weight", "F32", [hidden], ones(hidden)),
                ("lm_head.weight", "BF16", [vocab, hidden], bf16(vocab * hidden, 9))]
    put("gptq_tensors", "w4-mlp-w8.safetensors", safetensors(tensors, metadata={"format": "pt"}))


if __name__ == "__main__":
    job_specs()
    trial_files()
    worker_results()
    safetensors_files()
    model_configs()
    gptq_checkpoints()
