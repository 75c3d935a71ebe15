#include "search/encoding.h"

#include <set>

#include <gtest/gtest.h>

#include "search/space.h"

namespace soartune::search {
namespace {

Space race_space() {
  auto r = Space::parse(YAML::Load(R"(
weight_bits: {type: choice, values: [16, 8, 4]}
weight_group_size: {type: choice, values: [32, 64, 128], when: {weight_bits: [4]}}
kv_cache_dtype: {type: choice, values: [bf16, fp16, fp8_e4m3, fp8_e5m2]}
kv_page_size: {type: pow2, low: 8, high: 64}
max_running_requests: {type: int, low: 1, high: 64, log: true}
mem_fraction_pct: {type: int, low: 50, high: 90}
cuda_graphs: {type: bool}
)"));
  EXPECT_TRUE(r.ok()) << r.status().message;
  return r.value();
}

Config base() {
  return {{"weight_bits", int64_t{4}}, {"weight_group_size", int64_t{64}}, {"kv_cache_dtype", std::string("fp16")},
          {"kv_page_size", int64_t{16}}, {"max_running_requests", int64_t{8}}, {"mem_fraction_pct", int64_t{70}},
          {"cuda_graphs", true}};
}

TEST(Encoding, ColumnsPerType) {
  Encoding enc(race_space().params());
  // weight_bits ordinal, group ordinal, kv one-hot (4), page, requests, fraction, graphs.
  EXPECT_EQ(enc.dims(), 1 + 1 + 4 + 1 + 1 + 1 + 1);
  const Eigen::VectorXd x = enc.encode(base());
  EXPECT_DOUBLE_EQ(x[0], 0.0);          // 4 is the smallest of 16, 8, 4
  EXPECT_DOUBLE_EQ(x[1], 0.5);          // 64: middle of 32, 64, 128
  EXPECT_EQ(x.segment(2, 4), Eigen::Vector4d(0, 1, 0, 0));
  EXPECT_NEAR(x[6], 1.0 / 3.0, 1e-12);  // 16 in 8, 16, 32, 64 (log2 scale)
  EXPECT_NEAR(x[7], std::log(8.0) / std::log(64.0), 1e-12);
  EXPECT_NEAR(x[8], 20.0 / 40.0, 1e-12);
  EXPECT_DOUBLE_EQ(x[9], 1.0);
  for (int i = 0; i < x.size(); ++i) EXPECT_TRUE(x[i] >= 0 && x[i] <= 1);
}

TEST(Encoding, InactiveParameterHasFixedEncoding) {
  Encoding enc(race_space().params());
  Config a = base(), b = base();
  a["weight_bits"] = int64_t{16};
  b["weight_bits"] = int64_t{16};
  b["weight_group_size"] = int64_t{128};
  EXPECT_EQ(enc.encode(a), enc.encode(b));
  EXPECT_DOUBLE_EQ(enc.encode(a)[1], 0.5);
  const Config c = enc.canonical(b, base());
  EXPECT_EQ(c.count("weight_group_size"), 0u);
}

TEST(Encoding, CanonicalFillsFromDefaults) {
  Encoding enc(race_space().params());
  Config partial = {{"weight_bits", int64_t{4}}};
  const Config c = enc.canonical(partial, base());
  EXPECT_EQ(std::get<int64_t>(c.at("weight_group_size")), 64);
  EXPECT_EQ(std::get<std::string>(c.at("kv_cache_dtype")), "fp16");
  EXPECT_EQ(c.size(), 7u);
}

TEST(Encoding, FromUnitCoversDomainsAndStaysValid) {
  const Space space = race_space();
  Encoding enc(space.params());
  std::set<int64_t> pages, bits;
  for (int i = 0; i < 200; ++i) {
    std::vector<double> u(static_cast<size_t>(enc.num_params()), (i + 0.5) / 200.0);
    const Config c = enc.from_unit(u, base());
    EXPECT_TRUE(space.validate(c).ok()) << space.validate(c).message;
    pages.insert(std::get<int64_t>(c.at("kv_page_size")));
    bits.insert(std::get<int64_t>(c.at("weight_bits")));
  }
  EXPECT_EQ(pages, (std::set<int64_t>{8, 16, 32, 64}));
  EXPECT_EQ(bits.size(), 3u);
}

TEST(Encoding, NeighboursChangeOneKnob) {
  const Space space = race_space();
  Encoding enc(space.params());
  const Config c = enc.canonical(base(), base());
  const auto nb = enc.neighbours(c, base());
  EXPECT_GT(nb.size(), 10u);
  std::set<std::string> keys;
  for (const Config& n : nb) {
    EXPECT_TRUE(space.validate(n).ok()) << space.validate(n).message;
    EXPECT_TRUE(keys.insert(config_key(n)).second);
    EXPECT_NE(config_key(n), config_key(c));
    int changed = 0;
    for (const auto& [k, v] : c) changed += !n.count(k) || n.at(k) != v;
    for (const auto& [k, v] : n) changed += !c.count(k);
    // Changing weight_bits away from 4 also drops the group size: still one knob chosen.
    EXPECT_LE(changed, 2);
    EXPECT_GE(changed, 1);
  }
}

}  // namespace
}  // namespace soartune::search
