// Fuzz target: a job spec as SubmitJob hands it to the daemon (daemon/job_spec.h parse_job_spec), with the
// daemon's confinement to data roots on. The roots hold a small hf: model directory (config.json only: the
// daemon reads nothing else of a model), the repository's workload files and an accuracy set, so the
// branches that read them are reached. A spec that parses must also produce a trial file.
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "daemon/job_spec.h"
#include "fixture_dir.h"

namespace {

soartune::daemon::SpecContext g_ctx;

std::string read_text(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  using soartune::fuzz::put_fixture;
  put_fixture("model/config.json",
              R"({"architectures": ["LlamaForCausalLM"], "hidden_size": 64, "intermediate_size": 128,)"
              R"( "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,)"
              R"( "max_position_embeddings": 256, "vocab_size": 512})");
  put_fixture("accuracy.jsonl", "{\"prompt_ids\": [1, 2, 3], \"continuation_ids\": [4, 5]}\n");
  for (const auto& e : std::filesystem::directory_iterator(SOARTUNE_SOURCE_DIR "/configs/workloads"))
    put_fixture("workloads/" + e.path().filename().string(), read_text(e.path()));
  g_ctx.workloads_dir = soartune::fuzz::fixture_path("workloads");
  g_ctx.data_roots = {soartune::fuzz::kFixtureDir};
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto spec = soartune::daemon::parse_job_spec(text, g_ctx);
  if (spec.ok()) {
    const soartune::Config launch = soartune::daemon::trial_config(spec.value(), {});
    (void)soartune::daemon::trial_yaml(spec.value(), launch, {"/tmp/soartune-fuzz/ref.out", "", ""});
  }
  return 0;
}
