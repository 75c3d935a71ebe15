#include "search/space.h"

#include <map>
#include <set>

#include <gtest/gtest.h>

#include "core/knob_catalogue.h"

namespace soartune::search {
namespace {

Result<Space> parse(const std::string& yaml) { return Space::parse(YAML::Load(yaml)); }

std::string error_of(const std::string& yaml) {
  Result<Space> r = parse(yaml);
  if (r.ok()) return "(parsed)";
  EXPECT_EQ(r.status().code, Code::kInvalidArgument);
  return r.status().message;
}

const char* kFormatsSpace = R"(
weight_bits: {type: choice, values: [16, 8, 4]}
weight_group_size: {type: choice, values: [32, 64, 128], when: {weight_bits: [4]}}
kv_cache_dtype: {type: choice, values: [bf16, fp16, fp8_e4m3, fp8_e5m2]}
kv_page_size: {type: pow2, low: 8, high: 64}
max_running_requests: {type: int, low: 1, high: 64, log: true}
max_prefill_tokens: {type: pow2, low: 64, high: 4096}
cuda_graphs: {type: bool}
)";

TEST(SpaceTest, ParsesTheFormatsExample) {
  Result<Space> r = parse(kFormatsSpace);
  ASSERT_TRUE(r.ok()) << r.status().message;
  const Space& s = r.value();
  ASSERT_EQ(s.params().size(), 7u);
  EXPECT_EQ(s.params()[0].name, "weight_bits");   // document order
  EXPECT_EQ(s.find("weight_bits")->domain(), (std::vector<Value>{int64_t{16}, int64_t{8}, int64_t{4}}));
  EXPECT_EQ(s.find("kv_page_size")->type, ParamType::kPow2);
  EXPECT_EQ(s.find("kv_page_size")->domain(),
            (std::vector<Value>{int64_t{8}, int64_t{16}, int64_t{32}, int64_t{64}}));
  EXPECT_EQ(s.find("max_running_requests")->type, ParamType::kLogInt);
  EXPECT_EQ(s.find("max_running_requests")->domain().size(), 64u);
  EXPECT_EQ(s.find("max_prefill_tokens")->domain().size(), 7u);
  EXPECT_EQ(s.find("cuda_graphs")->domain(), (std::vector<Value>{false, true}));
  EXPECT_EQ(s.find("kv_cache_dtype")->domain()[2], Value{std::string("fp8_e4m3")});
  const auto& when = s.find("weight_group_size")->when;
  ASSERT_EQ(when.size(), 1u);
  EXPECT_EQ(when.at("weight_bits"), (std::vector<Value>{int64_t{4}}));
  EXPECT_EQ(s.find("nope"), nullptr);
}

TEST(SpaceTest, EmptyOrAbsentSpaceHasOneConfig) {
  Result<Space> r = Space::parse(YAML::Node());
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r.value().params().empty());
  EXPECT_EQ(r.value().cardinality(), 1.0);
  EXPECT_EQ(r.value().enumerate(10).size(), 1u);
  ASSERT_TRUE(parse("{}").ok());
}

TEST(SpaceTest, ErrorsNameTheField) {
  EXPECT_EQ(error_of("weight_bits: {type: choice, values: [16, 8, 5]}"),
            "space.weight_bits.values[2]: 5 is not one of 16, 8, 4");
  EXPECT_EQ(error_of("kv_page_size: {type: pow2, low: 12, high: 64}"), "space.kv_page_size.low: must be a power of two");
  EXPECT_EQ(error_of("kv_page_size: {type: pow2, low: 8, high: 48}"), "space.kv_page_size.high: must be a power of two");
  const std::string unknown = error_of("foo: {type: bool}");
  EXPECT_EQ(unknown.rfind("space.foo: unknown knob; known knobs: weight_bits, weight_group_size,", 0), 0u) << unknown;
  EXPECT_NE(unknown.find("cuda_graph_max_bs"), std::string::npos);
  EXPECT_EQ(error_of("weight_bits: {type: choice, values: [16, 4]}\n"
                     "weight_group_size: {type: choice, values: [32, 64], when: {weight_bits: [3]}}"),
            "space.weight_group_size.when.weight_bits: 3 is not a value weight_bits can take; allowed: 16, 4");
  // 8 is allowed by the catalogue but not by this space's weight_bits.
  EXPECT_EQ(error_of("weight_bits: {type: choice, values: [16, 4]}\n"
                     "weight_group_size: {type: choice, values: [32], when: {weight_bits: 8}}"),
            "space.weight_group_size.when.weight_bits: 8 is not a value weight_bits can take; allowed: 16, 4");
}

