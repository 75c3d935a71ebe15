// The MiniCPM-SALA launch knobs on the CPU backend, on the synthetic tiny-sala shape: weight bits per layer type
// follow each layer's mixer; lightning_chunk leaves the results unchanged; a bf16 lightning state moves them by
// rounding only; sparse_attention / sparse_topk / sparse_window do what the same sparse_config fields do.
#include <cmath>
#include <cstdio>
#include <vector>

#include <gtest/gtest.h>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine/quantize.h"
#include "engine_runs.h"

namespace soartune::engine {
namespace {

using testing::cpu_logits;

ModelWeights tiny_sala() { return testing::load_checked("synthetic:tiny-sala", 5); }

std::vector<int32_t> prompt(int n, uint32_t seed) {
  std::vector<int32_t> ids;
  for (int i = 0; i < n; ++i) ids.push_back(2 + static_cast<int32_t>((seed = seed * 1664525u + 1013904223u) >> 8) % 4000);
  return ids;
}

double max_diff(const std::vector<float>& a, const std::vector<float>& b, std::size_t from = 0, std::size_t to = 0) {
  double m = 0;
  for (std::size_t i = from; i < (to ? to : a.size()); ++i) m = std::max(m, static_cast<double>(std::fabs(a[i] - b[i])));
  return m;
}

double max_abs(const std::vector<float>& a) {
  double m = 0;
  for (float x : a) m = std::max(m, static_cast<double>(std::fabs(x)));
  return m;
}

// Share of positions whose argmax agrees.
double top1_agreement(const std::vector<float>& a, const std::vector<float>& b, int vocab) {
  const std::size_t rows = a.size() / static_cast<std::size_t>(vocab);
  int same = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const float* x = a.data() + r * vocab;
    const float* y = b.data() + r * vocab;
    same += std::max_element(x, x + vocab) - x == std::max_element(y, y + vocab) - y;
  }
  return static_cast<double>(same) / static_cast<double>(rows);
}

TEST(SalaKnobs, WeightBitsPerLayerTypeFollowTheMixer) {
  ModelWeights w = tiny_sala();
  ASSERT_EQ(w.config.layers, 8);
  LaunchConfig launch = LaunchConfig::reference();
  launch.softmax_attn_bits = 8;
  launch.lightning_attn_bits = 4;
  launch.mlp_bits = 8;
  launch.layer_overrides[3].mlp = 16;       // an override still beats the per-type knob
  ASSERT_TRUE(quantize_model(w, launch).ok());
  for (int i = 0; i < w.config.layers; ++i) {
    const LayerWeights& l = w.layers[static_cast<std::size_t>(i)];
    const int attn = w.config.mixer(i) == MixerKind::kLightning ? 4 : 8;
    SCOPED_TRACE("layer " + std::to_string(i));
    for (const QuantizedLinear* p : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w_out_gate}) EXPECT_EQ(p->bits, attn);
    for (const QuantizedLinear* p : {&l.w_gate, &l.w_up, &l.w_down}) EXPECT_EQ(p->bits, i == 3 ? 16 : 8);
  }
  EXPECT_EQ(w.lm_head.bits, 16);

  // A Llama model's layers are all softmax attention: softmax_attn_bits applies to each, lightning_attn_bits to none.
  auto llama = load_model("synthetic:tiny", 5);
  ASSERT_TRUE(llama.ok()) << llama.status().message;
  LaunchConfig l2 = LaunchConfig::reference();
  l2.softmax_attn_bits = 4;
  l2.lightning_attn_bits = 8;
  ASSERT_TRUE(quantize_model(llama.value(), l2).ok());
  for (const LayerWeights& l : llama.value().layers) {
    EXPECT_EQ(l.wq.bits, 4);
    EXPECT_EQ(l.w_down.bits, 16);
  }
}

TEST(SalaKnobs, LightningChunkLeavesResultsUnchanged) {
  const ModelWeights w = tiny_sala();
  const std::vector<int32_t> ids = prompt(300, 3);   // 300 tokens: partial last chunks at 32, 64 and 128
  LaunchConfig launch = LaunchConfig::reference();
  launch.lightning_chunk = 64;
  const std::vector<float> want = cpu_logits(w, ids, launch);
  for (int chunk : {32, 128}) {
    launch.lightning_chunk = chunk;
    const double err = max_diff(cpu_logits(w, ids, launch), want);
    std::printf("lightning_chunk %d vs 64: max |logit diff| %.3g (logits up to %.3g)\n", chunk, err, max_abs(want));
    EXPECT_LE(err, 1e-4 * std::max(1.0, max_abs(want))) << "chunk " << chunk;
  }
}

