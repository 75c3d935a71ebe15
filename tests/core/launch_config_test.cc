#include "core/launch_config.h"

#include <gtest/gtest.h>

namespace soartune {
namespace {

Result<LaunchConfig> parse(const std::string& launch, const std::string& overrides = "") {
  return LaunchConfig::parse(YAML::Load(launch), overrides.empty() ? YAML::Node() : YAML::Load(overrides));
}

TEST(LaunchConfig, DefaultsAreTheReference) {
  auto c = parse("{}");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c.value().weight_bits, 16);
  EXPECT_EQ(c.value().kv_cache_dtype, KvCacheDtype::kBF16);
  EXPECT_EQ(c.value().kv_page_size, 16);
  EXPECT_EQ(c.value().max_running_requests, 64);
  EXPECT_EQ(c.value().max_prefill_tokens, 2048);
  EXPECT_TRUE(c.value().cuda_graphs);
}

TEST(LaunchConfig, ParsesEveryKnob) {
  auto c = parse("{weight_bits: 4, weight_group_size: 32, attn_weight_bits: 8, edge_layers_bits: 16, lm_head_bits: 8, kv_cache_dtype: fp8_e5m2,"
                 " kv_page_size: 64, mem_fraction_pct: 90, max_running_requests: 8, max_prefill_tokens: 256,"
                 " prefill_max_requests: 2, gemv_variant: m1w8u2, decode_kv_splits: 4, prefill_attn_block: 128,"
                 " cuda_graphs: false, cuda_graph_max_bs: 16}");
  ASSERT_TRUE(c.ok()) << c.status().message;
  const LaunchConfig& l = c.value();
  EXPECT_EQ(l.weight_group_size, 32);
  EXPECT_EQ(l.lm_head_bits, 8);
  EXPECT_EQ(l.kv_cache_dtype, KvCacheDtype::kFP8E5M2);
  EXPECT_EQ(l.gemv_variant, "m1w8u2");
  EXPECT_FALSE(l.cuda_graphs);
  EXPECT_EQ(l.cuda_graph_max_bs, 16);
  auto again = LaunchConfig::parse(l.to_yaml(), YAML::Node());
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again.value().decode_kv_splits, 4);
  EXPECT_EQ(again.value().lm_head_bits, 8);
}

TEST(LaunchConfig, ErrorsNameTheFieldAndTheAllowedValues) {
  auto c = parse("{kv_cache_dtype: fp9}");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message, "launch.kv_cache_dtype: fp9 is not one of bf16, fp16, fp8_e4m3, fp8_e5m2");
  c = parse("{weight_bits: 5}");
  EXPECT_EQ(c.status().message, "launch.weight_bits: 5 is not one of 16, 8, 4");
  c = parse("{lm_head_bits: 2}");
  EXPECT_EQ(c.status().message, "launch.lm_head_bits: 2 is not one of 16, 8, 4");
  c = parse("{max_running_requests: 0}");
  EXPECT_EQ(c.status().message, "launch.max_running_requests: 0 is not in 1..1024");
  c = parse("{cuda_graphs: maybe}");
  EXPECT_EQ(c.status().message, "launch.cuda_graphs: maybe is not one of true, false");
  c = parse("{warp_speed: 9}");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message.rfind("launch.warp_speed: unknown knob", 0), 0u);
  c = parse("{}", "{\"3.ffn\": 8}");
  EXPECT_EQ(c.status().message.rfind("layer_overrides.3.ffn:", 0), 0u);
  c = parse("{}", "{\"3\": 5}");
  EXPECT_EQ(c.status().message, "layer_overrides.3: 5 is not one of 16, 8, 4");
}

