// The serving target and the submission bundle: the job spec's `serving:` rules, the flag-table fixes of the
// exporter (issue 19), and prepare_env.sh sourced in a clean shell, its SGLANG_SERVER_ARGS parsed with the
// fork's flag list read from the data file in configs/serving/.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "core/knob_catalogue.h"
#include "search/launch_export.h"
#include "search/serving_engine.h"
#include "search/sglang_bundle.h"

namespace soartune::search {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> words(const std::string& s) {
  std::istringstream in(s);
  std::vector<std::string> out;
  for (std::string w; in >> w;) out.push_back(w);
  return out;
}

ServingSpec minicpm() {
  Result<ServingSpec> s = parse_serving(YAML::Load("{engine: sglang-minicpm}"));
  EXPECT_TRUE(s.ok()) << s.status().message;
  return s.value();
}

bool contains(const std::vector<std::string>& v, const std::string& needle) {
  for (const std::string& s : v)
    if (s.find(needle) != std::string::npos) return true;
  return false;
}

TEST(ServingSpec, MinicpmDefaultsAreTheRaceBaseFlags) {
  EXPECT_EQ(minicpm().base_args,
            (std::vector<std::string>{"--trust-remote-code", "--disable-radix-cache", "--attention-backend",
                                      "minicpm_flashinfer", "--dense-as-sparse", "--skip-server-warmup"}));
  Result<ServingSpec> up = parse_serving(YAML::Load("{engine: sglang-upstream}"));
  ASSERT_TRUE(up.ok());
  EXPECT_TRUE(up.value().base_args.empty());
}

TEST(ServingSpec, RefusesUnknownFlagsBadValuesRadixCacheAndKnobFlags) {
  auto err = [](const std::string& yaml) {
    Result<ServingSpec> s = parse_serving(YAML::Load(yaml));
    return s.ok() ? std::string("(accepted)") : s.status().message;
  };
  EXPECT_EQ(err("{engine: vllm}"), "serving.engine: vllm is not one of sglang-upstream, sglang-minicpm");
  EXPECT_EQ(err("{engine: sglang-minicpm, base_args: [--disable-radix-cache, --radix-cache]}"),
            "serving.base_args[1]: --radix-cache is not a flag of sglang-minicpm");
  // The fork's flags are not upstream's.
  EXPECT_EQ(err("{engine: sglang-upstream, base_args: [--dense-as-sparse]}"),
            "serving.base_args[0]: --dense-as-sparse is not a flag of sglang-upstream");
  EXPECT_EQ(err("{engine: sglang-minicpm, base_args: [--disable-radix-cache, --attention-backend, magic]}"),
            "serving.base_args[1]: --attention-backend magic: not one of triton, torch_native, flex_attention, nsa, "
            "cutlass_mla, fa3, fa4, flashinfer, flashmla, trtllm_mla, trtllm_mha, dual_chunk_flash_attn, "
            "minicpm_flashattn, minicpm_flashinfer, aiter, wave, intel_amx, ascend, intel_xpu");
  EXPECT_EQ(err("{engine: sglang-minicpm, base_args: [--disable-radix-cache, --tp-size, two]}"),
            "serving.base_args[1]: --tensor-parallel-size two: not an integer");
  EXPECT_NE(err("{engine: sglang-minicpm, base_args: [--trust-remote-code]}").find(
                "--disable-radix-cache is missing; the race forbids the radix (prefix) cache"),
            std::string::npos);
  EXPECT_EQ(err("{engine: sglang-minicpm, base_args: [--disable-radix-cache, --page-size, '16']}"),
            "serving.base_args: --page-size is set by the launch knob kv_page_size; vary it in space: or hold it in "
            "fixed:, not in base_args");
  EXPECT_EQ(err("{engine: sglang-minicpm, base_args: [--disable-radix-cache, --disable-radix-cache]}"),
            "serving.base_args: --disable-radix-cache is given twice");
  EXPECT_NE(err("{engine: sglang-minicpm, base_args: [--disable-radix-cache, 'a b']}").find("must be one word"),
            std::string::npos);
}

TEST(FlagTableFixes, NoW8a16AndQuantisedWeightsAskForGptqMarlin) {
  for (int64_t bits : {8, 4}) {
    Result<SglangMapping> m = sglang_mapping({{"weight_bits", bits}});
    ASSERT_TRUE(m.ok());
    const std::string line = [&] {
      std::string s;
      for (const auto& a : m.value().args) s += a + " ";
      return s;
    }();
    EXPECT_NE(line.find("--quantization gptq_marlin"), std::string::npos) << line;
    EXPECT_EQ(line.find("w8a16"), std::string::npos);
  }
}

TEST(FlagTableFixes, Fp16KvSaysItNeedsDtypeFloat16) {
  Result<SglangMapping> m = sglang_mapping({{"kv_cache_dtype", std::string("fp16")}}, minicpm().base_args);
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(contains(m.value().notes, "fp16 only with --dtype float16"));
  m = sglang_mapping({{"kv_cache_dtype", std::string("fp16")}}, {"--dtype", "float16"});
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(contains(m.value().notes, "--dtype float16"));
}

TEST(FlagTableFixes, Fp8KvSaysUnitScalesWithoutAParamPath) {
  Result<SglangMapping> m = sglang_mapping({{"kv_cache_dtype", std::string("fp8_e4m3")}});
  ASSERT_TRUE(m.ok());
  EXPECT_TRUE(contains(m.value().notes, "unit scales"));
  m = sglang_mapping({{"kv_cache_dtype", std::string("fp8_e4m3")}}, {"--quantization-param-path", "/s.json"});
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(contains(m.value().notes, "unit scales"));
}

TEST(FlagTableFixes, DecodeKvSplitsMapsOnlyWithTheTritonBackend) {
  const Config c = {{"decode_kv_splits", int64_t{8}}};
  Result<SglangMapping> m = sglang_mapping(c, {"--attention-backend", "triton"});
  ASSERT_TRUE(m.ok());
  std::vector<std::string> want = {"--triton-attention-num-kv-splits", "8"};
  EXPECT_NE(std::search(m.value().args.begin(), m.value().args.end(), want.begin(), want.end()),
            m.value().args.end());
  m = sglang_mapping(c, minicpm().base_args);
  ASSERT_TRUE(m.ok());
  EXPECT_FALSE(contains(m.value().args, "--triton-attention-num-kv-splits"));
  EXPECT_TRUE(contains(m.value().unmapped, "decode_kv_splits=8: --triton-attention-num-kv-splits applies to the "
                                           "triton attention backend only"));
  // 0 (automatic) needs no flag with any backend.
  m = sglang_mapping({{"decode_kv_splits", int64_t{0}}}, {"--attention-backend", "triton"});
  EXPECT_FALSE(contains(m.value().args, "--triton-attention-num-kv-splits"));
}

TEST(FlagTableFixes, GroupSize256CannotBeExportedWithQuantisedWeights) {
  const core::KnobSpec& g = *core::find_knob("weight_group_size");
  EXPECT_NE(core::serving_export_refusal(g, int64_t{256}).find("-1 (per channel), 32, 64, 128"), std::string::npos);
  EXPECT_TRUE(core::serving_export_refusal(g, int64_t{128}).empty());
  Result<SglangMapping> m = sglang_mapping({{"weight_bits", int64_t{4}}, {"weight_group_size", int64_t{256}}});
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message.find("launch.weight_group_size: 256 cannot be served"), std::string::npos);
  // With 16-bit weights the group size is unused and the config exports.
  EXPECT_TRUE(sglang_mapping({{"weight_group_size", int64_t{256}}}).ok());
}

