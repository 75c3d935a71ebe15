#include "core/knob_catalogue.h"

#include "core/kernel_variants.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

namespace soartune::core {
namespace {

TEST(LaunchKnobsTest, CatalogueHasEveryKnobOnceWithAnAllowedDefault) {
  std::set<std::string> names;
  for (const KnobSpec& k : launch_knobs()) {
    EXPECT_TRUE(names.insert(k.name).second) << k.name;
    EXPECT_TRUE(k.allows(k.default_value)) << k.name << " default " << to_text(k.default_value);
    EXPECT_FALSE(k.description.empty()) << k.name;
  }
  for (const char* n : {"weight_bits", "weight_group_size", "attn_weight_bits", "edge_layers_bits", "lm_head_bits", "kv_cache_dtype",
                        "kv_page_size", "mem_fraction_pct", "max_running_requests", "max_prefill_tokens",
                        "prefill_max_requests", "gemv_variant", "decode_kv_splits", "prefill_attn_block",
                        "cuda_graphs", "cuda_graph_max_bs", "softmax_attn_bits", "lightning_attn_bits", "mlp_bits",
                        "lightning_state_dtype", "lightning_chunk", "sparse_attention", "sparse_topk", "sparse_window",
                        "quant_method"})
    EXPECT_TRUE(names.count(n)) << n;
  EXPECT_EQ(names.size(), 25u);
}

TEST(LaunchKnobsTest, DefaultsAreTheReferenceConfig) {
  const Config d = default_config();
  EXPECT_EQ(d.at("weight_bits"), Value{int64_t{16}});
  EXPECT_EQ(d.at("weight_group_size"), Value{int64_t{128}});
  EXPECT_EQ(d.at("kv_cache_dtype"), Value{std::string("bf16")});
  EXPECT_EQ(d.at("kv_page_size"), Value{int64_t{16}});
  EXPECT_EQ(d.at("mem_fraction_pct"), Value{int64_t{85}});
  EXPECT_EQ(d.at("max_running_requests"), Value{int64_t{64}});
  EXPECT_EQ(d.at("max_prefill_tokens"), Value{int64_t{2048}});
  EXPECT_EQ(d.at("gemv_variant"), Value{std::string("auto")});
  EXPECT_EQ(d.at("cuda_graphs"), Value{true});
  EXPECT_EQ(d.at("cuda_graph_max_bs"), Value{int64_t{32}});
  // MiniCPM-SALA: the per-type bits unset, an fp32 state, 64-token chunks, sparse attention as the model says.
  for (const char* k : {"softmax_attn_bits", "lightning_attn_bits", "mlp_bits", "sparse_topk", "sparse_window"})
    EXPECT_EQ(d.at(k), Value{int64_t{0}}) << k;
  EXPECT_EQ(d.at("lightning_state_dtype"), Value{std::string("fp32")});
  EXPECT_EQ(d.at("lightning_chunk"), Value{int64_t{64}});
  EXPECT_EQ(d.at("sparse_attention"), Value{true});
  EXPECT_TRUE(validate_launch(d).ok());
}

TEST(LaunchKnobsTest, SglangFlags) {
  using Rule = ServingFlag::Rule;
  EXPECT_EQ(find_knob("kv_cache_dtype")->serving.flags, std::vector<std::string>{"--kv-cache-dtype"});
  EXPECT_EQ(find_knob("max_running_requests")->serving.flags, std::vector<std::string>{"--max-running-requests"});
  EXPECT_EQ(find_knob("cuda_graphs")->serving.rule, Rule::kDisableSwitch);
  // SGLang's split-KV count exists for its triton attention backend only.
  EXPECT_EQ(find_knob("decode_kv_splits")->serving.rule, Rule::kValue);
  EXPECT_EQ(find_knob("decode_kv_splits")->serving.flags,
            std::vector<std::string>{"--triton-attention-num-kv-splits"});
  EXPECT_EQ(find_knob("decode_kv_splits")->serving.requires_attention_backend, "triton");
  EXPECT_EQ(find_knob("weight_bits")->serving.rule, Rule::kCheckpoint);
  // MiniCPM-SALA's sparse knobs: the fork's dense switch, and the checkpoint's sparse_config entries.
  EXPECT_EQ(find_knob("sparse_attention")->serving.flags, std::vector<std::string>{"--force-dense-minicpm"});
  EXPECT_EQ(find_knob("sparse_topk")->serving.config_key, "sparse_config.topk");
  EXPECT_EQ(find_knob("sparse_window")->serving.config_key, "sparse_config.window_size");
  EXPECT_EQ(model_config_overrides({{"sparse_topk", int64_t{0}}, {"sparse_window", int64_t{2048}}}),
            (std::map<std::string, Value>{{"sparse_config.window_size", int64_t{2048}}}));
  // Every knob says how it reaches the server, or why it does not.
  for (const KnobSpec& k : launch_knobs()) {
    if (k.serving.rule == Rule::kNone || k.serving.rule == Rule::kCheckpoint)
      EXPECT_FALSE(k.serving.note.empty()) << k.name;
    else if (k.serving.rule == Rule::kModelConfig)   // a checkpoint config.json entry, no flag
      EXPECT_TRUE(!k.serving.config_key.empty() && !k.serving.note.empty() && k.serving.flags.empty()) << k.name;
    else
      EXPECT_FALSE(k.serving.flags.empty()) << k.name;
    EXPECT_FALSE(k.short_name.empty()) << k.name;
    EXPECT_NE(k.get, nullptr) << k.name;
    EXPECT_NE(k.set, nullptr) << k.name;
  }
}

TEST(LaunchKnobsTest, LookUp) {
  ASSERT_NE(find_knob("weight_bits"), nullptr);
  EXPECT_EQ(find_knob("weight_bits")->type, KnobType::kInt);
  EXPECT_EQ(find_knob("cuda_graphs")->type, KnobType::kBool);
  EXPECT_EQ(find_knob("kv_cache_dtype")->type, KnobType::kString);
  EXPECT_EQ(find_knob("no_such_knob"), nullptr);
  EXPECT_NE(known_knob_names().find("weight_bits, weight_group_size"), std::string::npos);
}

TEST(LaunchKnobsTest, ValidateNamesFieldAndAllowedValues) {
  EXPECT_TRUE(validate_knob("weight_bits", int64_t{8}, "launch.weight_bits").ok());
  Status s = validate_knob("weight_bits", int64_t{5}, "launch.weight_bits");
  EXPECT_EQ(s.code, Code::kInvalidArgument);
  EXPECT_EQ(s.message, "launch.weight_bits: 5 is not one of 16, 8, 4");
  s = validate_knob("kv_cache_dtype", std::string("fp9"), "launch.kv_cache_dtype");
  EXPECT_EQ(s.message, "launch.kv_cache_dtype: fp9 is not one of bf16, fp16, fp8_e4m3, fp8_e5m2");
  s = validate_knob("mem_fraction_pct", int64_t{96}, "f");
  EXPECT_EQ(s.message, "f: 96 is not in 50..95");
  EXPECT_TRUE(validate_knob("mem_fraction_pct", int64_t{50}, "f").ok());
  EXPECT_TRUE(validate_knob("mem_fraction_pct", int64_t{95}, "f").ok());
  s = validate_knob("weight_bits", std::string("abc"), "f");
  EXPECT_EQ(s.message, "f: abc is not one of 16, 8, 4");
  s = validate_knob("cuda_graphs", int64_t{1}, "f");
  EXPECT_EQ(s.message, "f: 1 is not one of true, false");
  s = validate_knob("foo", int64_t{1}, "launch.foo");
  EXPECT_EQ(s.message.rfind("launch.foo: unknown knob; known knobs: weight_bits, ", 0), 0u) << s.message;
}

TEST(LaunchKnobsTest, GemvVariantIsAutoOrAVariantTheKernelsImplement) {
  EXPECT_TRUE(validate_knob("gemv_variant", std::string("auto"), "f").ok());
  for (const std::string& name : gemv_variant_names())
    EXPECT_TRUE(validate_knob("gemv_variant", name, "f").ok()) << name;
  EXPECT_EQ(find_knob("gemv_variant")->values.size(), gemv_variant_names().size() + 1);
  // A well-formed name the kernels do not have is refused at once, not by a crashed worker.
  Status s = validate_knob("gemv_variant", std::string("w4_g128_t64x4"), "f");
  EXPECT_EQ(s.message, "f: w4_g128_t64x4 is not one of " + find_knob("gemv_variant")->allowed_text());
  EXPECT_FALSE(validate_knob("gemv_variant", std::string(""), "f").ok());
}

TEST(LaunchKnobsTest, ValueFromTextFollowsTheKnobType) {
  Result<Value> v = knob_value_from_text(*find_knob("cuda_graphs"), "false", "x");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.value(), Value{false});
  v = knob_value_from_text(*find_knob("kv_page_size"), "64", "x");
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(v.value(), Value{int64_t{64}});
  v = knob_value_from_text(*find_knob("kv_page_size"), "6.5", "x");
  EXPECT_FALSE(v.ok());
  EXPECT_EQ(v.status().message, "x: 6.5 is not one of 8, 16, 32, 64, 128");
}

TEST(LaunchKnobsTest, ReferenceConfigOverlaysAndValidates) {
  Result<Config> r = reference_config({{"weight_bits", int64_t{8}}});
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r.value().at("weight_bits"), Value{int64_t{8}});
  EXPECT_EQ(r.value().at("kv_cache_dtype"), Value{std::string("bf16")});
  EXPECT_EQ(r.value().size(), launch_knobs().size());
  r = reference_config({{"kv_page_size", int64_t{12}}});
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message, "reference.kv_page_size: 12 is not one of 8, 16, 32, 64, 128");
  Status s = validate_launch({{"weight_bits", int64_t{4}}, {"max_prefill_tokens", int64_t{8}}});
  EXPECT_EQ(s.message, "launch.max_prefill_tokens: 8 is not in 16..131072");
}

}  // namespace
}  // namespace soartune::core