TEST(SpaceTest, EveryValidationError) {
  const std::map<std::string, std::string> cases = {
      {"[1, 2]", "space: must be a mapping of knob name -> parameter"},
      {"weight_bits: 16", "space.weight_bits: must be a mapping with a type (choice, int, pow2, bool)"},
      {"weight_bits: {values: [16]}", "space.weight_bits.type: missing; allowed: choice, int, pow2, bool"},
      {"weight_bits: {type: float}", "space.weight_bits.type: float is not one of choice, int, pow2, bool"},
      {"weight_bits: {type: choice}", "space.weight_bits.values: missing; a list of values from 16, 8, 4"},
      {"weight_bits: {type: choice, values: []}", "space.weight_bits.values: empty; give at least one of 16, 8, 4"},
      {"weight_bits: {type: choice, values: [16, 16]}", "space.weight_bits.values[1]: 16 is repeated"},
      {"weight_bits: {type: choice, values: [[16]]}", "space.weight_bits.values[0]: must be a scalar; allowed: 16, 8, 4"},
      {"weight_bits: {type: choice, values: [x]}", "space.weight_bits.values[0]: x is not one of 16, 8, 4"},
      {"weight_bits: {type: choice, values: [16], low: 1}", "space.weight_bits.low: unknown key; allowed: type, values, when"},
      {"kv_cache_dtype: {type: choice, values: [fp9]}",
       "space.kv_cache_dtype.values[0]: fp9 is not one of bf16, fp16, fp8_e4m3, fp8_e5m2"},
      {"cuda_graphs: {type: choice, values: [yes]}", "space.cuda_graphs.values[0]: yes is not one of true, false"},
      {"weight_bits: {type: bool}",
       "space.weight_bits.type: bool does not fit weight_bits; allowed values: 16, 8, 4 (use type: choice)"},
      {"kv_cache_dtype: {type: int, low: 1, high: 2}",
       "space.kv_cache_dtype.type: int does not fit kv_cache_dtype; allowed values: bf16, fp16, fp8_e4m3, fp8_e5m2 "
       "(use type: choice)"},
      {"cuda_graphs: {type: pow2, low: 1, high: 2}",
       "space.cuda_graphs.type: pow2 does not fit cuda_graphs; allowed values: true, false (use type: bool)"},
      {"max_running_requests: {type: int, high: 8}", "space.max_running_requests.low: missing"},
      {"max_running_requests: {type: int, low: 1}", "space.max_running_requests.high: missing"},
      {"max_running_requests: {type: int, low: one, high: 8}", "space.max_running_requests.low: one is not an integer"},
      {"max_running_requests: {type: int, low: 9, high: 8}", "space.max_running_requests.low: 9 is above high (8)"},
      {"max_running_requests: {type: int, low: 0, high: 8}", "space.max_running_requests.low: 0 is not in 1..1024"},
      {"max_running_requests: {type: int, low: 1, high: 2048}",
       "space.max_running_requests.high: 2048 is not in 1..1024"},
      {"max_running_requests: {type: int, low: 1, high: 8, log: maybe}",
       "space.max_running_requests.log: must be true or false"},
      {"prefill_max_requests: {type: int, low: 0, high: 8, log: true}",
       "space.prefill_max_requests.low: must be at least 1 with log: true"},
      {"max_running_requests: {type: int, low: 1, high: 8, step: 2}",
       "space.max_running_requests.step: unknown key; allowed: high, log, low, type, when"},
      {"kv_page_size: {type: pow2, low: 8, high: 64, log: true}",
       "space.kv_page_size.log: unknown key; allowed: high, low, type, when"},
      {"max_prefill_tokens: {type: int, low: 16, high: 131072}",
       "space.max_prefill_tokens: 16..131072 has 131057 values; at most 4096 are allowed (use type: pow2 or a "
       "narrower range)"},
      {"kv_page_size: {type: pow2, low: 4, high: 64}", "space.kv_page_size.low: 4 is not one of 8, 16, 32, 64, 128"},
      {"decode_kv_splits: {type: int, low: 0, high: 4}",
       "space.decode_kv_splits: int 0..4 includes 3, which is not one of 0, 1, 2, 4, 8, 16, 32, 64, 128 (use type: choice or "
       "pow2)"},
      {"weight_group_size: {type: pow2, low: 32, high: 256}", "(parsed)"},
      {"weight_bits: {type: pow2, low: 4, high: 16}", "(parsed)"},
      {"weight_bits: {type: int, low: 4, high: 8}",
       "space.weight_bits: int 4..8 includes 5, which is not one of 16, 8, 4 (use type: choice or pow2)"},
      {"cuda_graphs: {type: bool, when: {weight_bits: [4]}}",
       "space.cuda_graphs.when.weight_bits: not a parameter of space; earlier parameters: (none)"},
      {"cuda_graphs: {type: bool, when: {cuda_graphs: [true]}}",
       "space.cuda_graphs.when.cuda_graphs: a parameter cannot depend on itself"},
      {"weight_group_size: {type: choice, values: [32], when: {weight_bits: [4]}}\n"
       "weight_bits: {type: choice, values: [16, 4]}",
       "space.weight_group_size.when.weight_bits: must name a parameter defined before weight_group_size"},
      {"weight_bits: {type: choice, values: [16, 4]}\nweight_group_size: {type: choice, values: [32], when: [4]}",
       "space.weight_group_size.when: must be a mapping of earlier parameter -> allowed values"},
      {"weight_bits: {type: choice, values: [16, 4]}\n"
       "weight_group_size: {type: choice, values: [32], when: {weight_bits: []}}",
       "space.weight_group_size.when.weight_bits: must list the values of weight_bits that enable weight_group_size"},
      {"cuda_graphs: {type: bool}\ncuda_graph_max_bs: {type: pow2, low: 1, high: 512, when: {cuda_graphs: [on]}}",
       "space.cuda_graph_max_bs.when.cuda_graphs: on is not a value cuda_graphs can take; allowed: false, true"},
      {"cuda_graphs: {type: bool}\ncuda_graphs: {type: bool}", "(duplicate)"},
  };
  for (const auto& [yaml, expected] : cases) {
    if (expected == "(duplicate)") {
      // yaml-cpp may reject or merge a duplicate key; either way the space must not hold the knob twice.
      Result<Space> r = parse(yaml);
      if (r.ok()) EXPECT_EQ(r.value().params().size(), 1u);
      continue;
    }
    EXPECT_EQ(error_of(yaml), expected) << yaml;
  }
}

