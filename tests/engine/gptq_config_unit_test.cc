// The quantisation config of a GPTQ checkpoint is untrusted input: every key the loader reads is type-checked
// and a wrong one refused by name (fuzzing found `checkpoint_format: false` aborting the worker with an uncaught
// JSON type error). The checkpoint is the fuzz targets' seed (scripts/fuzz-seeds.py gptq_checkpoints): a
// one-layer Llama, attention at 4 bits, the MLP at 8 through a `dynamic` rule, group 32.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"

namespace soartune::engine {
namespace {

namespace fs = std::filesystem;

const std::string kSeeds = std::string(SOARTUNE_SOURCE_DIR) + "/tests/fuzz/corpus/";

class GptqConfig : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("soartune-gptq-config-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    fs::copy_file(kSeeds + "gptq_tensors/w4-mlp-w8.safetensors", dir_ / "model.safetensors");
    std::ifstream in(kSeeds + "gptq_config/w4-mlp-w8.json");
    config_ = nlohmann::json::parse(in);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes config.json (and quantize_config.json when given), then loads the directory as `model: hf:` does.
  Result<ModelWeights> load(const nlohmann::json& config, const std::string& quantize_config = "") {
    std::ofstream(dir_ / "config.json") << config.dump();
    if (!quantize_config.empty()) std::ofstream(dir_ / "quantize_config.json") << quantize_config;
    return load_model("hf:" + dir_.string());
  }
  // The load fails with a message that starts with `field`.
  void expect_refused(const nlohmann::json& config, const std::string& field, const std::string& quantize_config = "") {
    auto w = load(config, quantize_config);
    ASSERT_FALSE(w.ok()) << "loaded despite a bad " << field;
    EXPECT_EQ(w.status().code, Code::kInvalidArgument) << w.status().message;
    EXPECT_EQ(w.status().message.rfind(field, 0), 0u) << w.status().message;
  }

  fs::path dir_;
  nlohmann::json config_;
};

TEST_F(GptqConfig, TheSeedCheckpointLoadsQuantised) {
  auto w = load(config_);
  ASSERT_TRUE(w.ok()) << w.status().message;
  const LayerWeights& l = w.value().layers.at(0);
  EXPECT_EQ(l.wq.bits, 4);
  EXPECT_EQ(l.wq.group_size, 32);
  EXPECT_EQ(l.w_down.bits, 8);
  EXPECT_EQ(w.value().lm_head.bits, 16);
}

TEST_F(GptqConfig, KeysOfTheWrongTypeAreRefusedByName) {
  nlohmann::json c = config_;
  c["quantization_config"]["checkpoint_format"] = false;
  expect_refused(c, "config.json quantization_config.checkpoint_format: must be a string");
  c = config_;
  c["quantization_config"]["quant_method"] = 7;
  expect_refused(c, "config.json quantization_config.quant_method: must be a string");
  c = config_;
  c["quantization_config"]["sym"] = "yes";
  expect_refused(c, "config.json quantization_config.sym:");
  c = config_;
  c["quantization_config"]["bits"] = "4";
  expect_refused(c, "config.json quantization_config.bits:");
  c = config_;
  c["quantization_config"] = nlohmann::json::array({4, 32});
  expect_refused(c, "config.json quantization_config: must be a JSON object");
}

TEST_F(GptqConfig, AQuantizeConfigFileThatIsNotAnObjectIsRefused) {
  nlohmann::json c = config_;
  c.erase("quantization_config");
  expect_refused(c, "quantize_config.json: must be a JSON object", "[4, 32]");
  expect_refused(c, "model: ", "{\"bits\": 4,");   // not JSON at all
}

}  // namespace
}  // namespace soartune::engine
