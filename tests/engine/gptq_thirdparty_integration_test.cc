// GPTQ checkpoints as AutoGPTQ / GPTQModel write them (desc_act false or static groups), produced by an
// independent numpy writer (tests/gptq_thirdparty.py, from the format's public description) out of the shared
// tiny-llama-bpe4k: quantize_config.json alone or quantization_config in config.json, checkpoint_format gptq and
// gptq_v2, 4 and 8 bits, group sizes 128 / 64 / 32 / per channel, per-module `dynamic` overrides (a module kept
// 16-bit, another at other bits), biases, an fp16 lm_head, one file or shards. `model: hf:` of each loads to
// exactly numpy's dequantised weights (max abs diff 0 in fp32); what the engine cannot hold (reordered g_idx,
// 2- and 3-bit codes, asymmetric zeros, another checkpoint_format) is refused naming the key or tensor.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"
#include "engine/quantize.h"
#include "engine/safetensors.h"
#include "tiny_model.h"

namespace soartune::engine {
namespace {

namespace fs = std::filesystem;
using testing::tiny_model_dir;

std::string numpy_python() {
  // Debian's interpreter first: another python3 earlier on PATH may lack Debian's python3-numpy.
  for (const char* candidate : {"/usr/bin/python3", "python3"})
    if (std::system((std::string(candidate) + " -c 'import numpy' >/dev/null 2>&1").c_str()) == 0) return candidate;
  return "";
}

// The largest |engine - numpy| over a linear's dequantised weight and bias; -1 when a tensor is missing.
double max_diff(const Checkpoint& expected, const std::string& module, const QuantizedLinear& l) {
  std::vector<float> want, got(static_cast<std::size_t>(l.out) * l.in);
  if (!expected.read_f32(module + ".weight", {l.out, l.in}, &want).ok()) return -1;
  dequantize_rows(l, 0, l.out, got.data());
  double m = 0;
  for (std::size_t k = 0; k < got.size(); ++k) m = std::max(m, std::fabs(static_cast<double>(got[k]) - want[k]));
  if (expected.has(module + ".bias")) {
    std::vector<float> b;
    if (!expected.read_f32(module + ".bias", {l.out}, &b).ok() || l.bias.size() != b.size()) return -1;
    for (std::size_t k = 0; k < b.size(); ++k) m = std::max(m, std::fabs(static_cast<double>(l.bias[k]) - b[k]));
  }
  return m;
}

TEST(GptqThirdParty, AutoGptqAndGptqModelCheckpointsLoadAsNumpyDequantisesThem) {
  SKIP_WITHOUT_TINY_MODEL();
  const std::string python = numpy_python();
  if (python.empty()) GTEST_SKIP() << "python3-numpy is not installed (scripts/install-deps.sh installs it)";
  const fs::path dir = fs::temp_directory_path() / ("soartune-gptq-thirdparty-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  const std::string cmd = python + " " + std::string(SOARTUNE_SOURCE_DIR) + "/tests/gptq_thirdparty.py " +
                          tiny_model_dir() + " " + dir.string() + " 2>&1";
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  for (std::size_t n; (n = fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  const nlohmann::json manifest = nlohmann::json::parse(std::ifstream(dir / "manifest.json"));
  ASSERT_EQ(manifest.size(), 9u);

  int accepted = 0, refused = 0;
  for (const auto& [variant, want] : manifest.items()) {
    SCOPED_TRACE(variant);
    auto w = load_model("hf:" + (dir / variant).string());
    if (!want["accept"].get<bool>()) {
      ASSERT_FALSE(w.ok()) << "loaded a checkpoint the engine cannot hold";
      EXPECT_NE(w.status().message.find(want["error"].get<std::string>()), std::string::npos) << w.status().message;
      std::printf("%-36s refused: %s\n", variant.c_str(), w.status().message.c_str());
      ++refused;
      continue;
    }
    ASSERT_TRUE(w.ok()) << w.status().message;
    auto expected = Checkpoint::open_dir((dir / (variant + ".expected")).string());
    ASSERT_TRUE(expected.ok()) << expected.status().message;
    double worst = 0;
    int quantised = 0, checked = 0;
    const ModelWeights& m = w.value();
    for (std::size_t i = 0; i < m.layers.size(); ++i) {
      const LayerWeights& l = m.layers[i];
      const std::string pre = "model.layers." + std::to_string(i) + ".";
      const std::pair<const char*, const QuantizedLinear*> linears[] = {
          {"self_attn.q_proj", &l.wq}, {"self_attn.k_proj", &l.wk}, {"self_attn.v_proj", &l.wv},
          {"self_attn.o_proj", &l.wo}, {"mlp.gate_proj", &l.w_gate}, {"mlp.up_proj", &l.w_up},
          {"mlp.down_proj", &l.w_down}};
      for (const auto& [name, lin] : linears) {
        const double d = max_diff(expected.value(), pre + name, *lin);
        ASSERT_GE(d, 0) << pre + name << " missing from numpy's weights or bias";
        worst = std::max(worst, d);
        quantised += lin->bits < 16;
        ++checked;
      }
    }
    const double d = max_diff(expected.value(), "lm_head", m.lm_head);
    ASSERT_GE(d, 0);
    worst = std::max(worst, d);
    EXPECT_EQ(m.lm_head.bits, 16);
    EXPECT_EQ(worst, 0.0) << "max abs diff between the engine's and numpy's dequantised weights";
    std::printf("%-36s %d linears (%d quantised) + lm_head, max abs diff %g\n", variant.c_str(), checked, quantised, worst);
    if (variant == "gptqmodel-v2-w8g64-dynamic-sharded") {
      EXPECT_EQ(m.layers[0].wq.bits, 8);
      EXPECT_EQ(m.layers[0].wq.group_size, 64);
      EXPECT_EQ(m.layers[1].w_up.bits, 16);   // "-:model\.layers\.1\.mlp\..*"
      EXPECT_EQ(m.layers[2].wk.bits, 4);      // "+:model\.layers\.2\.self_attn\..*": {bits 4, group_size 32}
      EXPECT_EQ(m.layers[2].wk.group_size, 32);
    }
    if (variant == "per-channel-w4") EXPECT_EQ(m.layers[0].w_down.group_size, 0);
    if (variant == "desc-act-static-groups-bias") EXPECT_FALSE(m.layers[3].wv.bias.empty());
    ++accepted;
  }
  EXPECT_EQ(accepted, 4);
  EXPECT_EQ(refused, 5);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace soartune::engine
