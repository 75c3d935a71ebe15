// The CUDA engine on MiniCPM-SALA: the shared tiny-sala model (official checkpoint format, random bf16 weights)
// against its independent fp32 reference outputs. bf16 teacher-forced top-1, greedy continuations (exact up
// to a recorded near-tie), decode step by step against one prefill (the lightning recurrence and CUDA graphs
// against the chunked form), the three paths of quantised layers against each other, fp8 KV and 4-bit weights
// ordered by bits, both lightning state dtypes. Sparse
// attention: cuda_sala_sparse_gpu_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "tests/kernels/cuda_engine_test_util.h"

namespace soartune::engine {
namespace {

using testing::read_jsonl;
using testing::SingleSequence;
using testing::tiny_sala_dir;

const ModelWeights& sala() { return testing::loaded_model(tiny_sala_dir()); }

std::unique_ptr<Engine> make_engine(const LaunchConfig& l, int max_context = 160) {
  return testing::make_cuda_engine(sala(), l, max_context);
}

// Teacher-forced top-1 agreement (%) with the fp32 reference over the 32 rows of eval_public.jsonl.
double teacher_forced_agreement(const LaunchConfig& l) {
  const auto rows = read_jsonl(tiny_sala_dir() + "/eval_public.jsonl");
  EXPECT_EQ(rows.size(), 32u);
  auto engine = make_engine(l);
  if (!engine) return 0;
  return testing::teacher_forced_agreement(*engine, rows, "ref_teacher_forced_top1");
}

TEST(CudaSala, TeacherForcedTop1MatchesFp32Reference) {
  SKIP_WITHOUT_CUDA_SALA();
  // A 1024-token prefill budget (cuBLAS rows, whole prompts in the lightning chunked form), a 24-token one
  // (prompts split across steps: the chunked form continues a state mid-prompt) and an 8-token one (the same
  // through the GEMV, which takes bf16 weights up to 8 rows, fusing the RMSNorm up to 4; cuBLAS above).
  for (int budget : {1024, 24, 8}) {
    LaunchConfig l;
    l.max_prefill_tokens = budget;
    l.max_running_requests = 16;
    const double pct = teacher_forced_agreement(l);
    std::printf("tiny-sala CUDA bf16, prefill budget %d: teacher-forced top-1 agreement %.2f%%\n", budget, pct);
    EXPECT_GE(pct, 98.5) << "prefill budget " << budget;
  }
}

TEST(CudaSala, GreedyContinuationsExactExceptAtRecordedNearTies) {
  SKIP_WITHOUT_CUDA_SALA();
  const auto rows = read_jsonl(tiny_sala_dir() + "/greedy_reference.jsonl");
  ASSERT_EQ(rows.size(), 16u);
  for (bool graphs : {true, false}) {
    // 6 running at once out of 16 and a 40-token budget: slots are reused (their lightning states reset),
    // prompts split across steps, decode and prefill tokens share steps.
    LaunchConfig l;
    l.max_running_requests = 6;
    l.max_prefill_tokens = 40;
    l.cuda_graphs = graphs;
    auto engine = make_engine(l);
    ASSERT_TRUE(engine);
    std::vector<std::vector<int32_t>> want;
    std::vector<std::vector<double>> margin;
    for (const auto& r : rows) {
      want.push_back(r["reference_greedy_fp32"].get<std::vector<int32_t>>());
      margin.push_back(r["top1_top2_logit_margin"].get<std::vector<double>>());
      ASSERT_TRUE(engine->add_request(r["prompt_ids"].get<std::vector<int32_t>>(), static_cast<int>(want.back().size())).ok());
    }
    const Status s = engine->run_until_idle();
    ASSERT_TRUE(s.ok()) << s.message;
    auto done = engine->take_finished();
    ASSERT_EQ(done.size(), rows.size());
    int exact = 0, near_tie = 0;
    for (const auto& f : done) {
      const auto& w = want[static_cast<std::size_t>(f.id)];
      const auto& m = margin[static_cast<std::size_t>(f.id)];
      ASSERT_EQ(f.output.size(), w.size());
      std::size_t i = 0;
      while (i < w.size() && f.output[i] == w[i]) ++i;
      if (i == w.size()) {
        ++exact;
        continue;
      }
      // The first divergence must be where the fp32 reference itself had top-1 and top-2 within 0.05;
      // after it the texts differ and nothing more is compared. (The engine's bf16 roundings replayed in fp32
      // under summation-order noise miss this line in 12 draws of 160, at recorded margins up to 0.10:
      // docs/perf-log/sala-bf16-rounding-2026-12-07.md. LogitsAgainstTheFp32ReferenceLayerByLayer below tells
      // an error beyond those roundings from that chance.)
      EXPECT_LT(m[i], 0.05) << "request " << f.id << " diverges at step " << i << " (reference margin " << m[i] << ")";
      near_tie += m[i] < 0.05;
    }
    std::printf("tiny-sala CUDA bf16 greedy (graphs %d): %d of 16 exact, %d diverge at a recorded near-tie\n", graphs,
                exact, near_tie);
  }
}

// The backend driven directly, one sequence in slot 1, every row's logits read back.
SingleSequence single_sequence(const LaunchConfig& l, int max_context = 256) {
  return SingleSequence(testing::cuda_backend(), sala(), l, /*slot=*/1, max_context);
}

// Each greedy reference row fed alone (prompt in one step, then its recorded continuation one decode step at a
// time through the batch-1 graph), so that every step sees the reference's own context: the top-1 must be the
// recorded token wherever the recorded fp32 margin is at least 0.05. Prints each row's smallest gap (logit of the
// recorded token minus the best other) and the whole trace of any row that leaves it, beside the recorded
// margins: a bisection of the batched greedy test above (the same rows, one sequence, no mixed steps).
TEST(CudaSala, GreedyReferenceFedAloneKeepsTop1AboveTheLine) {
  SKIP_WITHOUT_CUDA_SALA();
  const auto rows = read_jsonl(tiny_sala_dir() + "/greedy_reference.jsonl");
  ASSERT_EQ(rows.size(), 16u);
  const int V = sala().config.vocab;
  LaunchConfig l;
  int above_line_flips = 0;
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const auto prompt = rows[r]["prompt_ids"].get<std::vector<int32_t>>();
    const auto cont = rows[r]["reference_greedy_fp32"].get<std::vector<int32_t>>();
    const auto margin = rows[r]["top1_top2_logit_margin"].get<std::vector<double>>();
    std::vector<int32_t> ids = prompt;
    ids.insert(ids.end(), cont.begin(), cont.end() - 1);
    SingleSequence seq = single_sequence(l);
    const int P = static_cast<int>(prompt.size());
    const std::vector<float> logits = seq.feed_steps(ids, P, P);
    ASSERT_EQ(logits.size(), ids.size() * static_cast<std::size_t>(V)) << "row " << r;
    std::vector<double> gap(cont.size());
    double min_gap = 1e30;
    int first_flip = -1;
    for (std::size_t i = 0; i < cont.size(); ++i) {
      const float* lg = logits.data() + (static_cast<std::size_t>(P) - 1 + i) * V;
      float other = -1e30f;
      for (int v = 0; v < V; ++v)
        if (v != cont[i]) other = std::max(other, lg[v]);
      gap[i] = lg[cont[i]] - other;
      min_gap = std::min(min_gap, gap[i]);
      if (gap[i] <= 0 && first_flip < 0) first_flip = static_cast<int>(i);
      if (gap[i] <= 0 && margin[i] >= 0.05) {
        ++above_line_flips;
        ADD_FAILURE() << "row " << r << " step " << i << ": top-1 is not the recorded token (gap " << gap[i]
                      << ", recorded margin " << margin[i] << ")";
      }
    }
    std::printf("tiny-sala CUDA bf16 greedy row %zu fed alone: smallest gap %+.4f%s\n", r, min_gap,
                first_flip < 0 ? "" : (", first flip at step " + std::to_string(first_flip)).c_str());
    if (first_flip >= 0)
      for (std::size_t i = 0; i < cont.size(); ++i)
        std::printf("  row %zu step %2zu: gap %+.4f, recorded fp32 margin %.4f\n", r, i, gap[i], margin[i]);
  }
  std::printf("tiny-sala CUDA bf16 greedy rows fed alone: %d flips at a recorded margin >= 0.05\n", above_line_flips);
}

// The 4 prompts of reference_logits.safetensors (64 tokens each, one prefill step, bf16 weights through cuBLAS
// rows), against the recorded fp32 logits, and for prompt 0 the residual stream after every layer against
// `residual_stream_prompt0`: the layer-by-layer bisection the model ships for. The engine's documented bf16
// roundings, replayed in fp32 by `scripts/sala_rounding_probe.py --reference-logits` (CPU, torch 1.13), cost
// logits max |diff| 0.15 (RMS 0.022) and residual max |diff| / max |ref| 1.1e-3 after layer 0 rising to 5.6e-3;
// the lines below are three times those: an error the roundings do not explain fails here, at its layer. (Under
// summation-order noise, 46 draws with the decode kernel's bf16 probabilities: max |diff| 0.14-0.17, RMS
// 0.0213-0.0217, top-1 252-256 of 256, residual up to 6.1e-3.)
TEST(CudaSala, LogitsAgainstTheFp32ReferenceLayerByLayer) {
  SKIP_WITHOUT_CUDA_SALA();
  const testing::SalaReferenceLogits ref = testing::read_sala_reference_logits();
  const ModelConfig& c = sala().config;
  ASSERT_TRUE(testing::sala_reference_shapes_match(ref, c));
  SingleSequence run = single_sequence(LaunchConfig{});
  const std::size_t per_prompt = static_cast<std::size_t>(64) * c.vocab;
  double worst = 0, sq = 0;
  int agree = 0;
  for (int b = 0; b < 4; ++b) {
    std::vector<float> residual;
    const std::vector<float> logits = run.feed(testing::sala_reference_prompt(ref, b), 0, b == 0 ? &residual : nullptr);
    ASSERT_EQ(logits.size(), per_prompt) << "prompt " << b;
    const float* w = ref.logits.data() + b * per_prompt;
    worst = std::max(worst, testing::max_abs_diff(logits.data(), w, per_prompt));
    for (std::size_t i = 0; i < per_prompt; ++i) sq += (static_cast<double>(logits[i]) - w[i]) * (static_cast<double>(logits[i]) - w[i]);
    for (int p = 0; p < 64; ++p) {
      const float* a = logits.data() + static_cast<std::size_t>(p) * c.vocab;
      const float* r = w + static_cast<std::size_t>(p) * c.vocab;
      agree += std::max_element(a, a + c.vocab) - a == std::max_element(r, r + c.vocab) - r;
    }
    if (b != 0) continue;
    const std::size_t per = static_cast<std::size_t>(64) * c.hidden;
    ASSERT_EQ(residual.size(), (c.layers + 1) * per);
    std::printf("tiny-sala CUDA bf16, prompt 0, residual stream max |diff| / max |ref|:");
    for (int l = 0; l <= c.layers; ++l) {
      double scale = 0;
      const double diff = testing::max_abs_diff(residual.data() + l * per, ref.residual.data() + l * per, per, &scale);
      std::printf(" %s %.2e", l == 0 ? "embedding" : ("L" + std::to_string(l - 1)).c_str(), diff / scale);
      EXPECT_LE(diff / scale, 3 * 5.6e-3) << "residual stream index " << l;
    }
    std::printf("\n");
  }
  const double rms = std::sqrt(sq / (4.0 * per_prompt));
  std::printf("tiny-sala CUDA bf16 against reference_logits: max |diff| %.3g, RMS %.3g, top-1 %d/256\n", worst, rms,
              agree);
  EXPECT_LE(worst, 3 * 0.15);
  EXPECT_LE(rms, 3 * 0.022);
  EXPECT_GE(agree, 250);  // the roundings alone: 252-256 of 256
}

// Two feeds of the same ids compared from position `from` on: the largest |logit difference|, the largest |logit|
// of `want`, and how often the top-1 choices agree, overall and where want's own top-1 / top-2 gap is at least
// 0.1 (there the bf16 differences between two paths must not flip the choice).
struct LogitsComparison {
  double max_diff = 0, scale = 0;
  int positions = 0, same_top1 = 0, clear = 0, clear_differs = 0;
};

LogitsComparison compare_logits(const std::vector<float>& got, const std::vector<float>& want, int V, int from) {
  LogitsComparison c;
  const int n = static_cast<int>(want.size() / static_cast<std::size_t>(V));
  for (int p = from; p < n; ++p) {
    const float* a = got.data() + static_cast<std::size_t>(p) * V;
    const float* b = want.data() + static_cast<std::size_t>(p) * V;
    for (int v = 0; v < V; ++v) {
      c.max_diff = std::max(c.max_diff, static_cast<double>(std::fabs(a[v] - b[v])));
      c.scale = std::max(c.scale, static_cast<double>(std::fabs(b[v])));
    }
    const int top_a = static_cast<int>(std::max_element(a, a + V) - a), top_b = static_cast<int>(std::max_element(b, b + V) - b);
    float second = -1e30f;
    for (int v = 0; v < V; ++v)
      if (v != top_b) second = std::max(second, b[v]);
    ++c.positions;
    c.same_top1 += top_a == top_b;
    if (b[top_b] - second >= 0.1f) ++c.clear, c.clear_differs += top_a != top_b;
  }
  return c;
}

TEST(CudaSala, DecodeStepByStepEqualsOneFullPrefill) {
  SKIP_WITHOUT_CUDA_SALA();
  const std::vector<int32_t> ids = testing::random_ids(150, 12345, 4094);
  const int V = sala().config.vocab;
  for (const StateDtype sd : {StateDtype::kFP32, StateDtype::kBF16}) {
    LaunchConfig l;
    l.lightning_state_dtype = sd;
    SingleSequence full = single_sequence(l), stepwise = single_sequence(l);
    // 150 tokens in one step: cuBLAS rows, the chunked lightning form over three chunks of 64. Then 100 + 50
    // one-token steps: the recurrence, through the decode graph of batch 1.
    const std::vector<float> want = full.feed(ids, 0);
    const std::vector<float> got = stepwise.feed_steps(ids, 100, 100);
    ASSERT_EQ(got.size(), want.size());
    const LogitsComparison c = compare_logits(got, want, V, 100);
    std::printf("tiny-sala CUDA, state %s: 50 decode steps vs one prefill: max |logit diff| %.4g (of max |logit| "
                "%.3g), top-1 equal at %d of %d (%d of the %d with a gap >= 0.1 differ)\n",
                state_dtype_name(sd), c.max_diff, c.scale, c.same_top1, c.positions, c.clear_differs, c.clear);
    // Both sides round q|k|v, gate|up and the attention outputs to bf16 along different paths (GEMV and decode
    // attention against cuBLAS and prefill attention; recurrence against chunks): bf16-level differences.
    EXPECT_LE(c.max_diff, 0.03 * c.scale) << state_dtype_name(sd);
    EXPECT_EQ(c.clear_differs, 0) << state_dtype_name(sd);
  }
}

// Quantised layers take three paths by the rows of a step (CudaModel::linear): the GEMV up to 32, the
// quantised-weight GEMM up to 64, the expansion to bf16 + cuBLAS above. The same 300 tokens fed as one step
// (expansion), as steps of 50 (quantised-weight GEMM) and as steps of 20 (GEMV): the expansion and the GEMM
// multiply the same values bf16(q * s), the GEMV rounds int4 scales to bf16 first; the logits agree to those
// roundings and the activations' bf16 roundings. The two formats' logits differ (the weights really are quantised).
TEST(CudaSala, QuantisedLayersAgreeAcrossTheGemvTheQuantisedGemmAndTheExpansion) {
  SKIP_WITHOUT_CUDA_SALA();
  const std::vector<int32_t> ids = testing::random_ids(300, 777, 4094);
  const int V = sala().config.vocab;
  std::vector<std::vector<float>> per_format;
  for (const int bits : {8, 4}) {
    LaunchConfig l;
    l.weight_bits = bits;
    l.weight_group_size = 128;
    const ModelWeights w = testing::weights_for(sala(), l);
    auto seq = [&] { return SingleSequence(testing::cuda_backend(), w, l, /*slot=*/1, /*max_context=*/320); };
    const std::vector<float> want = seq().feed_steps(ids, 300, 300);
    ASSERT_EQ(want.size(), ids.size() * static_cast<std::size_t>(V)) << bits << " bits";
    for (const int chunk : {50, 20}) {
      const std::vector<float> got = seq().feed_steps(ids, 300, chunk);
      ASSERT_EQ(got.size(), want.size()) << bits << " bits, steps of " << chunk;
      const LogitsComparison c = compare_logits(got, want, V, 0);
      std::printf("tiny-sala CUDA int%d g128: steps of %d tokens vs one of 300: max |logit diff| %.4g (of max |logit| "
                  "%.3g), top-1 equal at %d of %d (%d of the %d with a gap >= 0.1 differ)\n",
                  bits, chunk, c.max_diff, c.scale, c.same_top1, c.positions, c.clear_differs, c.clear);
      EXPECT_LE(c.max_diff, 0.03 * c.scale) << bits << " bits, steps of " << chunk;
      EXPECT_EQ(c.clear_differs, 0) << bits << " bits, steps of " << chunk;
    }
    per_format.push_back(want);
  }
  const LogitsComparison between = compare_logits(per_format[1], per_format[0], V, 0);
  std::printf("tiny-sala CUDA int4 g128 against int8 g128: max |logit diff| %.4g, top-1 equal at %d of %d\n",
              between.max_diff, between.same_top1, between.positions);
  EXPECT_GT(between.max_diff, 0.3) << "int4 and int8 give nearly the same logits: were the weights quantised?";
}

TEST(CudaSala, Fp8KvAndQuantisedWeightsRunAndOrderByBits) {
  SKIP_WITHOUT_CUDA_SALA();
  LaunchConfig l16, lkv8, l8, l4;
  lkv8.kv_cache_dtype = KvCacheDtype::kFP8E4M3;
  l8.weight_bits = 8;
  l4.weight_bits = 4;
  l4.weight_group_size = 128;
  for (LaunchConfig* l : {&l16, &lkv8, &l8, &l4}) l->max_running_requests = 16, l->max_prefill_tokens = 1024;
  const double p16 = teacher_forced_agreement(l16), pkv8 = teacher_forced_agreement(lkv8),
               p8 = teacher_forced_agreement(l8), p4 = teacher_forced_agreement(l4);
  std::printf("tiny-sala CUDA teacher-forced top-1: bf16 %.2f%%, bf16 + fp8 KV %.2f%%, int8 %.2f%%, int4 g128 %.2f%%\n",
              p16, pkv8, p8, p4);
  EXPECT_GE(pkv8, 90.0);
  EXPECT_GE(p8, 90.0);
  EXPECT_GT(p16, p4);
  EXPECT_GT(p8, p4);
  EXPECT_GE(p16 + 1.0, p8);  // 8 bits may tie 16 within a position or two, not beat it by more
}

TEST(CudaSala, Bf16LightningStateRunsCloseToFp32) {
  SKIP_WITHOUT_CUDA_SALA();
  LaunchConfig l32, l16;
  l16.lightning_state_dtype = StateDtype::kBF16;
  for (LaunchConfig* l : {&l32, &l16}) l->max_running_requests = 16, l->max_prefill_tokens = 1024, l->lightning_chunk = 32;
  const double p32 = teacher_forced_agreement(l32), p16 = teacher_forced_agreement(l16);
  std::printf("tiny-sala CUDA teacher-forced top-1, lightning chunk 32: fp32 state %.2f%%, bf16 state %.2f%%\n", p32, p16);
  EXPECT_GE(p32, 98.5);
  EXPECT_GE(p16, 95.0);
}

// The states of every slot are device memory taken before the KV pages are sized: reported, and the same
// plan with bf16 states holds half of them.
TEST(CudaSala, LightningStatesAreAllocatedPerSlotAndReported) {
  SKIP_WITHOUT_CUDA_SALA();
  const ModelConfig& c = sala().config;
  const int lightning_layers = c.layers - c.softmax_layers();
  for (const StateDtype sd : {StateDtype::kFP32, StateDtype::kBF16}) {
    LaunchConfig l;
    l.lightning_state_dtype = sd;
    l.max_running_requests = 12;
    auto e = make_engine(l);
    ASSERT_TRUE(e);
    std::string state_bytes;
    for (const KernelPlan& p : e->backend().kernel_plans())
      if (p.op == "lightning") state_bytes = p.choice.at("state_bytes");
    ASSERT_FALSE(state_bytes.empty()) << "no lightning plan reported";
    const long long per_slot = static_cast<long long>(lightning_layers) * c.lightning_state_elems() * (sd == StateDtype::kBF16 ? 2 : 4);
    const long long bytes = std::stoll(state_bytes);
    EXPECT_EQ(bytes % per_slot, 0) << state_bytes;
    EXPECT_GE(bytes / per_slot, 12) << "slots";
    EXPECT_GE(static_cast<long long>(e->backend().peak_memory_bytes()), bytes);
  }
}

}  // namespace
}  // namespace soartune::engine
