// MiniCPM-SALA configs: the release config.json keys read into ModelConfig, every unimplemented value refused
// by name, the synthetic presets' shapes, and a synthetic hybrid model that decodes as it prefills.
#include <filesystem>
#include <functional>
#include <fstream>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine/quantize.h"

namespace soartune::engine {
namespace {

namespace fs = std::filesystem;

// The release config.json's keys, at tiny-sala's sizes.
nlohmann::json release_config() {
  return nlohmann::json::parse(R"json({
    "architectures": ["MiniCPMSALAForCausalLM"], "model_type": "minicpm_sala", "attention_bias": false,
    "attn_use_output_gate": true, "attn_use_rope": false, "bos_token_id": 0, "dim_model_base": 16, "eos_token_id": 1,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 256, "intermediate_size": 768, "lightning_head_dim": 64,
    "lightning_nh": 4, "lightning_nkv": 4, "lightning_scale": "1/sqrt(d)", "lightning_use_rope": true,
    "max_position_embeddings": 16384,
    "mixer_types": ["minicpm4", "lightning-attn", "lightning-attn", "lightning-attn", "minicpm4", "lightning-attn",
                    "lightning-attn", "minicpm4"],
    "mup_denominator": 32, "num_attention_heads": 4, "num_hidden_layers": 8, "num_key_value_heads": 2,
    "qk_norm": true, "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 10000.0, "scale_depth": 1.4,
    "scale_emb": 12, "sparse_config": {"block_size": 64, "dense_len": 8192, "init_blocks": 1, "kernel_size": 32,
    "kernel_stride": 16, "topk": 64, "use_nope": false, "window_size": 2048},
    "tie_word_embeddings": false, "use_output_gate": true, "use_output_norm": true, "vocab_size": 4096})json");
}

Result<ModelConfig> read(const nlohmann::json& j) {
  const fs::path dir = fs::temp_directory_path() / ("soartune-sala-config-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << j.dump(2);
  auto c = read_hf_config(dir.string());
  fs::remove_all(dir);
  return c;
}

TEST(SalaConfig, ReleaseKeysReadAsTheOfficialCodeReadsThem) {
  auto r = read(release_config());
  ASSERT_TRUE(r.ok()) << r.status().message;
  const ModelConfig& c = r.value();
  ASSERT_EQ(c.mixers.size(), 8u);
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(c.mixer(i), (i == 0 || i == 4 || i == 7) ? MixerKind::kSoftmax : MixerKind::kLightning) << i;
  EXPECT_EQ(c.softmax_layers(), 3);
  EXPECT_EQ(c.heads, 4);
  EXPECT_EQ(c.kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_FALSE(c.attn_use_rope);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_EQ(c.lightning_heads, 4);
  EXPECT_EQ(c.lightning_kv_heads, 4);
  EXPECT_EQ(c.lightning_head_dim, 64);
  EXPECT_FLOAT_EQ(c.lightning_scale, 0.125f);
  EXPECT_TRUE(c.lightning_qk_norm && c.lightning_use_rope && c.lightning_output_norm && c.lightning_output_gate);
  EXPECT_FLOAT_EQ(c.embed_scale, 12.f);
  EXPECT_FLOAT_EQ(c.residual_scale, static_cast<float>(1.4 / std::sqrt(8.0)));
  EXPECT_FLOAT_EQ(c.logit_divisor, 16.f);
  EXPECT_TRUE(c.sparse.present);
  EXPECT_EQ(c.sparse.dense_len, 8192);
  EXPECT_EQ(c.sparse.topk, 64);
  EXPECT_EQ(c.sparse.window_size, 2048);
  EXPECT_EQ(c.layer_q_dim(1), 256);
  EXPECT_EQ(c.layer_kv_dim(1), 256);
  EXPECT_EQ(c.layer_kv_dim(0), 128);
  // tiny-sala's README: 9.2M parameters.
  EXPECT_NEAR(static_cast<double>(c.parameter_count()), 9.25e6, 0.01e6);
  // "lightning" and "lightning_attn" are the other spellings of the official code.
  auto j = release_config();
  j["mixer_types"][1] = "lightning";
  j["mixer_types"][2] = "lightning_attn";
  auto r2 = read(j);
  ASSERT_TRUE(r2.ok()) << r2.status().message;
  EXPECT_EQ(r2.value().mixer(2), MixerKind::kLightning);
}

TEST(SalaConfig, UnimplementedValuesAreRefusedByName) {
  struct Case {
    const char* what;
    std::function<void(nlohmann::json&)> edit;
    const char* message_prefix;
  };
  const std::vector<Case> cases = {
      {"mixer", [](nlohmann::json& j) { j["mixer_types"][3] = "mamba"; }, "config.json mixer_types[3]: 'mamba' is not one of minicpm4"},
      {"mixer count", [](nlohmann::json& j) { j["mixer_types"].erase(0); }, "config.json mixer_types: 7 entries"},
      {"scale", [](nlohmann::json& j) { j["lightning_scale"] = "1"; }, "config.json lightning_scale: '1' is not supported; allowed: 1/sqrt(d), 1/d"},
      {"use_nope", [](nlohmann::json& j) { j["sparse_config"]["use_nope"] = true; }, "config.json sparse_config.use_nope: true is not supported"},
      {"nh", [](nlohmann::json& j) { j["lightning_nh"] = 8; }, "config.json lightning_nh: 8 differs from num_attention_heads 4"},
      {"head_dim", [](nlohmann::json& j) { j["lightning_head_dim"] = 32; }, "config.json lightning_head_dim: 32 differs from head_dim 64"},
      {"nkv", [](nlohmann::json& j) { j["lightning_nkv"] = 3; }, "config.json lightning_nkv: 3 does not divide"},
      {"rope_scaling", [](nlohmann::json& j) { j["rope_scaling"] = {{"rope_type", "default"}}; }, "config.json rope_scaling: only null"},
      {"bias", [](nlohmann::json& j) { j["attention_bias"] = true; }, "config.json attention_bias: true is not supported"},
      {"scale_emb", [](nlohmann::json& j) { j.erase("scale_emb"); }, "config.json scale_emb: missing"},
      {"gate type", [](nlohmann::json& j) { j["use_output_gate"] = "yes"; }, "config.json use_output_gate: must be true or false"},
      {"sparse block", [](nlohmann::json& j) { j["sparse_config"]["kernel_stride"] = 24; }, "config.json sparse_config:"},
  };
  for (const Case& k : cases) {
    auto j = release_config();
    k.edit(j);
    auto r = read(j);
    ASSERT_FALSE(r.ok()) << k.what;
    EXPECT_EQ(r.status().code, Code::kInvalidArgument) << k.what;
    EXPECT_EQ(r.status().message.rfind(k.message_prefix, 0), 0u) << k.what << ": " << r.status().message;
  }
}

TEST(SalaConfig, ReleasePreset) {
  auto r = synthetic_config("minicpm-sala-9b");
  ASSERT_TRUE(r.ok());
  const ModelConfig& c = r.value();
  EXPECT_EQ(c.hidden, 4096);
  EXPECT_EQ(c.layers, 32);
  EXPECT_EQ(c.intermediate, 16384);
  EXPECT_EQ(c.vocab, 73448);
  std::vector<int> softmax;
  for (int i = 0; i < c.layers; ++i)
    if (c.mixer(i) == MixerKind::kSoftmax) softmax.push_back(i);
  EXPECT_EQ(softmax, (std::vector<int>{0, 9, 16, 17, 22, 29, 30, 31}));
  EXPECT_EQ(c.q_dim(), 4096);
  EXPECT_EQ(c.kv_dim(), 256);
  EXPECT_EQ(c.layer_kv_dim(1), 4096);
  EXPECT_EQ(c.lightning_state_elems(), 32 * 128 * 128);
  EXPECT_FLOAT_EQ(c.logit_divisor, 16.f);
  EXPECT_FLOAT_EQ(c.residual_scale, static_cast<float>(1.4 / std::sqrt(32.0)));
  // The release is the "9.5B" model: embeddings + lm_head 0.60B, MLPs 6.44B, 8 softmax mixers 0.42B, 24
  // lightning mixers 2.01B.
  EXPECT_NEAR(static_cast<double>(c.parameter_count()), 9.47e9, 0.01e9);
}

TEST(SalaConfig, SyntheticHybridDecodesAsItPrefills) {
  auto w = load_model("synthetic:tiny-sala", 5);
  ASSERT_TRUE(w.ok()) << w.status().message;
  EXPECT_EQ(w.value().layers[1].w_out_gate.out, 256);
  EXPECT_EQ(w.value().layers[1].o_norm.size(), 256u);
  EXPECT_EQ(w.value().layers[0].q_norm.size(), 0u);
  // Greedy through the engine (chunked prefill of 7 tokens at a time, decode) equals teacher forcing of the
  // same tokens (one prefill): the lightning states carry exactly what a full prefill computes.
  std::vector<int32_t> prompt;
  for (int i = 0; i < 40; ++i) prompt.push_back(3 + 97 * i % 4000);
  EngineOptions o;
  o.launch.kv_cache_dtype = KvCacheDtype::kFP32;
  o.launch.max_running_requests = 2;
  o.launch.max_prefill_tokens = 16;
  o.max_context = 80;
  auto e = Engine::create(make_cpu_backend(2), w.value(), o);
  ASSERT_TRUE(e.ok()) << e.status().message;
  ASSERT_TRUE(e.value()->add_request(prompt, 20).ok());
  ASSERT_TRUE(e.value()->run_until_idle().ok());
  const std::vector<int32_t> out = e.value()->take_finished().at(0).output;
  ASSERT_EQ(out.size(), 20u);
  o.launch.max_prefill_tokens = 128;
  auto tf = Engine::create(make_cpu_backend(2), w.value(), o);
  ASSERT_TRUE(tf.ok());
  ASSERT_TRUE(tf.value()->add_teacher_forced(prompt, out).ok());
  ASSERT_TRUE(tf.value()->run_until_idle().ok());
  EXPECT_EQ(tf.value()->take_finished().at(0).output, out);
  // Quantisation treats the output gates (o_gate, z_proj) as attention projections; the norms stay fp32.
  ModelWeights q = w.value();
  LaunchConfig launch;
  launch.weight_bits = 8;
  launch.attn_weight_bits = 4;
  launch.weight_group_size = 64;
  ASSERT_TRUE(quantize_model(q, launch).ok());
  for (int i : {0, 1}) {
    EXPECT_EQ(q.layers[static_cast<std::size_t>(i)].w_out_gate.bits, 4) << i;
    EXPECT_EQ(q.layers[static_cast<std::size_t>(i)].wq.bits, 4) << i;
    EXPECT_EQ(q.layers[static_cast<std::size_t>(i)].w_up.bits, 8) << i;
  }
  EXPECT_EQ(q.layers[1].q_norm, w.value().layers[1].q_norm);
  EXPECT_LT(q.storage_bytes(), w.value().storage_bytes());
}

}  // namespace
}  // namespace soartune::engine
