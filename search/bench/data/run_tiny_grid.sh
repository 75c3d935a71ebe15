#!/bin/bash
# Regenerates tiny_engine_trials.csv: a grid of launch configs run by soartune-worker on the shared tiny model
# (CPU backend, one thread), the table bo_bench's `replay` landscape looks up.
# Usage: search/bench/data/run_tiny_grid.sh BUILD_DIR [MODEL_DIR] > tiny_engine_trials.csv
set -u
W=$1/bin/soartune-worker
M=${2:-$(cd "$(dirname "$0")/../../.." && pwd)/../shared/models/tiny-llama-bpe4k}
T=$(mktemp -d)
trial() {  # bits group attn kv mrr reference-mode
  cat <<EOT
model: hf:$M
backend: cpu
seed: 1
launch: {weight_bits: $1, weight_group_size: $2, attn_weight_bits: $3, kv_cache_dtype: $4, max_running_requests: $5}
workload:
  name: tiny-test
  requests:
    - {name: short-long, input_len: 8, output_len: 12, count: 2}
    - {name: short-short, input_len: 8, output_len: 4, count: 2}
    - {name: long-short, input_len: 40, output_len: 4, count: 1}
tiers: [1, 8, 0]
accuracy: {set: $M/eval_public.jsonl, samples: 8}
reference: {$6: $T/reference.json}
EOT
}
trial 16 128 0 bf16 8 write > "$T/ref.yaml"
"$W" --trial "$T/ref.yaml" --threads 1 > /dev/null 2>&1 || { echo "reference trial failed" >&2; exit 1; }
echo "weight_bits,weight_group_size,attn_weight_bits,kv_cache_dtype,max_running_requests,d_c1,d_c8,d_cinf,accuracy_pct,failed"
# The reference config first: bo_bench takes the first row as the reference trial.
for cfg in "16,128,0,bf16,8" $(for b in 16 8 4; do for g in 32 64 128; do for a in 0 8; do for kv in bf16 fp8_e4m3; do
    for r in 1 2 8; do [ "$b,$g,$a,$kv,$r" = "16,128,0,bf16,8" ] || echo "$b,$g,$a,$kv,$r"; done; done; done; done; done); do
  set -- ${cfg//,/ }
  trial "$1" "$2" "$3" "$4" "$5" read > "$T/t.yaml"
  out=$(timeout 120 "$W" --trial "$T/t.yaml" --threads 1 2> /dev/null)
  echo "$out" | python3 -c '
import json, sys
key = sys.argv[1].split()
try:
    r = json.loads(sys.stdin.read())
except ValueError:
    r = {"ok": False}
if r.get("ok"):
    d = [t["duration_s"] for t in r["tiers"]]
    print(",".join(key + ["%.6g" % x for x in d] + ["%.4f" % r["accuracy"]["relative_pct"], "0"]))
else:
    print(",".join(key + ["0", "0", "0", "0", "1"]))
' "$1 $2 $3 $4 $5"
done
rm -rf "$T"