TEST(SpaceTest, ActiveAndCanonical) {
  Space s = parse(kFormatsSpace).value();
  const ParamSpec& group = *s.find("weight_group_size");
  EXPECT_FALSE(s.active(group, {{"weight_bits", int64_t{16}}}));
  EXPECT_TRUE(s.active(group, {{"weight_bits", int64_t{4}}}));
  EXPECT_FALSE(s.active(group, {}));

  const Config defaults = core::default_config();
  // Inactive group size and knobs outside the space are dropped; missing active ones come from the defaults.
  Config c = s.canonical({{"weight_bits", int64_t{16}}, {"weight_group_size", int64_t{32}},
                          {"mem_fraction_pct", int64_t{90}}},
                         defaults);
  EXPECT_EQ(c.count("weight_group_size"), 0u);
  EXPECT_EQ(c.count("mem_fraction_pct"), 0u);
  EXPECT_EQ(c.at("kv_cache_dtype"), Value{std::string("bf16")});
  EXPECT_EQ(c.at("max_running_requests"), Value{int64_t{64}});
  EXPECT_EQ(c.size(), 6u);
  c = s.canonical({{"weight_bits", int64_t{4}}}, defaults);
  EXPECT_EQ(c.at("weight_group_size"), Value{int64_t{128}});
  EXPECT_EQ(c.size(), 7u);
  // Missing from the defaults too: the catalogue default.
  c = s.canonical({{"weight_bits", int64_t{4}}}, {});
  EXPECT_EQ(c.at("weight_group_size"), Value{int64_t{128}});
  EXPECT_EQ(c.at("cuda_graphs"), Value{true});
}

