// config.json is untrusted input: a key of the wrong type or out of range is an error naming the key, never an
// exception or an unchecked conversion, and no accepted shape overflows the engine's arithmetic. The first case
// is an input the fuzzer found (tests/fuzz/model_config_fuzz.cc, docs/FUZZING.md).
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/model_loader.h"

namespace soartune::engine {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

struct ModelDir {
  fs::path path = fs::temp_directory_path() / ("soartune-cfg-" + std::to_string(::getpid()) + "-" + std::to_string(next()));
  explicit ModelDir(const std::string& config) {
    fs::create_directories(path);
    std::ofstream(path / "config.json") << config;
  }
  ~ModelDir() { fs::remove_all(path); }
  static int next() { static int n = 0; return n++; }
};

json llama() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"hidden_size", 64}, {"intermediate_size", 128},
          {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"head_dim", 16},
          {"vocab_size", 256}, {"max_position_embeddings", 512}, {"rms_norm_eps", 1e-5}, {"rope_theta", 10000.0},
          {"model_type", "llama"}, {"hidden_act", "silu"}};
}

json sala() {
  json j = llama();
  j["architectures"] = {"MiniCPMSALAForCausalLM"};
  j["model_type"] = "minicpm_sala";
  j["num_hidden_layers"] = 2;
  j["mixer_types"] = {"minicpm4", "lightning-attn"};
  j["attn_use_rope"] = false;
  j["scale_emb"] = 12;
  j["scale_depth"] = 1.4;
  j["dim_model_base"] = 16;
  j["sparse_config"] = {{"block_size", 64}, {"kernel_size", 32}, {"kernel_stride", 16}, {"window_size", 2048}};
  return j;
}

std::string error_of(const std::string& config) {
  ModelDir d(config);
  auto c = read_hf_config(d.path.string());
  return c.ok() ? "ok" : c.status().message;
}

TEST(MalformedHfConfig, TheSeedsRead) {
  EXPECT_EQ(error_of(llama().dump()), "ok");
  EXPECT_EQ(error_of(sala().dump()), "ok");
}

// Found by the fuzzer: 2^63 - 1 layers went into an int (undefined behaviour), then the layer loops.
TEST(MalformedHfConfig, AnIntegerBeyondItsRangeIsAnErrorNamingTheKey) {
  json j = llama();
  j["num_hidden_layers"] = 9223372036854775807LL;
  EXPECT_NE(error_of(j.dump()).find("config.json num_hidden_layers: missing or not an integer in 1..100000"), std::string::npos);
}

TEST(MalformedHfConfig, EveryKeyOfTheWrongTypeOrRangeIsNamed) {
  struct Case { const char* key; json value; const char* expect; bool sala; };
  const Case cases[] = {
      {"hidden_size", "64", "config.json hidden_size: missing or not an integer", false},
      {"hidden_size", 64.5, "config.json hidden_size: missing or not an integer", false},
      {"num_attention_heads", 100000, "config.json num_attention_heads: missing or not an integer in 1..4096", false},
      {"vocab_size", 18446744073709551615ULL, "config.json vocab_size: missing or not an integer", false},
      {"num_key_value_heads", "2", "config.json num_key_value_heads: must be an integer in 1..4096", false},
      {"head_dim", 1e300, "config.json head_dim: must be an integer", false},
      {"max_position_embeddings", 4294967296LL, "config.json max_position_embeddings: must be an integer in 1..2147483647", false},
      {"bos_token_id", -5, "config.json bos_token_id: must be an integer", false},
      {"eos_token_id", json::array({"a"}), "config.json eos_token_id: must be an integer", false},
      {"eos_token_id", 1e30, "config.json eos_token_id: must be an integer", false},
      {"rms_norm_eps", 1e300, "config.json rms_norm_eps: must be a number in [0, 1]", false},
      {"rope_theta", 1e300, "config.json rope_theta: must be a number in", false},
      {"rope_theta", "big", "config.json rope_theta: must be a number in", false},
      {"rope_parameters", json{{"rope_type", 7}}, "config.json rope_parameters.rope_type: must be a string", false},
      {"model_type", 5, "config.json model_type: must be a string", false},
      {"tie_word_embeddings", "yes", "config.json tie_word_embeddings: must be true or false", false},
      {"attention_bias", 1, "config.json attention_bias: must be true or false", false},
      {"hidden_act", 1, "config.json hidden_act: must be a string", false},
      {"scale_emb", 1e300, "config.json scale_emb: missing or not a positive number", true},
      {"lightning_scale", 3, "config.json lightning_scale: must be a string", true},
      {"lightning_nkv", 0, "config.json lightning_nkv: must be an integer in 1..4096", true},
      {"lightning_head_dim", 1e10, "config.json lightning_head_dim: must be an integer", true},
      {"sparse_config", json{{"topk", 1e20}}, "config.json sparse_config.topk: must be an integer in 0..2147483647", true},
      // The initial blocks and the query's own block must fit in topk (sparse_attention.h).
      {"sparse_config", json{{"block_size", 64}, {"kernel_size", 32}, {"kernel_stride", 16}, {"window_size", 2048},
                             {"topk", 2}, {"init_blocks", 2}},
       "config.json sparse_config.topk: 2 must exceed init_blocks 2", true},
  };
  for (const Case& c : cases) {
    json j = c.sala ? sala() : llama();
    j[c.key] = c.value;
    const std::string e = error_of(j.dump());
    EXPECT_NE(e.find(c.expect), std::string::npos) << c.key << " = " << c.value.dump() << " -> " << e;
  }
  EXPECT_NE(error_of("[1, 2]").find("is not a JSON object"), std::string::npos);
  EXPECT_NE(error_of("{").find("is not JSON"), std::string::npos);
}

// The largest shape accepted: its parameter count stays a positive number (capped, not overflowed), and loading
// it is refused for memory or for the missing checkpoint, never attempted.
TEST(MalformedHfConfig, TheLargestAcceptedShapeDoesNotOverflow) {
  json j = llama();
  j["hidden_size"] = 1 << 20;
  j["intermediate_size"] = 1 << 20;
  j["num_hidden_layers"] = 100000;
  j["num_attention_heads"] = 4096;
  j["num_key_value_heads"] = 4096;
  j["head_dim"] = 4096;
  j["vocab_size"] = 1 << 24;
  ModelDir d(j.dump());
  auto c = read_hf_config(d.path.string());
  ASSERT_TRUE(c.ok()) << c.status().message;
  EXPECT_EQ(c.value().parameter_count(), int64_t(1) << 53);
  EXPECT_FALSE(load_model("hf:" + d.path.string()).ok());
}

}  // namespace
}  // namespace soartune::engine
