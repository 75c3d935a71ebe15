#include "search/launch_export.h"

#include <algorithm>
#include <map>

#include <gtest/gtest.h>

namespace soartune::search {
namespace {

bool has_flag(const SglangMapping& m, const std::string& flag) {
  return std::find(m.args.begin(), m.args.end(), flag) != m.args.end();
}

std::string flag_value(const SglangMapping& m, const std::string& flag) {
  auto it = std::find(m.args.begin(), m.args.end(), flag);
  if (it == m.args.end() || it + 1 == m.args.end()) return "";
  return *(it + 1);
}

bool lists_unmapped(const SglangMapping& m, const std::string& knob) {
  return std::any_of(m.unmapped.begin(), m.unmapped.end(),
                     [&](const std::string& u) { return u.rfind(knob + "=", 0) == 0; });
}

Config quantised() {
  return {{"weight_bits", int64_t{4}},
          {"weight_group_size", int64_t{64}},
          {"kv_cache_dtype", std::string("fp8_e4m3")},
          {"kv_page_size", int64_t{32}},
          {"mem_fraction_pct", int64_t{90}},
          {"max_running_requests", int64_t{48}},
          {"max_prefill_tokens", int64_t{8192}},
          {"prefill_max_requests", int64_t{4}},
          {"gemv_variant", std::string("auto")},
          {"cuda_graphs", true},
          {"cuda_graph_max_bs", int64_t{64}}};
}

TEST(LaunchExport, MapsKnobsToSglangFlags) {
  auto m = sglang_mapping(quantised());
  ASSERT_TRUE(m.ok()) << m.status().message;
  EXPECT_EQ(flag_value(m.value(), "--quantization"), "gptq_marlin");
  EXPECT_EQ(flag_value(m.value(), "--kv-cache-dtype"), "fp8_e4m3");
  EXPECT_EQ(flag_value(m.value(), "--page-size"), "32");
  EXPECT_EQ(flag_value(m.value(), "--mem-fraction-static"), "0.90");
  EXPECT_EQ(flag_value(m.value(), "--max-running-requests"), "48");
  EXPECT_EQ(flag_value(m.value(), "--chunked-prefill-size"), "8192");
  EXPECT_EQ(flag_value(m.value(), "--max-prefill-tokens"), "8192");
  EXPECT_EQ(flag_value(m.value(), "--prefill-max-requests"), "4");
  EXPECT_EQ(flag_value(m.value(), "--cuda-graph-max-bs"), "64");
  EXPECT_FALSE(has_flag(m.value(), "--disable-cuda-graph"));
  // Knobs of our own engine have no flag and are listed instead.
  EXPECT_TRUE(lists_unmapped(m.value(), "gemv_variant"));
  // decode_kv_splits 0 (chosen from the context length) needs no flag with any attention backend.
  EXPECT_FALSE(lists_unmapped(m.value(), "decode_kv_splits"));
  EXPECT_FALSE(has_flag(m.value(), "--triton-attention-num-kv-splits"));
  EXPECT_TRUE(lists_unmapped(m.value(), "prefill_attn_block"));
  EXPECT_TRUE(lists_unmapped(m.value(), "weight_group_size"));
  ASSERT_FALSE(m.value().notes.empty());
  EXPECT_NE(m.value().notes[0].find("group size 64"), std::string::npos) << m.value().notes[0];
}

TEST(LaunchExport, PerLayerTypeBitsAskForAGptqCheckpoint) {
  for (const char* knob : {"softmax_attn_bits", "lightning_attn_bits", "mlp_bits"}) {
    SCOPED_TRACE(knob);
    auto m = sglang_mapping({{knob, int64_t{8}}});
    ASSERT_TRUE(m.ok()) << m.status().message;
    EXPECT_EQ(flag_value(m.value(), "--quantization"), "gptq_marlin");
    EXPECT_TRUE(lists_unmapped(m.value(), knob));
    ASSERT_FALSE(m.value().notes.empty());
    EXPECT_NE(m.value().notes[0].find("16-bit linears except the per-module bits listed below"), std::string::npos)
        << m.value().notes[0];
    // 16 (or unset) keeps a 16-bit checkpoint.
    auto full = sglang_mapping({{knob, int64_t{16}}});
    ASSERT_TRUE(full.ok());
    EXPECT_FALSE(has_flag(full.value(), "--quantization"));
  }
  // The lightning knobs have no flag and say so; sparse attention off is the MiniCPM fork's --force-dense-minicpm,
  // which exists only under its minicpm attention backends (unmapped, with the reason, elsewhere); topk and the
  // window are the checkpoint's config.json sparse_config entries (0: the model's own, nothing to set).
  auto m = sglang_mapping({{"lightning_state_dtype", std::string("bf16")}, {"sparse_attention", false}});
  ASSERT_TRUE(m.ok()) << m.status().message;
  for (const char* knob : {"lightning_state_dtype", "lightning_chunk", "sparse_attention"})
    EXPECT_TRUE(lists_unmapped(m.value(), knob)) << knob;
  EXPECT_FALSE(has_flag(m.value(), "--force-dense-minicpm"));
  EXPECT_FALSE(lists_unmapped(m.value(), "sparse_topk"));
  EXPECT_TRUE(m.value().model_config.empty());
  for (const char* backend : {"minicpm_flashinfer", "minicpm_flashattn"}) {
    auto fork = sglang_mapping({{"sparse_attention", false}, {"sparse_topk", int64_t{32}}, {"sparse_window", int64_t{1024}}},
                               {"--attention-backend", backend});
    ASSERT_TRUE(fork.ok()) << fork.status().message;
    EXPECT_TRUE(has_flag(fork.value(), "--force-dense-minicpm")) << backend;
    EXPECT_FALSE(lists_unmapped(fork.value(), "sparse_attention"));
    const std::map<std::string, Value> want = {{"sparse_config.topk", int64_t{32}}, {"sparse_config.window_size", int64_t{1024}}};
    EXPECT_EQ(fork.value().model_config, want);
    EXPECT_TRUE(std::any_of(fork.value().notes.begin(), fork.value().notes.end(), [](const std::string& n) {
      return n.rfind("sparse_topk=32: config.json sparse_config.topk = 32", 0) == 0;
    }));
  }
  auto on = sglang_mapping({{"sparse_attention", true}}, {"--attention-backend", "minicpm_flashinfer"});
  ASSERT_TRUE(on.ok());
  EXPECT_FALSE(has_flag(on.value(), "--force-dense-minicpm"));
}

TEST(LaunchExport, DefaultsPinTheReferenceConfig) {
  auto m = sglang_mapping({});
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(has_flag(m.value(), "--quantization"));          // 16-bit weights
  EXPECT_EQ(flag_value(m.value(), "--kv-cache-dtype"), "auto");   // bf16 -> auto
  EXPECT_EQ(flag_value(m.value(), "--max-running-requests"), "64");
  EXPECT_EQ(flag_value(m.value(), "--chunked-prefill-size"), "2048");
  EXPECT_EQ(flag_value(m.value(), "--mem-fraction-static"), "0.85");
  EXPECT_FALSE(has_flag(m.value(), "--prefill-max-requests"));  // 0 = no limit
  EXPECT_FALSE(lists_unmapped(m.value(), "weight_group_size"));
}

TEST(LaunchExport, DisabledCudaGraphsAndFp16Kv) {
  Config c = {{"cuda_graphs", false}, {"kv_cache_dtype", std::string("fp16")}, {"attn_weight_bits", int64_t{8}}};
  auto m = sglang_mapping(c);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(has_flag(m.value(), "--disable-cuda-graph"));
  EXPECT_FALSE(has_flag(m.value(), "--cuda-graph-max-bs"));
  EXPECT_TRUE(lists_unmapped(m.value(), "cuda_graph_max_bs"));
  EXPECT_EQ(flag_value(m.value(), "--kv-cache-dtype"), "auto");
  EXPECT_TRUE(has_flag(m.value(), "--quantization"));   // 8-bit attention projections need a quantised checkpoint
  EXPECT_TRUE(lists_unmapped(m.value(), "attn_weight_bits"));
  Config lm = {{"lm_head_bits", int64_t{8}}};
  auto ml = sglang_mapping(lm);
  ASSERT_TRUE(ml.ok());
  EXPECT_TRUE(has_flag(ml.value(), "--quantization"));  // an 8-bit lm_head needs a quantised checkpoint
  EXPECT_TRUE(lists_unmapped(ml.value(), "lm_head_bits"));
  EXPECT_FALSE(lists_unmapped(m.value(), "lm_head_bits"));
  Config e5 = {{"kv_cache_dtype", std::string("fp8_e5m2")}};
  EXPECT_EQ(flag_value(sglang_mapping(e5).value(), "--kv-cache-dtype"), "fp8_e5m2");
}

TEST(LaunchExport, SglangArgsTextHasHeaderFlagsAndComments) {
  ExportSource src{"job-20261202-161530-3f2a", 7, "hf:/models/minicpm", "0.1.0+abc"};
  auto text = export_sglang_args(quantised(), src);
  ASSERT_TRUE(text.ok());
  const std::string& t = text.value();
  EXPECT_EQ(t.rfind("# ", 0), 0u);
  EXPECT_NE(t.find("job-20261202-161530-3f2a"), std::string::npos);
  EXPECT_NE(t.find("trial 7"), std::string::npos);
  EXPECT_NE(t.find("--model-path /models/minicpm"), std::string::npos);
  EXPECT_NE(t.find("\n--quantization gptq_marlin --kv-cache-dtype fp8_e4m3"), std::string::npos) << t;
  EXPECT_NE(t.find("# Knobs without an SGLang equivalent"), std::string::npos);
  EXPECT_NE(t.find("#   gemv_variant=auto"), std::string::npos) << t;
  // Exactly one line that is not a comment: the flags.
  int uncommented = 0;
  size_t start = 0;
  while (start < t.size()) {
    const size_t end = t.find('\n', start);
    const std::string line = t.substr(start, end - start);
    if (!line.empty() && line[0] != '#') ++uncommented;
    if (end == std::string::npos) break;
    start = end + 1;
  }
  EXPECT_EQ(uncommented, 1);
}

TEST(LaunchExport, EnvScriptExportsTheServerArgs) {
  ExportSource src{"job-1", 3, "synthetic:tiny", ""};
  auto text = export_env_script(quantised(), src);
  ASSERT_TRUE(text.ok());
  const std::string& t = text.value();
  EXPECT_EQ(t.rfind("#!/bin/sh\n", 0), 0u);
  const size_t at = t.find("\nexport SGLANG_SERVER_ARGS=\"--quantization gptq_marlin ");
  ASSERT_NE(at, std::string::npos) << t;
  const size_t eol = t.find('\n', at + 1);
  const std::string line = t.substr(at + 1, eol - at - 1);
  EXPECT_EQ(line.back(), '"');
  EXPECT_EQ(std::count(line.begin(), line.end(), '"'), 2);
  EXPECT_NE(line.find("--max-running-requests 48"), std::string::npos);
  EXPECT_NE(t.find("job job-1, trial 3"), std::string::npos);
  EXPECT_NE(t.find("synthetic test model"), std::string::npos);
}

TEST(LaunchExport, HeaderCannotBreakOutOfItsComment) {
  ExportSource src{"job\nrm -rf /", 1, "hf:/m\necho hi", ""};
  auto text = export_env_script({}, src);
  ASSERT_TRUE(text.ok());
  size_t start = 0;
  const std::string& t = text.value();
  while (start < t.size()) {
    const size_t end = t.find('\n', start);
    const std::string line = t.substr(start, end - start);
    if (!line.empty()) EXPECT_TRUE(line[0] == '#' || line.rfind("export ", 0) == 0) << line;
    if (end == std::string::npos) break;
    start = end + 1;
  }
}

TEST(LaunchExport, BadConfigsAndFormatsNameTheField) {
  auto bad = sglang_mapping({{"kv_cache_dtype", std::string("fp9")}});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message.find("launch.kv_cache_dtype"), std::string::npos) << bad.status().message;
  auto unknown = export_sglang_args({{"warp_speed", int64_t{9}}}, {});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message.find("launch.warp_speed"), std::string::npos);

  EXPECT_EQ(parse_export_format("").value(), ExportFormat::kYaml);
  EXPECT_EQ(parse_export_format("yaml").value(), ExportFormat::kYaml);
  EXPECT_EQ(parse_export_format("sglang-args").value(), ExportFormat::kSglangArgs);
  EXPECT_EQ(parse_export_format("env-script").value(), ExportFormat::kEnvScript);
  auto f = parse_export_format("json");
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message.find("format: json is not one of yaml, sglang-args, env-script"), std::string::npos);
  EXPECT_STREQ(to_string(ExportFormat::kEnvScript), "env-script");
}

}  // namespace
}  // namespace soartune::search