TEST(SpaceTest, NestedConditionsNeedTheParentActive) {
  Space s = parse("weight_bits: {type: choice, values: [16, 4]}\n"
                  "weight_group_size: {type: choice, values: [0, 32, 128], when: {weight_bits: [4]}}\n"
                  "attn_weight_bits: {type: choice, values: [0, 8], when: {weight_group_size: [128]}}")
                .value();
  const ParamSpec& attn = *s.find("attn_weight_bits");
  EXPECT_TRUE(s.active(attn, {{"weight_bits", int64_t{4}}, {"weight_group_size", int64_t{128}}}));
  EXPECT_FALSE(s.active(attn, {{"weight_bits", int64_t{16}}, {"weight_group_size", int64_t{128}}}));
  // 16-bit: 1; 4-bit: group 0, 32, 128 x attn (2 when 128) = 4.
  EXPECT_EQ(s.cardinality(), 5.0);
  EXPECT_EQ(s.enumerate(100).size(), 5u);
  EXPECT_EQ(s.enumerate(3).size(), 3u);
}

TEST(SpaceTest, Validate) {
  Space s = parse(kFormatsSpace).value();
  Config c = s.canonical({{"weight_bits", int64_t{4}}, {"weight_group_size", int64_t{64}}}, core::default_config());
  c["max_prefill_tokens"] = int64_t{512};
  c["kv_page_size"] = int64_t{32};
  EXPECT_TRUE(s.validate(c).ok()) << s.validate(c).message;
  Config bad = c;
  bad["weight_group_size"] = int64_t{256};
  EXPECT_EQ(s.validate(bad).message, "config.weight_group_size: 256 is not one of 32, 64, 128");
  bad = c;
  bad.erase("weight_group_size");
  EXPECT_EQ(s.validate(bad, "trial").message, "trial.weight_group_size: missing; allowed: 32, 64, 128");
  bad = c;
  bad["max_running_requests"] = int64_t{65};
  EXPECT_EQ(s.validate(bad).message, "config.max_running_requests: 65 is not in 1..64");
  bad = c;
  bad["kv_cache_dtype"] = int64_t{16};
  EXPECT_EQ(s.validate(bad).message, "config.kv_cache_dtype: 16 is not one of bf16, fp16, fp8_e4m3, fp8_e5m2");
  // An inactive parameter is not checked.
  bad = c;
  bad["weight_bits"] = int64_t{16};
  bad["weight_group_size"] = int64_t{999};
  EXPECT_TRUE(s.validate(bad).ok());
}