// prepare_env.sh in a clean shell: SGLANG_SERVER_ARGS holds every base flag once and every tuned flag once,
// and every flag and value is valid for the fork (its flag list read from the data file, not the compiled copy).
TEST(SglangBundle, PrepareEnvSourcedInACleanShellIsAValidForkCommandLine) {
  const ServingSpec serving = minicpm();
  const Config launch = {{"kv_cache_dtype", std::string("fp8_e4m3")}, {"kv_page_size", int64_t{32}},
                         {"max_running_requests", int64_t{16}}, {"max_prefill_tokens", int64_t{4096}},
                         {"cuda_graphs", false}, {"mem_fraction_pct", int64_t{80}}, {"decode_kv_splits", int64_t{4}}};
  Result<BundleText> b = sglang_bundle(launch, ExportSource{"job1", 3, "hf:/models/x", "0.1.0"}, serving,
                                       BundleSummary{{"score 0.9"}, ""}, "");
  ASSERT_TRUE(b.ok()) << b.status().message;
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("bundle-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "prepare_env.sh") << b.value().prepare_env;
  const std::string cmd = "cd '" + dir.string() + "' && env -i sh -c '. ./prepare_env.sh; echo \"$SGLANG_SERVER_ARGS\"'";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (size_t n = std::fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << out;
  std::filesystem::remove_all(dir);

  const std::vector<std::string> tokens = words(out);
  const std::string file = std::string(SOARTUNE_SOURCE_DIR) + "/configs/serving/sglang-minicpm-flags.yaml";
  Result<FlagList> fork = FlagList::parse(read_text(file), file);
  ASSERT_TRUE(fork.ok()) << fork.status().message;
  Result<std::vector<ParsedFlag>> parsed = parse_server_args(fork.value(), tokens, "SGLANG_SERVER_ARGS", "fork");
  ASSERT_TRUE(parsed.ok()) << parsed.status().message << "\n" << out;
  std::map<std::string, int> count;
  for (const ParsedFlag& f : parsed.value()) ++count[f.flag];
  for (const std::string& f : {"--trust-remote-code", "--disable-radix-cache", "--attention-backend",
                               "--dense-as-sparse", "--skip-server-warmup", "--kv-cache-dtype", "--page-size",
                               "--max-running-requests", "--chunked-prefill-size", "--max-prefill-tokens",
                               "--disable-cuda-graph", "--mem-fraction-static"})
    EXPECT_EQ(count[f], 1) << f << " in " << out;
  for (const auto& [flag, n] : count) EXPECT_EQ(n, 1) << flag;
  EXPECT_EQ(flag_values(parsed.value(), "--page-size")->at(0), "32");
  EXPECT_EQ(flag_values(parsed.value(), "--mem-fraction-static")->at(0), "0.80");
  // The README says what could not be mapped and the FP8 caveat.
  EXPECT_NE(b.value().readme.find("decode_kv_splits=4"), std::string::npos);
  EXPECT_NE(b.value().readme.find("unit scales"), std::string::npos);
  EXPECT_NE(b.value().readme.find("score 0.9"), std::string::npos);
}

// The env-script export no longer drops the base flags: they lead SGLANG_SERVER_ARGS.
TEST(SglangBundle, EnvScriptCarriesTheBaseFlags) {
  Result<std::string> text = export_env_script({{"kv_page_size", int64_t{32}}}, ExportSource{}, minicpm().base_args);
  ASSERT_TRUE(text.ok()) << text.status().message;
  EXPECT_NE(text.value().find("export SGLANG_SERVER_ARGS=\"--trust-remote-code --disable-radix-cache "
                              "--attention-backend minicpm_flashinfer --dense-as-sparse --skip-server-warmup "
                              "--kv-cache-dtype auto --page-size 32 "),
            std::string::npos)
      << text.value();
}

// Every flag a launch knob can emit is a flag of both engines, so a tuned flag is never refused as unknown.
TEST(SglangBundle, EveryCatalogueFlagIsAFlagOfBothEngines) {
  for (ServingEngine e : {ServingEngine::kSglangUpstream, ServingEngine::kSglangMinicpm})
    for (const core::KnobSpec& k : core::launch_knobs())
      for (const std::string& f : k.serving.flags) {
        // A switch that exists only under the fork's minicpm attention backends (--force-dense-minicpm) is never
        // emitted for upstream, which has no such backend (the export lists the knob as unmapped there).
        if (!k.serving.requires_any_attention_backend.empty() && e == ServingEngine::kSglangUpstream) continue;
        EXPECT_NE(flag_list(e).find(f), nullptr) << f << " " << to_string(e);
      }
}

// MiniCPM-SALA's sparse knobs in a bundle for the fork: sparse attention off is --force-dense-minicpm on the
// command line (a valid fork line with the race's base flags); topk and window are config.json entries, written
// into the bundle's checkpoint when it has one and otherwise spelled out for the served checkpoint.
TEST(SglangBundle, SparseKnobsReachTheForkFlagAndTheCheckpointConfig) {
  const Config launch = {{"sparse_attention", false}, {"sparse_topk", int64_t{32}}, {"sparse_window", int64_t{1024}},
                         {"lightning_state_dtype", std::string("bf16")}};
  for (const std::string checkpoint : {"", "checkpoint"}) {
    Result<BundleText> b = sglang_bundle(launch, ExportSource{"job1", 2, "hf:/models/sala", ""}, minicpm(),
                                         BundleSummary{}, checkpoint);
    ASSERT_TRUE(b.ok()) << b.status().message;
    const std::vector<std::string>& args = b.value().server_args;
    EXPECT_EQ(std::count(args.begin(), args.end(), "--force-dense-minicpm"), 1);
    EXPECT_NE(b.value().prepare_env.find("--force-dense-minicpm"), std::string::npos);
    const std::string& readme = b.value().readme;
    EXPECT_NE(readme.find("## Checkpoint config.json"), std::string::npos) << readme;
    EXPECT_NE(readme.find("- `sparse_config.topk`: 32"), std::string::npos) << readme;
    EXPECT_NE(readme.find("- `sparse_config.window_size`: 1024"), std::string::npos) << readme;
    EXPECT_NE(readme.find(checkpoint.empty() ? "set these entries in the served checkpoint's config.json"
                                             : "Written into ./checkpoint/config.json"),
              std::string::npos)
        << readme;
    // No flag sets the lightning state's dtype: said, with the reason.
    EXPECT_NE(readme.find("lightning_state_dtype=bf16: no flag"), std::string::npos) << readme;
  }
}

TEST(SglangBundle, CompiledFlagListsMatchTheDataFiles) {
  for (ServingEngine e : {ServingEngine::kSglangUpstream, ServingEngine::kSglangMinicpm}) {
    const std::string file = std::string(SOARTUNE_SOURCE_DIR) + "/configs/serving/" + to_string(e) + "-flags.yaml";
    Result<FlagList> l = FlagList::parse(read_text(file), file);
    ASSERT_TRUE(l.ok()) << l.status().message;
    EXPECT_EQ(l.value().size(), flag_list(e).size()) << file;
  }
}

}  // namespace
}  // namespace soartune::search
