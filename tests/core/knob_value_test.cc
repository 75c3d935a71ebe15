#include "core/knob_value.h"

#include <gtest/gtest.h>

namespace soartune {
namespace {

TEST(ConfigTest, ValueTextRoundTrips) {
  for (const Value& v : {Value{true}, Value{false}, Value{int64_t{0}}, Value{int64_t{-7}}, Value{int64_t{131072}},
                         Value{std::string("fp8_e4m3")}, Value{std::string("auto")}}) {
    EXPECT_EQ(value_from_text(to_text(v)), v) << to_text(v);
  }
}

TEST(ConfigTest, TextReadsLikeYamlScalars) {
  EXPECT_EQ(value_from_text("16"), Value{int64_t{16}});
  EXPECT_EQ(value_from_text("true"), Value{true});
  EXPECT_EQ(value_from_text("False"), Value{false});
  EXPECT_EQ(value_from_text("bf16"), Value{std::string("bf16")});
  // Not a whole integer: stays text.
  EXPECT_EQ(value_from_text("16x"), Value{std::string("16x")});
  EXPECT_EQ(value_from_text("1.5"), Value{std::string("1.5")});
  EXPECT_EQ(value_from_text(""), Value{std::string("")});
}

TEST(ConfigTest, ConfigTextRoundTrips) {
  const Config c = {{"weight_bits", int64_t{4}}, {"kv_cache_dtype", std::string("fp8_e5m2")}, {"cuda_graphs", false}};
  const auto text = to_text(c);
  EXPECT_EQ(text.at("weight_bits"), "4");
  EXPECT_EQ(text.at("cuda_graphs"), "false");
  EXPECT_EQ(config_from_text(text), c);
}

TEST(ConfigTest, KeyIsStableAndDistinguishesConfigs) {
  const Config a = {{"weight_bits", int64_t{4}}, {"kv_page_size", int64_t{16}}};
  Config b;
  b["kv_page_size"] = int64_t{16};
  b["weight_bits"] = int64_t{4};
  EXPECT_EQ(config_key(a), config_key(b));
  b["weight_bits"] = int64_t{8};
  EXPECT_NE(config_key(a), config_key(b));
  EXPECT_NE(config_key(a), config_key(Config{{"weight_bits", int64_t{4}}}));
}

}  // namespace
}  // namespace soartune