TEST(SpaceTest, SamplesAreValidCanonicalAndCoverTheDomains) {
  Space s = parse(kFormatsSpace).value();
  std::mt19937_64 rng(7);
  std::map<std::string, std::set<std::string>> seen;
  int low_octave = 0, n = 2000;
  for (int i = 0; i < n; ++i) {
    Config c = s.sample(rng);
    ASSERT_TRUE(s.validate(c).ok()) << s.validate(c).message;
    EXPECT_EQ(s.canonical(c, {}), c);
    EXPECT_EQ(c.count("weight_group_size"), std::get<int64_t>(c.at("weight_bits")) == 4 ? 1u : 0u);
    for (const auto& [k, v] : c) seen[k].insert(to_text(v));
    if (std::get<int64_t>(c.at("max_running_requests")) < 8) ++low_octave;
  }
  EXPECT_EQ(seen["weight_bits"].size(), 3u);
  EXPECT_EQ(seen["weight_group_size"].size(), 3u);
  EXPECT_EQ(seen["kv_cache_dtype"].size(), 4u);
  EXPECT_EQ(seen["kv_page_size"].size(), 4u);
  EXPECT_EQ(seen["max_prefill_tokens"].size(), 7u);
  EXPECT_EQ(seen["cuda_graphs"].size(), 2u);
  EXPECT_GT(seen["max_running_requests"].size(), 40u);
  EXPECT_TRUE(seen["max_running_requests"].count("1"));
  EXPECT_TRUE(seen["max_running_requests"].count("64"));
  // Log scale: [1, 8) is half of the log range [1, 65), far more than the 7/64 a uniform int would give.
  EXPECT_GT(low_octave, n * 2 / 5);
  EXPECT_LT(low_octave, n * 3 / 5);
}

TEST(SpaceTest, SameSeedSameSamples) {
  Space s = parse(kFormatsSpace).value();
  std::mt19937_64 a(42), b(42);
  for (int i = 0; i < 50; ++i) EXPECT_EQ(s.sample(a), s.sample(b));
}

TEST(SpaceTest, CardinalityAndEnumeration) {
  Space s = parse(kFormatsSpace).value();
  // Exactly: weight_bits x group = 16, 8, 4x{32,64,128} = 5 combinations, then 4 * 4 * 64 * 7 * 2. That is too
  // many to count, so cardinality() is the upper bound that counts a group size for every weight_bits.
  const double exact = 5.0 * 4 * 4 * 64 * 7 * 2, bound = 9.0 * 4 * 4 * 64 * 7 * 2;
  ASSERT_GT(bound, kExactCountLimit);
  EXPECT_EQ(s.cardinality(), bound);
  EXPECT_GE(s.cardinality(), exact);
  EXPECT_EQ(s.enumerate(1000).size(), 1000u);
  Space small = parse("weight_bits: {type: choice, values: [16, 8, 4]}\n"
                      "weight_group_size: {type: choice, values: [32, 128], when: {weight_bits: [8, 4]}}\n"
                      "cuda_graphs: {type: bool}")
                    .value();
  EXPECT_EQ(small.cardinality(), 10.0);
  std::vector<Config> all = small.enumerate(100);
  ASSERT_EQ(all.size(), 10u);
  std::set<std::string> keys;
  for (const Config& c : all) {
    EXPECT_TRUE(small.validate(c).ok());
    EXPECT_EQ(small.canonical(c, {}), c);
    keys.insert(config_key(c));
  }
  EXPECT_EQ(keys.size(), 10u);
  // Without conditions the count is the plain product.
  EXPECT_EQ(parse("kv_page_size: {type: pow2, low: 8, high: 128}\ncuda_graphs: {type: bool}").value().cardinality(),
            10.0);
}

}  // namespace
}  // namespace soartune::search

namespace soartune::search {
namespace {

TEST(SpaceTest, MalformedYamlGivesAnErrorNotAnException) {
  EXPECT_FALSE(parse("? [a, b]\n: {type: bool}").ok());
  EXPECT_FALSE(parse("weight_bits: {type: [choice]}").ok());
  EXPECT_FALSE(parse("weight_bits: {type: choice, values: 16}").ok());
  EXPECT_FALSE(parse("max_running_requests: {type: int, low: [1], high: 8}").ok());
}

}  // namespace
}  // namespace soartune::search