TEST(LaunchConfig, BitsPrecedence) {
  auto c = parse("{weight_bits: 4, attn_weight_bits: 8, edge_layers_bits: 16}", "{\"1\": 8, \"2.mlp\": 16, \"5.attn\": 4}");
  ASSERT_TRUE(c.ok()) << c.status().message;
  const LaunchConfig& l = c.value();
  const int n = 6;
  EXPECT_EQ(l.weight_bits_for(0, n, ProjKind::kMlp), 16);    // edge layer
  EXPECT_EQ(l.weight_bits_for(5, n, ProjKind::kMlp), 16);    // edge layer
  EXPECT_EQ(l.weight_bits_for(5, n, ProjKind::kAttn), 4);    // "5.attn" beats the edge rule
  EXPECT_EQ(l.weight_bits_for(1, n, ProjKind::kAttn), 8);    // "1"
  EXPECT_EQ(l.weight_bits_for(2, n, ProjKind::kMlp), 16);    // "2.mlp"
  EXPECT_EQ(l.weight_bits_for(2, n, ProjKind::kAttn), 8);    // attn_weight_bits
  EXPECT_EQ(l.weight_bits_for(3, n, ProjKind::kMlp), 4);     // weight_bits
}

TEST(LaunchConfig, PerLayerTypeBitsSitBetweenEdgeLayersAndAttentionBits) {
  auto c = parse("{weight_bits: 4, attn_weight_bits: 16, edge_layers_bits: 16, softmax_attn_bits: 8, mlp_bits: 8}",
                 "{\"2.attn\": 4, \"3\": 16}");
  ASSERT_TRUE(c.ok()) << c.status().message;
  const LaunchConfig& l = c.value();
  const int n = 6;
  EXPECT_EQ(l.weight_bits_for(1, n, ProjKind::kAttn), 8);            // softmax_attn_bits beats attn_weight_bits
  EXPECT_EQ(l.weight_bits_for(1, n, ProjKind::kLightningAttn), 16);  // lightning_attn_bits unset: attn_weight_bits
  EXPECT_EQ(l.weight_bits_for(1, n, ProjKind::kMlp), 8);             // mlp_bits beats weight_bits
  EXPECT_EQ(l.weight_bits_for(0, n, ProjKind::kAttn), 16);           // edge layer beats the per-type knob
  EXPECT_EQ(l.weight_bits_for(5, n, ProjKind::kMlp), 16);
  EXPECT_EQ(l.weight_bits_for(2, n, ProjKind::kLightningAttn), 4);   // "2.attn" applies to either mixer
  EXPECT_EQ(l.weight_bits_for(2, n, ProjKind::kAttn), 4);
  EXPECT_EQ(l.weight_bits_for(3, n, ProjKind::kMlp), 16);            // "3" beats mlp_bits
  auto d = parse("{weight_bits: 8, attn_weight_bits: 4, lightning_attn_bits: 16}");
  ASSERT_TRUE(d.ok()) << d.status().message;
  EXPECT_EQ(d.value().weight_bits_for(1, n, ProjKind::kLightningAttn), 16);
  EXPECT_EQ(d.value().weight_bits_for(1, n, ProjKind::kAttn), 4);    // softmax_attn_bits unset: attn_weight_bits
  EXPECT_EQ(d.value().weight_bits_for(1, n, ProjKind::kMlp), 8);     // mlp_bits unset: weight_bits
}

TEST(LaunchConfig, MixerKnobsParseIntoTypedFields) {
  auto c = parse("{lightning_state_dtype: bf16, lightning_chunk: 128, sparse_attention: false, sparse_topk: 32, "
                 "sparse_window: 1024}");
  ASSERT_TRUE(c.ok()) << c.status().message;
  EXPECT_EQ(c.value().lightning_state_dtype, StateDtype::kBF16);
  EXPECT_EQ(c.value().lightning_chunk, 128);
  EXPECT_FALSE(c.value().sparse_attention);
  EXPECT_EQ(c.value().sparse_topk, 32);
  EXPECT_EQ(c.value().sparse_window, 1024);
  const LaunchConfig r = LaunchConfig::reference();
  EXPECT_EQ(r.lightning_state_dtype, StateDtype::kFP32);
  EXPECT_EQ(r.lightning_chunk, 64);
  EXPECT_TRUE(r.sparse_attention);
  EXPECT_EQ(parse("{lightning_chunk: 48}").status().message, "launch.lightning_chunk: 48 is not one of 32, 64, 128");
  EXPECT_EQ(parse("{lightning_state_dtype: fp16}").status().message,
            "launch.lightning_state_dtype: fp16 is not one of fp32, bf16");
  EXPECT_EQ(parse("{mlp_bits: 2}").status().message, "launch.mlp_bits: 2 is not one of 0, 16, 8, 4");
}

}  // namespace
}  // namespace soartune
