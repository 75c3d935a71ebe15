"""Reference outputs of the shipped model from this PyTorch implementation (fp32), independent of our engine.

    nice -n 10 /usr/bin/python3 make_reference.py

Reads the shipped bf16 weights back (as fp32, exactly what an engine loading them computes with) and the shipped
tokenizer, and writes beside them:
  eval_public.jsonl       64 passages of the held-out books: 96-token prompt, the true next 64 tokens, this
                          implementation's teacher-forced top-1 at each of them, its greedy continuation, the
                          mean NLL of the true continuation, and the positions whose top-1 is a near-tie;
  greedy_reference.jsonl  32 held-out prompts of 64 tokens with their greedy 64-token continuation, and the
                          continuation positions where the two best logits are within NEAR_TIE of each other
                          (an engine that computes in another order may pick the other token there);
and adds to train_report.json what round-to-nearest weight quantisation does to the task accuracy.
"""
import argparse
import json
import math
import os

import torch

import bpe_tokenizer
import checkpoint_io
import corpus
from llama_model import LlamaForCausalLM

MODEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT, CONTINUATION, EVAL_ROWS = 96, 64, 64
GREEDY_PROMPT, GREEDY_TOKENS, GREEDY_ROWS = 64, 64, 32
NEAR_TIE = 1e-3   # logits; fp32 sums in another order differ by ~1e-5 here


def load_model(model_dir):
    c = checkpoint_io.load_config(model_dir)
    model = LlamaForCausalLM(c)
    state = checkpoint_io.load_safetensors(f"{model_dir}/model.safetensors")
    missing = set(model.state_dict()) - set(state)
    if missing:
        raise ValueError(f"model.safetensors lacks {sorted(missing)}")
    model.load_state_dict(state, strict=True)
    return model.eval()


def windows(held, length, count):
    """`count` non-overlapping windows of `length` tokens spread evenly over the held-out books."""
    all_windows = [ids[s:s + length].tolist() for _, ids in held for s in range(0, len(ids) - length + 1, length)]
    if len(all_windows) < count:
        raise ValueError(f"the held-out books hold {len(all_windows)} windows of {length} tokens; need {count}")
    step = len(all_windows) / count
    return [all_windows[int(i * step)] for i in range(count)]


def margin(logits):
    top = torch.topk(logits, 2).values
    return (top[0] - top[1]).item()


def greedy(model, prompt, n):
    """n greedy tokens after `prompt` (one prefill, then one token at a time through the cache) and the steps
    whose top-1 was a near-tie."""
    empty = [(torch.zeros(1, model.config.num_key_value_heads, 0, model.config.head_dim),) * 2] * model.config.num_hidden_layers
    logits, cache = model(torch.tensor([prompt]), empty)
    out, ties = [], []
    for i in range(n):
        last = logits[0, -1]
        if margin(last) < NEAR_TIE:
            ties.append(i)
        out.append(int(last.argmax()))
        logits, cache = model(torch.tensor([[out[-1]]]), cache)
    return out, ties


def teacher_forced(model, prompt, continuation):
    """(top-1 at each continuation position, near-tie positions, mean NLL of the true continuation)."""
    x = torch.tensor([prompt + continuation])
    logits = model(x)[0, len(prompt) - 1:-1]
    target = torch.tensor(continuation)
    nll = torch.nn.functional.cross_entropy(logits, target).item()
    ties = [i for i in range(len(continuation)) if margin(logits[i]) < NEAR_TIE]
    return logits.argmax(-1).tolist(), ties, nll


def rtn_quantised(model, bits, group):
    """A copy whose decoder linears are round-to-nearest, symmetric, per `group` inputs (embeddings and the tied
    lm_head stay 16-bit)."""
    q = LlamaForCausalLM(model.config)
    q.load_state_dict(model.state_dict())
    qmax = 2 ** (bits - 1) - 1
    with torch.no_grad():
        for name, p in q.named_parameters():
            if not name.endswith("proj.weight"):
                continue
            w = p.view(p.shape[0], -1, group)
            scale = w.abs().amax(-1, keepdim=True).clamp(min=1e-12) / qmax
            p.copy_((torch.round(w / scale).clamp(-qmax - 1, qmax) * scale).view_as(p))
    return q.eval()


def task_accuracy(model, rows):
    hit = n = 0
    with torch.no_grad():
        for r in rows:
            top1, _, _ = teacher_forced(model, r["prompt_ids"], r["continuation_ids"])
            hit += sum(a == b for a, b in zip(top1, r["continuation_ids"]))
            n += len(top1)
    return hit / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model-dir", default=MODEL_DIR, help="the model folder to read and write (default: this one)")
    model_dir = ap.parse_args().model_dir
    torch.set_num_threads(1)
    tok = bpe_tokenizer.Tokenizer.load(f"{model_dir}/tokenizer.json")
    _, held_text = corpus.split()
    held = [(b, torch.tensor(tok.encode(t))) for b, t in held_text]
    model = load_model(model_dir)

    rows = []
    with torch.no_grad():
        for w in windows(held, PROMPT + CONTINUATION, EVAL_ROWS):
            prompt, cont = w[:PROMPT], w[PROMPT:]
            top1, ties, nll = teacher_forced(model, prompt, cont)
            g, _ = greedy(model, prompt, CONTINUATION)
            rows.append({"prompt_ids": prompt, "continuation_ids": cont, "ref_fp32_teacher_forced_top1": top1,
                         "ref_fp32_teacher_forced_near_ties": ties, "ref_fp32_greedy": g, "ref_fp32_nll": nll})
    with open(f"{model_dir}/eval_public.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")

    greedy_rows = []
    with torch.no_grad():
        for w in windows(held, GREEDY_PROMPT + GREEDY_TOKENS, GREEDY_ROWS):
            prompt = w[:GREEDY_PROMPT]
            g, ties = greedy(model, prompt, GREEDY_TOKENS)
            greedy_rows.append({"prompt_ids": prompt, "reference_greedy_fp32": g, "near_ties": ties})
    with open(f"{model_dir}/greedy_reference.jsonl", "w") as f:
        for r in greedy_rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")

    base = task_accuracy(model, rows)
    report = json.load(open(f"{model_dir}/train_report.json"))
    report["eval_public"] = {
        "rows": len(rows),
        "task_accuracy_fp32": base,
        "mean_nll_fp32": sum(r["ref_fp32_nll"] for r in rows) / len(rows),
        "teacher_forced_near_ties": sum(len(r["ref_fp32_teacher_forced_near_ties"]) for r in rows),
        "greedy_reference_near_ties": sum(len(r["near_ties"]) for r in greedy_rows),
    }
    rtn = {}
    for bits, group in ((8, 128), (4, 128), (4, 32), (3, 128)):
        acc = task_accuracy(rtn_quantised(model, bits, group), rows)
        rtn[f"w{bits}g{group}"] = {"task_accuracy": acc, "relative_pct": 100.0 * acc / base}
    report["rtn_weight_quantisation"] = rtn
    with open(f"{model_dir}/train_report.json", "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(json.dumps({k: report[k] for k in ("eval_public", "rtn_weight_quantisation")}, indent=1))


if __name__ == "__main__":
    main()
