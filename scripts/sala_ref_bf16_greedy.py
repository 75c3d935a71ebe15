#!/usr/bin/env python3
"""Where a bf16 peer's greedy decoding leaves the fp32 reference on tiny-sala.

Runs the model's independent reference implementation (`sala_ref.py`, shipped beside the model) in bfloat16 on the
CPU (Debian's python3-torch) over `greedy_reference.jsonl`, and prints, per row, the first step at which its greedy
tokens differ from the recorded fp32 ones and the recorded fp32 top-1/top-2 margin there. It puts the CUDA engine's
greedy test (tests/kernels/cuda_sala_gpu_test.cc: a divergence is accepted only at a recorded margin under 0.05) beside
what bf16 arithmetic does to the same model in another implementation (docs/perf-log/runs-73.md).

    /usr/bin/python3 scripts/sala_ref_bf16_greedy.py [MODEL_DIR]     # default ../shared/models/tiny-sala
"""
import json
import os
import sys

import torch


def main() -> int:
    model_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "..", "shared",
                                                                    "models", "tiny-sala")
    sys.path.insert(0, model_dir)
    import sala_ref  # the model's reference implementation, run here as a peer

    rows = [json.loads(line) for line in open(os.path.join(model_dir, "greedy_reference.jsonl"))]
    model = sala_ref.load_model(model_dir, torch.bfloat16, "recurrent")
    exact, above = 0, 0
    for i, row in enumerate(rows):
        want, margin = row["reference_greedy_fp32"], row["top1_top2_logit_margin"]
        got, _ = model.greedy(row["prompt_ids"], len(want))
        step = next((j for j, (a, b) in enumerate(zip(got, want)) if a != b), None)
        if step is None:
            exact += 1
            print(f"row {i:2}: exact")
            continue
        above += margin[step] >= 0.05
        print(f"row {i:2}: diverges at step {step:2}, recorded fp32 margin {margin[step]:.4f}")
    print(f"bf16 reference: {exact} of {len(rows)} rows exact, {len(rows) - exact - above} diverge at a margin under "
          f"0.05, {above} at 0.05 or more")
    return 0


if __name__ == "__main__":
    sys.exit(main())
