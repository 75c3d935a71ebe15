"""Trains the kjv-llama demo model on the CPU and writes it beside this folder.

    nice -n 10 python3 train.py --steps N --work /tmp/kjv-train   (see ../README.md for the exact run)

fp32, AdamW (beta 0.9/0.95, weight decay 0.1 on matrices), linear warm-up then cosine decay to a tenth of the
peak learning rate, gradient clipping at 1.0, random windows of the training text. A checkpoint goes to --work
every --save-every steps and a run resumes from it, so an interrupted run loses little.
"""
import argparse
import json
import math
import os
import time

import torch

import bpe_tokenizer
import checkpoint_io
import corpus
from llama_model import LlamaConfig, LlamaForCausalLM

MODEL_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def tokenized(work):
    """(training ids, [(held-out book, ids)]); trains and saves the tokenizer the first time."""
    cache = f"{work}/tokens.pt"
    if os.path.exists(cache):
        return torch.load(cache)
    train_text, held = corpus.split()
    tok_path = f"{MODEL_DIR}/tokenizer.json"
    if not os.path.exists(tok_path):
        bpe_tokenizer.Tokenizer(bpe_tokenizer.train(train_text, 4096)).save(tok_path)
    tok = bpe_tokenizer.Tokenizer.load(tok_path)
    data = (torch.tensor(tok.encode(train_text)), [(b, torch.tensor(tok.encode(t))) for b, t in held])
    torch.save(data, cache)
    return data


def lr_at(step, args):
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    p = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, p))))


def held_out_loss(model, held, seq):
    """Mean next-token NLL over every whole window of `seq` tokens of the held-out books."""
    total, n = 0.0, 0
    with torch.no_grad():
        for _, ids in held:
            for s in range(0, len(ids) - seq - 1, seq):
                x = ids[s:s + seq + 1]
                logits = model(x[None, :-1])[0]
                total += torch.nn.functional.cross_entropy(logits, x[1:], reduction="sum").item()
                n += seq
    return total / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1611)
    ap.add_argument("--save-every", type=int, default=100)
    ap.add_argument("--eval-every", type=int, default=500)
    ap.add_argument("--work", required=True)
    ap.add_argument("--benchmark", type=int, default=0, help="time this many steps, print steps/s, write nothing")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    os.makedirs(args.work, exist_ok=True)
    train_ids, held = tokenized(args.work)
    print(f"training tokens {len(train_ids)}, held-out tokens {sum(len(t) for _, t in held)}", flush=True)

    c = LlamaConfig()
    model = LlamaForCausalLM(c)
    gen = torch.Generator().manual_seed(args.seed)
    model.init_weights(gen)
    matrices = [p for n, p in model.named_parameters() if p.dim() == 2]
    vectors = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": matrices, "weight_decay": 0.1}, {"params": vectors, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)
    step, elapsed, evals = 0, 0.0, []
    ckpt = f"{args.work}/ckpt.pt"
    if os.path.exists(ckpt) and not args.benchmark:
        s = torch.load(ckpt)
        model.load_state_dict(s["model"])
        opt.load_state_dict(s["opt"])
        step, elapsed, evals = s["step"], s["elapsed"], s["evals"]
        gen.set_state(s["gen"])
        print(f"resumed at step {step}", flush=True)

    n_params = sum(p.numel() for p in model.parameters())
    print(f"parameters {n_params}", flush=True)
    t0 = time.time() - elapsed
    last = args.benchmark if args.benchmark else args.steps
    while step < last:
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args)
        starts = torch.randint(0, len(train_ids) - args.seq - 1, (args.batch,), generator=gen)
        x = torch.stack([train_ids[s:s + args.seq + 1] for s in starts.tolist()])
        logits = model(x[:, :-1])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, c.vocab_size), x[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        if step % 10 == 0:
            print(f"step {step} loss {loss.item():.4f} lr {lr_at(step, args):.2e} {step / (time.time() - t0 + 1e-9):.3f} steps/s"
                  if not elapsed else f"step {step} loss {loss.item():.4f} lr {lr_at(step, args):.2e} t {time.time() - t0:.0f}s", flush=True)
        if args.benchmark:
            continue
        if step % args.eval_every == 0 or step == args.steps:
            model.eval()
            ev = held_out_loss(model, held, args.seq)
            model.train()
            evals.append({"step": step, "held_out_loss": ev, "seconds": time.time() - t0})
            print(f"step {step} held-out loss {ev:.4f} ppl {math.exp(ev):.2f}", flush=True)
        if step % args.save_every == 0 or step == args.steps:
            torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step, "elapsed": time.time() - t0,
                        "evals": evals, "gen": gen.get_state()}, ckpt + ".tmp")
            os.replace(ckpt + ".tmp", ckpt)
    if args.benchmark:
        print(f"benchmark: {args.benchmark / (time.time() - t0):.3f} steps/s at batch {args.batch} x seq {args.seq}", flush=True)
        return

    checkpoint_io.export(model, MODEL_DIR)
    final = evals[-1]["held_out_loss"]
    report = {
        "steps": step,
        "batch_sequences": args.batch,
        "sequence_tokens": args.seq,
        "tokens_seen": step * args.batch * args.seq,
        "training_tokens": len(train_ids),
        "epochs": step * args.batch * args.seq / len(train_ids),
        "held_out_tokens": sum(len(t) for _, t in held),
        "held_out_books": [b for b, _ in held],
        "peak_lr": args.lr,
        "warmup_steps": args.warmup,
        "seed": args.seed,
        "threads": args.threads,
        "train_seconds": time.time() - t0,
        "params": n_params,
        "held_out_loss_fp32": final,
        "held_out_ppl_fp32": math.exp(final),
        "evals": evals,
        "torch_version": torch.__version__,
    }
    with open(f"{MODEL_DIR}/train_report.json", "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    print(json.dumps({k: v for k, v in report.items() if k != "evals"}), flush=True)


if __name__ == "__main__":
    main()
