// The quantised-weights cache (engine/quant_cache.h): what is saved under a key loads back into a freshly
// loaded model as the same weights; another key, or no file, loads nothing and leaves the model as it was.
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "engine/model_loader.h"
#include "engine/quant_cache.h"
#include "engine/quantize.h"

namespace soartune::engine {
namespace {

// synthetic:tiny quantised (4 bits, group 64; layer 1's MLP kept 16-bit, the lm_head at 8) and saved under a key.
class QuantCache : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("soartune-qcache-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir_);
    auto w = load_model("synthetic:tiny", 5);
    ASSERT_TRUE(w.ok()) << w.status().message;
    base_ = std::move(w).value();
    LaunchConfig l;
    l.weight_bits = 4;
    l.weight_group_size = 64;
    l.layer_overrides[1].mlp = 16;
    l.lm_head_bits = 8;
    q_ = base_;
    ASSERT_TRUE(quantize_model(q_, l).ok());
    file_ = quantized_cache_file(dir_.string(), key_);
    ASSERT_TRUE(save_quantized(q_, file_, key_).ok());
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::filesystem::path dir_;
  ModelWeights base_, q_;
  const std::string key_ = "model=synthetic:tiny;bits=4";
  std::string file_;
};

TEST_F(QuantCache, SavedWeightsLoadBackUnderTheirKeyOnly) {
  ModelWeights other = base_;
  auto miss = load_quantized(other, file_, key_ + ";damp=2");
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss.value());
  EXPECT_EQ(other.layers[0].wq.bits, 16);
  auto none = load_quantized(other, quantized_cache_file(dir_.string(), "nothing"), "nothing");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none.value());

  ModelWeights back = base_;
  auto hit = load_quantized(back, file_, key_);
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(hit.value());
  for (std::size_t i = 0; i < q_.layers.size(); ++i)
    for (auto [a, b] : {std::pair{&q_.layers[i].wq, &back.layers[i].wq}, {&q_.layers[i].w_up, &back.layers[i].w_up},
                        {&q_.layers[i].w_down, &back.layers[i].w_down}}) {
      EXPECT_EQ(a->bits, b->bits);
      EXPECT_EQ(a->group_size, b->group_size);
      EXPECT_TRUE(a->q == b->q);
      EXPECT_TRUE(a->scales == b->scales);
      EXPECT_TRUE(a->w16 == b->w16);
    }
  EXPECT_EQ(back.layers[1].w_up.bits, 16);
  EXPECT_EQ(back.lm_head.bits, 8);
  EXPECT_TRUE(back.lm_head.q == q_.lm_head.q);
}

// A damaged file (cut short, a group size that does not divide the width, codes beyond their width, a scale
// that is not finite) is a miss: the model keeps its 16-bit weights and the trial quantises again.
TEST_F(QuantCache, ADamagedFileIsAMissNotWeights) {
  std::string good;
  {
    std::ifstream in(file_, std::ios::binary);
    good.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  // The first linear (layer 0 q_proj, 4 bits): its header after the magic and the key, then codes and scales.
  const std::size_t head = 10 + 4 + key_.size(), codes = head + 16;
  const std::size_t scales = codes + static_cast<std::size_t>(q_.layers[0].wq.out) * q_.layers[0].wq.in;
  auto with = [&](std::size_t at, int32_t v) {
    std::string s = good;
    std::memcpy(s.data() + at, &v, 4);
    return s;
  };
  const float inf = std::numeric_limits<float>::infinity();
  int32_t inf_bits;
  std::memcpy(&inf_bits, &inf, 4);
  std::string bad_code = good;
  bad_code[codes] = static_cast<char>(-9);
  const std::vector<std::pair<std::string, std::string>> damaged = {
      {"cut short", good.substr(0, good.size() - 7)},
      {"group size 48 of width 256", with(head + 4, 48)},
      {"group size -1", with(head + 4, -1)},
      {"a 4-bit code of -9", bad_code},
      {"an infinite scale", with(scales, inf_bits)},
  };
  for (const auto& [what, bytes] : damaged) {
    std::ofstream(file_, std::ios::binary | std::ios::trunc) << bytes;
    ModelWeights m = base_;
    auto r = load_quantized(m, file_, key_);
    ASSERT_TRUE(r.ok()) << what;
    EXPECT_FALSE(r.value()) << what << " loaded as weights";
    EXPECT_EQ(m.layers[0].wq.bits, 16) << what;
  }
  std::ofstream(file_, std::ios::binary | std::ios::trunc) << good;   // and the intact file still loads
  ModelWeights m = base_;
  auto r = load_quantized(m, file_, key_);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value());
}

}  // namespace
}  // namespace soartune::engine
