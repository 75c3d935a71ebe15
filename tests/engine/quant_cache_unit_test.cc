// The quantised-weights cache (engine/quant_cache.h): what is saved under a key loads back into a freshly
// loaded model as the same weights; another key, or no file, loads nothing and leaves the model as it was.
#include <unistd.h>

#include <filesystem>

#include <gtest/gtest.h>

#include "engine/model_loader.h"
#include "engine/quant_cache.h"
#include "engine/quantize.h"

namespace soartune::engine {
namespace {

TEST(QuantCache, SavedWeightsLoadBackUnderTheirKeyOnly) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("soartune-qcache-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  auto w = load_model("synthetic:tiny", 5);
  ASSERT_TRUE(w.ok()) << w.status().message;
  LaunchConfig l;
  l.weight_bits = 4;
  l.weight_group_size = 64;
  l.layer_overrides[1].mlp = 16;
  l.lm_head_bits = 8;
  ModelWeights q = w.value();
  ASSERT_TRUE(quantize_model(q, l).ok());
  const std::string key = "model=synthetic:tiny;bits=4", file = quantized_cache_file(dir.string(), key);
  ASSERT_TRUE(save_quantized(q, file, key).ok());

  ModelWeights other = w.value();
  auto miss = load_quantized(other, file, key + ";damp=2");
  ASSERT_TRUE(miss.ok());
  EXPECT_FALSE(miss.value());
  EXPECT_EQ(other.layers[0].wq.bits, 16);
  auto none = load_quantized(other, quantized_cache_file(dir.string(), "nothing"), "nothing");
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none.value());

  ModelWeights back = w.value();
  auto hit = load_quantized(back, file, key);
  ASSERT_TRUE(hit.ok());
  ASSERT_TRUE(hit.value());
  for (std::size_t i = 0; i < q.layers.size(); ++i)
    for (auto [a, b] : {std::pair{&q.layers[i].wq, &back.layers[i].wq}, {&q.layers[i].w_up, &back.layers[i].w_up},
                        {&q.layers[i].w_down, &back.layers[i].w_down}}) {
      EXPECT_EQ(a->bits, b->bits);
      EXPECT_EQ(a->group_size, b->group_size);
      EXPECT_TRUE(a->q == b->q);
      EXPECT_TRUE(a->scales == b->scales);
      EXPECT_TRUE(a->w16 == b->w16);
    }
  EXPECT_EQ(back.layers[1].w_up.bits, 16);
  EXPECT_EQ(back.lm_head.bits, 8);
  EXPECT_TRUE(back.lm_head.q == q.lm_head.q);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace soartune::engine
