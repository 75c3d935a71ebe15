"""The shipped checkpoint: bf16 safetensors, config.json and generation_config.json as Hugging Face writes them.

safetensors is written and read by hand (an 8-byte little-endian header length, a JSON header naming each
tensor's dtype, shape and byte range, then the raw data), so no package beyond PyTorch is needed.
"""
import json
import struct

import torch

from llama_model import LlamaConfig


def save_safetensors(path, tensors):
    """tensors: {name: bf16 tensor}; written in name order, as safetensors' own writer does."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name].detach().to(torch.bfloat16).contiguous()
        data = t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": "BF16", "shape": list(t.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)   # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(head)))
        f.write(head)
        for b in blobs:
            f.write(b)


def load_safetensors(path):
    """{name: fp32 tensor} from a BF16 safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, meta in header.items():
        if name == "__metadata__":
            continue
        if meta["dtype"] != "BF16":
            raise ValueError(f"{path}: tensor {name} has dtype {meta['dtype']}; this reader takes BF16 only")
        a, b = meta["data_offsets"]
        raw = torch.frombuffer(bytearray(data[a:b]), dtype=torch.int16).view(torch.bfloat16)
        out[name] = raw.float().reshape(meta["shape"])
    return out


def hf_config(c):
    return {
        "architectures": ["LlamaForCausalLM"],
        "attention_bias": False,
        "attention_dropout": 0.0,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "head_dim": c.head_dim,
        "hidden_act": "silu",
        "hidden_size": c.hidden_size,
        "initializer_range": 0.02,
        "intermediate_size": c.intermediate_size,
        "max_position_embeddings": c.max_position_embeddings,
        "mlp_bias": False,
        "model_type": "llama",
        "num_attention_heads": c.num_attention_heads,
        "num_hidden_layers": c.num_hidden_layers,
        "num_key_value_heads": c.num_key_value_heads,
        "pretraining_tp": 1,
        "rms_norm_eps": c.rms_norm_eps,
        "rope_scaling": None,
        "rope_theta": c.rope_theta,
        "tie_word_embeddings": True,
        "torch_dtype": "bfloat16",
        "use_cache": True,
        "vocab_size": c.vocab_size,
    }


def export(model, out_dir):
    """Writes model.safetensors (no lm_head tensor: it is tied), config.json and generation_config.json."""
    save_safetensors(f"{out_dir}/model.safetensors", model.state_dict())
    with open(f"{out_dir}/config.json", "w") as f:
        json.dump(hf_config(model.config), f, indent=2)
        f.write("\n")
    with open(f"{out_dir}/generation_config.json", "w") as f:
        json.dump({"bos_token_id": 0, "eos_token_id": 1, "do_sample": False}, f, indent=2)
        f.write("\n")


def load_config(out_dir):
    j = json.load(open(f"{out_dir}/config.json"))
    if not j.get("tie_word_embeddings"):
        raise ValueError(f"{out_dir}/config.json: tie_word_embeddings must be true for this model")
    return LlamaConfig(**{k: j[k] for k in LlamaConfig.__dataclass_fields__})
