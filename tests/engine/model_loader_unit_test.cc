// safetensors reading (sharded and single file), HF config spellings and tied embeddings, on small
// checkpoints written here; plus the quantiser's error bound.
#include <filesystem>
#include <fstream>
#include <random>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine/quantize.h"
#include "engine/safetensors.h"
#include "kernels/numeric_formats.h"

namespace soartune::engine {
namespace {

namespace fs = std::filesystem;

struct TmpDir {
  fs::path path;
  TmpDir() {
    path = fs::temp_directory_path() / ("soartune-loader-" + std::to_string(::getpid()) + "-" + std::to_string(counter()++));
    fs::create_directories(path);
  }
  ~TmpDir() { fs::remove_all(path); }
  static int& counter() { static int c = 0; return c; }
};

constexpr int kHidden = 32, kInter = 48, kLayers = 2, kHeads = 4, kKv = 2, kHeadDim = 8, kVocab = 64;

TensorToWrite tensor(const std::string& name, std::vector<int64_t> shape, TensorDtype dt, std::mt19937& rng, float scale) {
  TensorToWrite t{name, dt, shape, {}};
  int64_t n = 1;
  for (auto d : shape) n *= d;
  std::normal_distribution<float> nd(0.f, scale);
  for (int64_t i = 0; i < n; ++i) {
    const float v = name.find("norm") != std::string::npos ? 1.f + 0.1f * nd(rng) : nd(rng);
    if (dt == TensorDtype::kF32) {
      const auto* p = reinterpret_cast<const uint8_t*>(&v);
      t.bytes.insert(t.bytes.end(), p, p + 4);
    } else {
      const uint16_t h = dt == TensorDtype::kBF16 ? kernels::f32_to_bf16(v) : kernels::f32_to_fp16(v);
      t.bytes.push_back(static_cast<uint8_t>(h & 0xff));
      t.bytes.push_back(static_cast<uint8_t>(h >> 8));
    }
  }
  return t;
}

std::vector<TensorToWrite> llama_tensors(bool with_lm_head, TensorDtype dt) {
  std::mt19937 rng(11);
  std::vector<TensorToWrite> ts;
  ts.push_back(tensor("model.embed_tokens.weight", {kVocab, kHidden}, dt, rng, 1.f));
  for (int l = 0; l < kLayers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    ts.push_back(tensor(p + "input_layernorm.weight", {kHidden}, dt, rng, 1.f));
    ts.push_back(tensor(p + "post_attention_layernorm.weight", {kHidden}, dt, rng, 1.f));
    ts.push_back(tensor(p + "self_attn.q_proj.weight", {kHeads * kHeadDim, kHidden}, dt, rng, 0.2f));
    ts.push_back(tensor(p + "self_attn.k_proj.weight", {kKv * kHeadDim, kHidden}, dt, rng, 0.2f));
    ts.push_back(tensor(p + "self_attn.v_proj.weight", {kKv * kHeadDim, kHidden}, dt, rng, 0.2f));
    ts.push_back(tensor(p + "self_attn.o_proj.weight", {kHidden, kHeads * kHeadDim}, dt, rng, 0.2f));
    ts.push_back(tensor(p + "mlp.gate_proj.weight", {kInter, kHidden}, dt, rng, 0.2f));
    ts.push_back(tensor(p + "mlp.up_proj.weight", {kInter, kHidden}, dt, rng, 0.2f));
    ts.push_back(tensor(p + "mlp.down_proj.weight", {kHidden, kInter}, dt, rng, 0.2f));
  }
  ts.push_back(tensor("model.norm.weight", {kHidden}, dt, rng, 1.f));
  if (with_lm_head) ts.push_back(tensor("lm_head.weight", {kVocab, kHidden}, dt, rng, 0.2f));
  return ts;
}

void write_config(const fs::path& dir, bool rope_parameters, bool tied) {
  nlohmann::json c = {{"architectures", {"LlamaForCausalLM"}}, {"model_type", "llama"}, {"hidden_size", kHidden},
                      {"intermediate_size", kInter}, {"num_hidden_layers", kLayers}, {"num_attention_heads", kHeads},
                      {"num_key_value_heads", kKv}, {"head_dim", kHeadDim}, {"vocab_size", kVocab}, {"rms_norm_eps", 1e-6},
                      {"tie_word_embeddings", tied}, {"max_position_embeddings", 256}, {"hidden_act", "silu"}};
  if (rope_parameters) c["rope_parameters"] = {{"rope_theta", 5000.0}, {"rope_type", "default"}};
  else c["rope_theta"] = 5000.0;
  std::ofstream(dir / "config.json") << c.dump(2);
}

// Writes the tensors as one file or as `shards` files with an index.
void write_checkpoint(const fs::path& dir, const std::vector<TensorToWrite>& ts, int shards) {
  if (shards == 1) {
    ASSERT_TRUE(write_safetensors((dir / "model.safetensors").string(), ts).ok());
    return;
  }
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (int s = 0; s < shards; ++s) {
    std::vector<TensorToWrite> part;
    const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(shards) + ".safetensors";
    for (std::size_t i = static_cast<std::size_t>(s); i < ts.size(); i += static_cast<std::size_t>(shards)) {
      part.push_back(ts[i]);
      index["weight_map"][ts[i].name] = file;
    }
    ASSERT_TRUE(write_safetensors((dir / file).string(), part).ok());
  }
  std::ofstream(dir / "model.safetensors.index.json") << index.dump(2);
}

std::vector<int32_t> greedy(const ModelWeights& w, const std::vector<int32_t>& prompt, int n) {
  EngineOptions o;
  o.launch.kv_cache_dtype = KvCacheDtype::kFP32;
  o.launch.max_running_requests = 2;
  o.max_context = 64;
  auto e = Engine::create(make_cpu_backend(1), w, o);
  EXPECT_TRUE(e.ok()) << e.status().message;
  EXPECT_TRUE(e.value()->add_request(prompt, n).ok());
  EXPECT_TRUE(e.value()->run_until_idle().ok());
  auto f = e.value()->take_finished();
  return f.empty() ? std::vector<int32_t>{} : f[0].output;
}

TEST(Safetensors, ShardedAndSingleFileLoadTheSameModel) {
  TmpDir single, sharded;
  const auto ts = llama_tensors(true, TensorDtype::kBF16);
  write_config(single.path, false, false);
  write_config(sharded.path, false, false);
  write_checkpoint(single.path, ts, 1);
  write_checkpoint(sharded.path, ts, 3);
  auto a = load_model("hf:" + single.path.string());
  auto b = load_model("hf:" + sharded.path.string());
  ASSERT_TRUE(a.ok()) << a.status().message;
  ASSERT_TRUE(b.ok()) << b.status().message;
  EXPECT_EQ(a.value().layers[1].w_down.w16, b.value().layers[1].w_down.w16);
  EXPECT_EQ(a.value().lm_head.w16, b.value().lm_head.w16);
  // The stored bits survive: embed row 0 equals the bytes written.
  const auto& e = a.value().embed.w16;
  EXPECT_EQ(e[1], static_cast<uint16_t>(ts[0].bytes[2] | (ts[0].bytes[3] << 8)));
  EXPECT_FLOAT_EQ(a.value().config.rope_theta, 5000.f);
  EXPECT_FLOAT_EQ(a.value().config.rms_eps, 1e-6f);
  const std::vector<int32_t> prompt = {3, 9, 27, 17, 51};
  EXPECT_EQ(greedy(a.value(), prompt, 8), greedy(b.value(), prompt, 8));
}

TEST(Safetensors, Fp32AndFp16Checkpoints) {
  for (TensorDtype dt : {TensorDtype::kF32, TensorDtype::kF16}) {
    TmpDir d;
    write_config(d.path, true, false);
    write_checkpoint(d.path, llama_tensors(true, dt), 2);
    auto m = load_model("hf:" + d.path.string());
    ASSERT_TRUE(m.ok()) << m.status().message;
    EXPECT_EQ(m.value().layers[0].wq.dtype16, dt == TensorDtype::kF16 ? Dtype16::kFP16 : Dtype16::kBF16);
    EXPECT_EQ(greedy(m.value(), {1, 2, 3}, 4).size(), 4u);
  }
}

TEST(ModelLoader, RopeParametersSpellingEqualsRopeTheta) {
  TmpDir a, b;
  const auto ts = llama_tensors(true, TensorDtype::kBF16);
  write_config(a.path, false, false);
  write_config(b.path, true, false);
  write_checkpoint(a.path, ts, 1);
  write_checkpoint(b.path, ts, 1);
  auto ca = read_hf_config(a.path.string());
  auto cb = read_hf_config(b.path.string());
  ASSERT_TRUE(ca.ok() && cb.ok());
  EXPECT_FLOAT_EQ(ca.value().rope_theta, 5000.f);
  EXPECT_FLOAT_EQ(cb.value().rope_theta, 5000.f);
  auto ma = load_model("hf:" + a.path.string());
  auto mb = load_model("hf:" + b.path.string());
  EXPECT_EQ(greedy(ma.value(), {5, 6, 7, 8}, 10), greedy(mb.value(), {5, 6, 7, 8}, 10));
}

TEST(ModelLoader, TiedEmbeddings) {
  TmpDir d;
  write_config(d.path, true, true);
  write_checkpoint(d.path, llama_tensors(false, TensorDtype::kBF16), 1);
  auto m = load_model("hf:" + d.path.string());
  ASSERT_TRUE(m.ok()) << m.status().message;
  EXPECT_TRUE(m.value().config.tie_embeddings);
  EXPECT_EQ(m.value().lm_head.w16, m.value().embed.w16);
  EXPECT_EQ(greedy(m.value(), {1, 2}, 3).size(), 3u);
}

TEST(ModelLoader, ErrorsNameWhatIsWrong) {
  TmpDir d;
  write_config(d.path, true, false);
  auto ts = llama_tensors(true, TensorDtype::kBF16);
  ts.erase(ts.begin() + 3);  // drop layer 0 q_proj
  write_checkpoint(d.path, ts, 1);
  auto m = load_model("hf:" + d.path.string());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message.find("model.layers.0.self_attn.q_proj.weight"), std::string::npos) << m.status().message;
  auto bad = load_model("gguf:/x");
  EXPECT_EQ(bad.status().message.rfind("model:", 0), 0u);
  auto preset = load_model("synthetic:huge");
  EXPECT_NE(preset.status().message.find("tiny"), std::string::npos);
  EXPECT_FALSE(load_model("hf:/nonexistent/dir").ok());
}

TEST(ModelLoader, SyntheticIsDeterministicPerSeed) {
  auto a = load_model("synthetic:tiny", 3), b = load_model("synthetic:tiny", 3), c = load_model("synthetic:tiny", 4);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(a.value().layers[2].w_up.w16, b.value().layers[2].w_up.w16);
  EXPECT_NE(a.value().layers[2].w_up.w16, c.value().layers[2].w_up.w16);
  EXPECT_EQ(a.value().config.hidden, 256);
  auto l8 = synthetic_config("llama3-8b");
  ASSERT_TRUE(l8.ok());
  EXPECT_EQ(l8.value().intermediate, 14336);
  EXPECT_EQ(l8.value().vocab, 128256);
  EXPECT_FLOAT_EQ(l8.value().rope_theta, 500000.f);
  EXPECT_NEAR(static_cast<double>(l8.value().parameter_count()), 8.03e9, 0.01e9);
}

TEST(Quantize, CodesAndErrorBound) {
  auto m = load_model("synthetic:tiny", 1);
  ASSERT_TRUE(m.ok());
  for (int bits : {8, 4}) {
    for (int group : {0, 32, 128}) {
      QuantizedLinear l = m.value().layers[0].w_gate;
      std::vector<float> orig(static_cast<std::size_t>(l.out) * l.in), deq(orig.size());
      dequantize_rows(l, 0, l.out, orig.data());
      ASSERT_TRUE(quantize_linear(l, bits, group).ok());
      EXPECT_TRUE(l.w16.empty());
      const int qmax = (1 << (bits - 1)) - 1;
      for (int8_t q : l.q) ASSERT_LE(std::abs(static_cast<int>(q)), qmax);
      dequantize_rows(l, 0, l.out, deq.data());
      const int gs = group == 0 ? l.in : group;
      for (std::size_t i = 0; i < orig.size(); ++i) {
        const std::size_t row = i / l.in, g = (i % l.in) / gs;
        const float scale = l.scales[row * l.groups_per_row() + g];
        ASSERT_LE(std::fabs(orig[i] - deq[i]), 0.5f * scale * 1.0001f);
      }
    }
  }
  QuantizedLinear l = m.value().layers[0].w_gate;
  const Status s = quantize_linear(l, 4, 96);
  EXPECT_EQ(s.message.rfind("launch.weight_group_size:", 0), 0u);
}

}  // namespace
}  // namespace soartune::engine