TEST(SalaKnobs, Bf16LightningStateMovesLogitsByRoundingOnly) {
  const ModelWeights w = tiny_sala();
  const std::vector<int32_t> ids = prompt(300, 4);
  LaunchConfig launch = LaunchConfig::reference();
  const std::vector<float> fp32 = cpu_logits(w, ids, launch);
  launch.lightning_state_dtype = StateDtype::kBF16;
  const std::vector<float> bf16 = cpu_logits(w, ids, launch);
  const double err = max_diff(bf16, fp32), scale = max_abs(fp32);
  const double agree = top1_agreement(bf16, fp32, w.config.vocab);
  std::printf("bf16 vs fp32 lightning state: max |logit diff| %.3g (logits up to %.3g), top-1 agreement %.4f\n", err,
              scale, agree);
  EXPECT_GT(err, 0.0);               // the state is really stored in bf16
  EXPECT_LE(err, 0.05 * scale);
  EXPECT_GE(agree, 0.95);
}

TEST(SalaKnobs, SparseKnobsActAsTheModelsSparseConfig) {
  const ModelWeights base = tiny_sala();
  // 16-token blocks so that the knobs' smallest window (512 tokens = 32 blocks) and top-k (16) keep 48 blocks,
  // 768 tokens, below the 900-token context; sparse from 256 keys on.
  SparseAttentionConfig sp;
  sp.present = true;
  sp.block_size = 16;
  sp.kernel_size = 32;
  sp.kernel_stride = 16;
  sp.init_blocks = 1;
  sp.topk = 64;
  sp.window_size = 2048;
  sp.dense_len = 256;
  ModelWeights model = base;
  model.config.sparse = sp;
  ModelWeights dense = base;
  dense.config.sparse.present = false;
  ModelWeights narrowed = model;         // the same selection written into the model's config
  narrowed.config.sparse.topk = 16;
  narrowed.config.sparse.window_size = 512;
  const std::vector<int32_t> ids = prompt(900, 8);
  const std::size_t V = static_cast<std::size_t>(base.config.vocab);
  const LaunchConfig reference = LaunchConfig::reference();

  const std::vector<float> want_dense = cpu_logits(dense, ids, reference);
  // The model's own sparse_config keeps every block up to 64 + 128 blocks: dense within this context.
  EXPECT_LE(max_diff(cpu_logits(model, ids, reference), want_dense), 1e-5);
  // sparse_attention: false is the dense fallback, exactly.
  LaunchConfig off = reference;
  off.sparse_attention = false;
  EXPECT_EQ(max_diff(cpu_logits(narrowed, ids, off), want_dense), 0.0);
  // sparse_topk / sparse_window over the model's config equal the same values in the config.
  LaunchConfig knobs = reference;
  knobs.sparse_topk = 16;
  knobs.sparse_window = 512;
  const std::vector<float> got = cpu_logits(model, ids, knobs);
  EXPECT_EQ(max_diff(got, cpu_logits(narrowed, ids, reference)), 0.0);
  // And they select: equal to dense while 48 blocks cover the context (positions < 768), different after.
  const double before = max_diff(got, want_dense, 0, 768 * V), after = max_diff(got, want_dense, 768 * V);
  std::printf("sparse_topk 16, sparse_window 512 vs dense: max diff %.3g before position 768, %.3g from it\n", before,
              after);
  EXPECT_EQ(before, 0.0);
  EXPECT_GT(after, 1e-4);
}

TEST(SalaKnobs, SparseWindowMustCoverWholeBlocks) {
  ModelWeights w = tiny_sala();
  w.config.sparse.present = true;
  w.config.sparse.block_size = 48;     // 512 tokens are not whole 48-token blocks
  w.config.sparse.kernel_stride = 16;
  w.config.sparse.window_size = 1536;
  BackendPlan plan;
  plan.weights = &w;
  plan.launch.sparse_window = 512;
  plan.max_step_tokens = plan.max_output_rows = plan.max_context = 64;
  auto backend = make_cpu_backend(1);
  const Status s = backend->prepare(plan);
  EXPECT_EQ(s.message, "launch.sparse_window: 512 is not a multiple of the model's sparse block_size 48");
  plan.launch.sparse_window = 0;       // the model's own window
  EXPECT_TRUE(make_cpu_backend(1)->prepare(plan).ok());
}

// A top-k that cannot hold the initial blocks and the query's own block besides the window is refused, naming
// the knob; the model's own top-k stays accepted.
TEST(SalaKnobs, SparseTopkMustExceedTheInitialBlocks) {
  ModelWeights w = tiny_sala();
  w.config.sparse.present = true;
  w.config.sparse.init_blocks = 16;
  w.config.sparse.topk = 64;
  BackendPlan plan;
  plan.weights = &w;
  plan.launch.sparse_topk = 16;
  plan.max_step_tokens = plan.max_output_rows = plan.max_context = 64;
  const Status s = make_cpu_backend(1)->prepare(plan);
  EXPECT_EQ(s.message, "launch.sparse_topk: 16 must exceed the model's sparse_config.init_blocks 16 (the initial "
                       "blocks count within topk)");
  plan.launch.sparse_topk = 32;
  EXPECT_TRUE(make_cpu_backend(1)->prepare(plan).ok());
  plan.launch.sparse_topk = 0;
  EXPECT_TRUE(make_cpu_backend(1)->prepare(plan).ok());
}

}  // namespace
}  // namespace soartune::engine