namespace soartune::core {
namespace {

TEST(LaunchKnobsTest, LaunchConfigFromTextRoundTrips) {
  Config c = default_config();
  c["weight_bits"] = int64_t{4};
  c["gemv_variant"] = std::string("m1w8u2");
  c["cuda_graphs"] = false;
  Result<Config> back = launch_config_from_text(to_text(c));
  ASSERT_TRUE(back.ok()) << back.status().message;
  EXPECT_EQ(back.value(), c);
  // Digits given to a string knob are read as its text and refused with the knob's allowed values.
  back = launch_config_from_text({{"gemv_variant", "128"}});
  EXPECT_EQ(back.status().message, "launch.gemv_variant: 128 is not one of " + find_knob("gemv_variant")->allowed_text());
  back = launch_config_from_text({{"kv_cache_dtype", "fp9"}});
  EXPECT_EQ(back.status().message, "launch.kv_cache_dtype: fp9 is not one of bf16, fp16, fp8_e4m3, fp8_e5m2");
  back = launch_config_from_text({{"bits", "4"}}, "fixed");
  EXPECT_EQ(back.status().message.rfind("fixed.bits: unknown knob; known knobs: ", 0), 0u);
}

TEST(LaunchKnobsTest, LaunchConfigFromYaml) {
  Result<Config> r = launch_config_from_yaml(YAML::Load("{weight_bits: 4, kv_cache_dtype: fp8_e4m3, cuda_graphs: false}"),
                                             "reference");
  ASSERT_TRUE(r.ok()) << r.status().message;
  EXPECT_EQ(r.value(), (Config{{"weight_bits", int64_t{4}}, {"kv_cache_dtype", std::string("fp8_e4m3")},
                               {"cuda_graphs", false}}));
  EXPECT_TRUE(launch_config_from_yaml(YAML::Node()).value().empty());
  EXPECT_TRUE(launch_config_from_yaml(YAML::Load("{}")).value().empty());
  EXPECT_EQ(launch_config_from_yaml(YAML::Load("[4]"), "fixed").status().message,
            "fixed: must be a mapping of knob name -> value");
  EXPECT_EQ(launch_config_from_yaml(YAML::Load("{weight_bits: [4]}"), "fixed").status().message,
            "fixed.weight_bits: must be a single value; allowed: 16, 8, 4");
  EXPECT_EQ(launch_config_from_yaml(YAML::Load("{max_running_requests: 0}")).status().message,
            "launch.max_running_requests: 0 is not in 1..1024");
}

}  // namespace
}  // namespace soartune::core
