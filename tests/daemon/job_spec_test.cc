// Job-spec validation: a good spec parses; every bad one is rejected with an error that names its field.
#include "daemon/job_spec.h"

#include <filesystem>

#include <gtest/gtest.h>

#include "test_util.h"

namespace soartune::daemon {
namespace {

using testing::TempDir;
using testing::write_file;

const char* kWorkload = R"(name: small
requests:
  - {name: short-long, input_len: 8, output_len: 16, count: 2}
  - {name: long-short, input_len: 64, output_len: 4, count: 1}
)";

std::string good_spec() {
  return R"(name: t
model: synthetic:tiny
backend: cpu
strategy: random
seed: 3
budget: {trials: 5, time_s: 60, stop_when: {ei_below_pct: 0.5, rounds: 2}}
trial_timeout_s: 30
workload: small
accuracy: {set: synthetic, samples: 4}
reference: {kv_page_size: 32}
fixed: {max_prefill_tokens: 256}
space:
  weight_bits: {type: choice, values: [16, 8, 4]}
  weight_group_size: {type: choice, values: [32, 128], when: {weight_bits: [4]}}
  kv_cache_dtype: {type: choice, values: [bf16, fp8_e4m3]}
warm_start: true
)";
}

class JobSpecTest : public ::testing::Test {
 protected:
  void SetUp() override { write_file(dir_.file("workloads/small.yaml"), kWorkload); }
  soartune::Result<JobSpec> parse(const std::string& text) {
    return parse_job_spec(text, SpecContext{dir_.file("workloads")});
  }
  // Replaces the line starting with `key:` (top level) by `line`, or appends `line`.
  std::string with(const std::string& key, const std::string& line) {
    std::string s = good_spec();
    size_t pos = s.find("\n" + key + ":");
    if (pos == std::string::npos) return s + line + "\n";
    size_t end = s.find('\n', pos + 1);
    // Nested blocks (space:) run until the next top-level key.
    while (end != std::string::npos && end + 1 < s.size() && s[end + 1] == ' ') end = s.find('\n', end + 1);
    return s.substr(0, pos + 1) + line + s.substr(end);
  }
  void expect_error(const std::string& text, const std::string& field) {
    soartune::Result<JobSpec> r = parse(text);
    ASSERT_FALSE(r.ok()) << "accepted:\n" << text;
    EXPECT_EQ(r.status().code, soartune::Code::kInvalidArgument);
    EXPECT_EQ(r.status().message.rfind(field + ":", 0), 0u)
        << "error does not start with '" << field << ":': " << r.status().message;
  }
  TempDir dir_;
};

TEST_F(JobSpecTest, GoodSpecParses) {
  soartune::Result<JobSpec> r = parse(good_spec());
  ASSERT_TRUE(r.ok()) << r.status().message;
  const JobSpec& s = r.value();
  EXPECT_EQ(s.model, "synthetic:tiny");
  EXPECT_EQ(s.backend, "cpu");
  EXPECT_EQ(s.strategy, "random");
  EXPECT_EQ(s.seed, 3u);
  EXPECT_EQ(s.trial_budget, 5);
  ASSERT_TRUE(s.time_budget_s);
  EXPECT_DOUBLE_EQ(*s.time_budget_s, 60);
  ASSERT_TRUE(s.stop_when);
  EXPECT_EQ(s.stop_when->rounds, 2);
  EXPECT_TRUE(s.warm_start);
  EXPECT_EQ(s.workload_name, "small");
  EXPECT_EQ(s.space.params().size(), 3u);
  // The reference config: catalogue defaults, `reference:` and `fixed:` on top.
  EXPECT_EQ(soartune::to_text(s.reference.at("kv_page_size")), "32");
  EXPECT_EQ(soartune::to_text(s.reference.at("max_prefill_tokens")), "256");
  EXPECT_EQ(soartune::to_text(s.reference.at("weight_bits")), "16");
}

TEST_F(JobSpecTest, DefaultsWhenOptionalFieldsAreAbsent) {
  soartune::Result<JobSpec> r = parse("model: synthetic:tiny\nworkload: small\nspace:\n  weight_bits: {type: choice, values: [16, 8]}\n");
  ASSERT_TRUE(r.ok()) << r.status().message;
  EXPECT_EQ(r.value().strategy, "bayes");
  EXPECT_EQ(r.value().backend, "auto");
  EXPECT_FALSE(r.value().warm_start);
  EXPECT_EQ(r.value().accuracy["set"].Scalar(), "synthetic");
}

TEST_F(JobSpecTest, TrialConfigOverlaysSuggestionOnReference) {
  JobSpec s = parse(good_spec()).value();
  soartune::Config sug = {{"weight_bits", int64_t{4}}, {"weight_group_size", int64_t{32}},
                        {"kv_cache_dtype", std::string("fp8_e4m3")}};
  soartune::Config c = trial_config(s, sug);
  EXPECT_EQ(soartune::to_text(c.at("weight_bits")), "4");
  EXPECT_EQ(soartune::to_text(c.at("weight_group_size")), "32");
  EXPECT_EQ(soartune::to_text(c.at("kv_page_size")), "32");          // from reference:
  EXPECT_EQ(soartune::to_text(c.at("max_prefill_tokens")), "256");   // from fixed:
  // An inactive conditional parameter takes the reference value.
  soartune::Config c16 = trial_config(s, {{"weight_bits", int64_t{16}}, {"kv_cache_dtype", std::string("bf16")}});
  EXPECT_EQ(c16.at("weight_group_size"), s.reference.at("weight_group_size"));
  soartune::Config view = space_view(s, c16);
  EXPECT_EQ(view.count("weight_group_size"), 0u);
  EXPECT_EQ(view.count("kv_page_size"), 0u);
}

TEST_F(JobSpecTest, TrialFileCarriesEverythingTheWorkerNeeds) {
  JobSpec s = parse(good_spec()).value();
  std::string y = trial_yaml(s, s.reference, ReferenceFile{"/w/reference.json", ""}, {"a header"});
  YAML::Node n = YAML::Load(y);
  EXPECT_EQ(y.rfind("# a header\n", 0), 0u);
  EXPECT_EQ(n["model"].Scalar(), "synthetic:tiny");
  EXPECT_EQ(n["backend"].Scalar(), "cpu");
  EXPECT_EQ(n["seed"].as<int>(), 3);
  EXPECT_EQ(n["launch"]["kv_page_size"].as<int>(), 32);
  EXPECT_EQ(n["launch"].size(), s.reference.size());
  EXPECT_EQ(n["workload"]["name"].Scalar(), "small");
  EXPECT_EQ(n["workload"]["requests"].size(), 2u);
  EXPECT_EQ(n["tiers"].size(), 3u);
  EXPECT_EQ(n["tiers"][2].as<int>(), 0);
  EXPECT_EQ(n["accuracy"]["samples"].as<int>(), 4);
  EXPECT_EQ(n["reference"]["write"].Scalar(), "/w/reference.json");
  EXPECT_FALSE(n["reference"]["read"].IsDefined());
  // Without reference files there is no `reference:` section (the exported form).
  EXPECT_FALSE(YAML::Load(trial_yaml(s, s.reference, ReferenceFile{}))["reference"].IsDefined());
}

TEST_F(JobSpecTest, InlineWorkload) {
  soartune::Result<JobSpec> r =
      parse(with("workload", "workload: {name: mine, requests: [{input_len: 4, output_len: 4, count: 1}]}"));
  ASSERT_TRUE(r.ok()) << r.status().message;
  EXPECT_EQ(r.value().workload_name, "mine");
}

TEST_F(JobSpecTest, EveryErrorNamesItsField) {
  expect_error("model: [1\n", "spec_yaml");
  expect_error("- a\n- b\n", "spec_yaml");
  expect_error(with("colour", "colour: blue"), "colour");
  expect_error(with("model", "# no model"), "model");
  expect_error(with("model", "model: llama"), "model");
  expect_error(with("model", "model: \"synthetic:\""), "model");
  expect_error(with("model", "model: hf:/nonexistent/dir"), "model");
  expect_error(with("backend", "backend: gpu"), "backend");
  expect_error(with("strategy", "strategy: grid"), "strategy");
  expect_error(with("seed", "seed: -1"), "seed");
  expect_error(with("budget", "budget: {trials: 0}"), "budget.trials");
  expect_error(with("budget", "budget: {trials: many}"), "budget.trials");
  expect_error(with("budget", "budget: {time_s: -5}"), "budget.time_s");
  expect_error(with("budget", "budget: {trials: 3, turns: 2}"), "budget.turns");
  expect_error(with("budget", "budget: {stop_when: {rounds: 2}}"), "budget.stop_when.ei_below_pct");
  expect_error(with("budget", "budget: {stop_when: {ei_below_pct: 1, rounds: 0}}"), "budget.stop_when.rounds");
  expect_error(with("budget", "budget: 5"), "budget");
  expect_error(with("parallel_trials", "parallel_trials: 0"), "parallel_trials");
  expect_error(with("trial_timeout_s", "trial_timeout_s: 0"), "trial_timeout_s");
  expect_error(with("workload", "workload: nope"), "workload");
  expect_error(with("workload", "# no workload"), "workload");
  expect_error(with("workload", "workload: {name: w}"), "workload.requests");
  expect_error(with("workload", "workload: {requests: [{input_len: 4, output_len: 4, count: 0}]}"),
               "workload.requests[0].count");
  expect_error(with("workload", "workload: {requests: [{input_len: 4, count: 1}]}"), "workload.requests[0].output_len");
  expect_error(with("accuracy", "accuracy: {set: /nonexistent/eval.jsonl}"), "accuracy.set");
  expect_error(with("accuracy", "accuracy: {set: eval.txt}"), "accuracy.set");
  expect_error(with("accuracy", "accuracy: {samples: 0}"), "accuracy.samples");
  expect_error(with("accuracy", "accuracy: {sample: 3}"), "accuracy.sample");
  expect_error(with("scoring", "scoring: {weights: {c1: x}}"), "scoring.weights.c1");
  expect_error(with("space", "# no space"), "space");
  expect_error(with("space", "space: {}"), "space");
  expect_error(with("space", "space:\n  weight_bits: {type: choice, values: [16, 5]}"), "space.weight_bits.values[1]");
  expect_error(with("space", "space:\n  warp_speed: {type: bool}"), "space.warp_speed");
  expect_error(with("reference", "reference: {kv_cache_dtype: fp9}"), "reference.kv_cache_dtype");
  expect_error(with("reference", "reference: {turbo: true}"), "reference.turbo");
  expect_error(with("fixed", "fixed: {weight_bits: 8}"), "fixed.weight_bits");
  expect_error(with("fixed", "fixed: {kv_page_size: [8, 16]}"), "fixed.kv_page_size");
  expect_error(with("warm_start", "warm_start: maybe"), "warm_start");
  expect_error(with("layer_overrides", "layer_overrides: {first: 8}"), "layer_overrides.first");
  expect_error(with("layer_overrides", "layer_overrides: {\"2.attn\": 5}"), "layer_overrides.2.attn");
  expect_error(with("submissions", "submissions: {timezone: Mars}"), "submissions.timezone");
  expect_error(with("submissions", "submissions: {per_day: 0}"), "submissions.per_day");
}

// `serving:`: the engine and its base flags; with a serving target, values the engine cannot take (group size
// 256 under Marlin) are refused in space, fixed and reference before the search can propose them.
TEST_F(JobSpecTest, ServingSectionParsesWithTheRaceDefaults) {
  soartune::Result<JobSpec> r = parse(with("serving", "serving: {engine: sglang-minicpm}"));
  ASSERT_TRUE(r.ok()) << r.status().message;
  ASSERT_TRUE(r.value().serving);
  EXPECT_EQ(r.value().serving->engine, search::ServingEngine::kSglangMinicpm);
  EXPECT_EQ(r.value().serving->base_args.size(), 6u);
  EXPECT_FALSE(parse(good_spec()).value().serving);
  expect_error(with("serving", "serving: {engine: sglang-minicpm, base_args: [--enable-radix]}"),
               "serving.base_args[0]");
  expect_error(with("serving", "serving: {engine: sglang-minicpm, base_args: [--skip-server-warmup]}"),
               "serving.base_args");
}

TEST_F(JobSpecTest, ServingTargetRefusesGroupSizesItCannotExport) {
  std::string spec = with("serving", "serving: {engine: sglang-upstream}");
  const std::string groups = "values: [32, 128]";
  spec.replace(spec.find(groups), groups.size(), "values: [32, 256]");
  soartune::Result<JobSpec> r = parse(spec);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message,
            "space.weight_group_size: 256 cannot be exported to sglang-upstream: gptq_marlin (SGLang's Marlin "
            "kernels) takes group sizes -1 (per channel), 32, 64, 128");
  std::string fixed = with("serving", "serving: {engine: sglang-upstream}");
  const std::string fixed_line = "fixed: {max_prefill_tokens: 256}";
  fixed.replace(fixed.find(fixed_line), fixed_line.size(), "fixed: {max_prefill_tokens: 256, weight_group_size: 256}");
  const std::string group_line = "  weight_group_size: {type: choice, values: [32, 128], when: {weight_bits: [4]}}\n";
  fixed.replace(fixed.find(group_line), group_line.size(), "");
  expect_error(fixed, "fixed.weight_group_size");
  // Without a serving target the space is searched as written.
  spec.erase(spec.find("serving: {engine: sglang-upstream}"));
  EXPECT_TRUE(parse(spec).ok());
}

TEST_F(JobSpecTest, GatingOnRandomWeightsWarnsAndAProxyModelIsLabelled) {
  // synthetic:tiny has random weights: the accuracy gate on it is warned about at submission.
  soartune::Result<JobSpec> plain = parse(good_spec());
  ASSERT_TRUE(plain.ok()) << plain.status().message;
  EXPECT_FALSE(plain.value().accuracy_proxy);
  ASSERT_EQ(plain.value().warnings.size(), 1u);
  EXPECT_EQ(plain.value().warnings[0].rfind("accuracy: synthetic:tiny has random weights", 0), 0u)
      << plain.value().warnings[0];

  // accuracy.model names a trained model: the job measures proxy accuracy, and nothing is warned.
  write_file(dir_.file("trained/config.json"), "{}");
  soartune::Result<JobSpec> proxy =
      parse(with("accuracy", "accuracy: {set: synthetic, samples: 4, model: hf:" + dir_.file("trained") + "}"));
  ASSERT_TRUE(proxy.ok()) << proxy.status().message;
  EXPECT_TRUE(proxy.value().accuracy_proxy);
  EXPECT_TRUE(proxy.value().warnings.empty());
  EXPECT_EQ(proxy.value().accuracy["model"].Scalar().rfind("hf:/", 0), 0u);

  expect_error(with("accuracy", "accuracy: {model: hf:" + dir_.file("missing") + "}"), "accuracy.model");
  expect_error(with("accuracy", "accuracy: {model: synthetic:tiny}"), "accuracy.model");
}

// Sizes and numbers a hostile or careless client could send: each refused with INVALID_ARGUMENT naming the field.
TEST_F(JobSpecTest, OversizedTextsAndUnboundedNumbersAreRefused) {
  const std::string after_name = good_spec().substr(good_spec().find('\n'));   // name: is the first line
  expect_error("name: " + std::string(3u << 20, 'x') + after_name, "name");
  expect_error("name: " + std::string(201, 'x') + after_name, "name");
  expect_error(with("trial_timeout_s", "trial_timeout_s: 1e308"), "trial_timeout_s");
  expect_error(with("trial_timeout_s", "trial_timeout_s: 604801"), "trial_timeout_s");
  expect_error(with("budget", "budget: {time_s: 1e308}"), "budget.time_s");
  expect_error(with("budget", "budget: {stop_when: {ei_below_pct: 1e308}}"), "budget.stop_when.ei_below_pct");
  expect_error(with("scoring", "scoring: {weights: {c1: 1e308}}"), "scoring.weights.c1");
  expect_error(with("model", "model: hf:/tmp/" + std::string(300, 'm')), "model");
  expect_error(with("model", "model: hf:" + std::string(5000, 'm')), "model");
  expect_error(with("accuracy", "accuracy: {set: /tmp/" + std::string(300, 'a') + ".jsonl}"), "accuracy.set");
  expect_error(with("workload", "workload: " + std::string(300, 'w')), "workload");
  // At the limits they still parse.
  EXPECT_TRUE(parse("name: " + std::string(200, 'x') + after_name).ok());
  EXPECT_TRUE(parse(with("trial_timeout_s", "trial_timeout_s: 604800")).ok());
}


// An hf: model's config.json bounds what a spec may ask of it: layer overrides within its layers, workloads
// within its context; a config.json that is not JSON is refused without quoting it.
TEST_F(JobSpecTest, HfModelBoundsLayerOverridesAndWorkloadLengths) {
  write_file(dir_.file("m/config.json"), R"({"num_hidden_layers": 4, "max_position_embeddings": 64})");
  const std::string model = "model: hf:" + dir_.file("m");
  auto spec = [&](const std::string& extra, const std::string& workload) {
    std::string s = with("model", model);
    s = s.substr(0, s.find("\nworkload:") + 1) + workload + s.substr(s.find('\n', s.find("\nworkload:") + 1));
    return s + extra;
  };
  const std::string fits = "workload: {requests: [{input_len: 32, output_len: 32, count: 1}]}";
  EXPECT_TRUE(parse(spec("layer_overrides: {\"3\": 8}\n", fits)).ok());
  expect_error(spec("layer_overrides: {\"99\": 8}\n", fits), "layer_overrides.99");
  expect_error(spec("layer_overrides: {\"4\": 8}\n", fits), "layer_overrides.4");
  expect_error(spec("", "workload: {requests: [{input_len: 60, output_len: 8, count: 1}]}"), "workload.requests[0]");
  expect_error(spec("", "workload: {requests: [{input_len: 8, output_len: 8, count: 1}, "
                        "{input_len: 1000000, output_len: 8, count: 1}]}"), "workload.requests[1]");
  write_file(dir_.file("m/config.json"), "SECRET first line, not json");
  soartune::Result<JobSpec> r = parse(spec("", fits));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message.rfind("model:", 0), 0u) << r.status().message;
  EXPECT_EQ(r.status().message.find("SECRET"), std::string::npos) << r.status().message;
}

// Names are checked without std::regex, whose recursive matcher overflowed the stack (and killed the daemon)
// on a preset or workload name of 100 000 characters, well within the 256 KiB a spec may have.
TEST_F(JobSpecTest, VeryLongNamesAreCheckedWithoutOverflowingTheStack) {
  const std::string long_name(200000, 'a');
  expect_error(with("model", "model: synthetic:" + long_name + "!"), "model");
  expect_error(with("workload", "workload: " + long_name), "workload");
  expect_error(with("workload", "workload: " + long_name + "!"), "workload");
}

}  // namespace
}  // namespace soartune::daemon

// A synthetic: model is checked against its preset in core/synthetic_presets.h, as an hf: model against its
// config.json: the name among the presets, layer overrides within its layers, workloads within its context.
namespace soartune::daemon {
namespace {

TEST_F(JobSpecTest, SyntheticPresetIsCheckedAtSubmission) {
  soartune::Result<JobSpec> r = parse(with("model", "model: synthetic:nonexistent"));
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code, soartune::Code::kInvalidArgument);
  EXPECT_EQ(r.status().message,
            "model: synthetic preset 'nonexistent' is not one of tiny, small, llama3-8b, minicpm-sala-9b, tiny-sala");
  // synthetic:tiny has 4 layers and a context of 4096 tokens.
  EXPECT_TRUE(parse(good_spec() + "layer_overrides: {\"3\": 8}\n").ok());
  expect_error(good_spec() + "layer_overrides: {\"99\": 8}\n", "layer_overrides.99");
  expect_error(good_spec() + "layer_overrides: {\"4\": 8}\n", "layer_overrides.4");
  auto workload = [&](const std::string& w) {
    std::string s = good_spec();
    const size_t at = s.find("\nworkload:") + 1;
    return s.substr(0, at) + w + s.substr(s.find('\n', at));
  };
  EXPECT_TRUE(parse(workload("workload: {requests: [{input_len: 4000, output_len: 96, count: 1}]}")).ok());
  soartune::Result<JobSpec> longer = parse(workload("workload: {requests: [{input_len: 4000, output_len: 97, count: 1}]}"));
  ASSERT_FALSE(longer.ok());
  EXPECT_EQ(longer.status().message,
            "workload.requests[0]: input_len + output_len = 4097 exceeds the model's context of 4096 tokens "
            "(the synthetic:tiny preset)");
  expect_error(workload("workload: {requests: [{input_len: 8, output_len: 8, count: 1}, "
                        "{input_len: 1000000, output_len: 8, count: 1}]}"), "workload.requests[1]");
  // The engine builds the same shape the daemon checked.
  EXPECT_TRUE(parse(with("model", "model: synthetic:tiny-sala") + "layer_overrides: {\"7\": 8}\n").ok());
  expect_error(with("model", "model: synthetic:tiny-sala") + "layer_overrides: {\"8\": 8}\n", "layer_overrides.8");
}

// Found by tests/fuzz/job_spec_fuzz: input_len 08 passed the request check (read as decimal) and then threw
// yaml-cpp's bad conversion (octal) in the context check, aborting the daemon. Request numbers are now read
// as the worker reads them: 08 is refused, 010 is 8.
TEST_F(JobSpecTest, RequestNumbersReadAsTheWorkerReadsThem) {
  auto spec = [&](const std::string& input_len) {
    return with("workload", "workload: {requests: [{input_len: " + input_len + ", output_len: 4, count: 1}]}");
  };
  expect_error(spec("08"), "workload.requests[0].input_len");
  expect_error(spec("1e3"), "workload.requests[0].input_len");
  soartune::Result<JobSpec> octal = parse(spec("010"));
  ASSERT_TRUE(octal.ok()) << octal.status().message;
  EXPECT_EQ(octal.value().workload["requests"][0]["input_len"].as<int>(), 8);
}

}  // namespace
}  // namespace soartune::daemon

namespace soartune::daemon {
namespace {

namespace fs = std::filesystem;

// `quantization:` sets how GPTQ trials are calibrated; the trial file carries it (with the job's cache dir) and
// the defaults are the measured ones; bad values name the field and the allowed range; a file set must exist
// under the data roots.
TEST_F(JobSpecTest, QuantizationSectionReachesTheTrialFile) {
  JobSpec def = parse(good_spec()).value();
  EXPECT_EQ(def.quantization.calibration_samples, kDefaultCalibrationSamples);
  EXPECT_DOUBLE_EQ(def.quantization.damp_pct, kDefaultDampPct);
  YAML::Node c = YAML::Load(trial_yaml(def, def.reference, ReferenceFile{"", "", "/w/quantized"}))["calibration"];
  EXPECT_FALSE(c["set"].IsDefined());   // the accuracy set's rows after the measured ones
  EXPECT_EQ(c["samples"].as<int>(), kDefaultCalibrationSamples);
  EXPECT_DOUBLE_EQ(c["damp_pct"].as<double>(), kDefaultDampPct);
  EXPECT_EQ(c["cache_dir"].as<std::string>(), "/w/quantized");

  write_file(dir_.file("calib.jsonl"), "{\"prompt_ids\": [1, 2, 3]}\n");
  soartune::Result<JobSpec> r = parse(with("quantization", "quantization: {calibration_set: " + dir_.file("calib.jsonl") +
                                                               ", calibration_samples: 12, damp_pct: 2.5}"));
  ASSERT_TRUE(r.ok()) << r.status().message;
  c = YAML::Load(trial_yaml(r.value(), r.value().reference, ReferenceFile{}))["calibration"];
  EXPECT_EQ(c["set"].as<std::string>(), fs::weakly_canonical(dir_.file("calib.jsonl")).string());
  EXPECT_EQ(c["samples"].as<int>(), 12);
  EXPECT_DOUBLE_EQ(c["damp_pct"].as<double>(), 2.5);
  EXPECT_FALSE(c["cache_dir"].IsDefined());
  ASSERT_TRUE(parse(with("quantization", "quantization: {calibration_set: accuracy}")).ok());

  expect_error(with("quantization", "quantization: {calibration_samples: 0}"), "quantization.calibration_samples");
  expect_error(with("quantization", "quantization: {calibration_samples: 5000}"), "quantization.calibration_samples");
  expect_error(with("quantization", "quantization: {calibration_samples: many}"), "quantization.calibration_samples");
  expect_error(with("quantization", "quantization: {damp_pct: 0}"), "quantization.damp_pct");
  expect_error(with("quantization", "quantization: {damp_pct: 101}"), "quantization.damp_pct");
  expect_error(with("quantization", "quantization: {damp_pct: nan}"), "quantization.damp_pct");
  expect_error(with("quantization", "quantization: {calibration_set: wikitext}"), "quantization.calibration_set");
  expect_error(with("quantization", "quantization: {calibration_set: " + dir_.file("none.jsonl") + "}"),
               "quantization.calibration_set");
  expect_error(with("quantization", "quantization: {samples: 3}"), "quantization.samples");
  expect_error(with("quantization", "quantization: 3"), "quantization");
  r = parse(with("quantization", "quantization: {damp_pct: 101}"));
  EXPECT_NE(r.status().message.find("at most 100"), std::string::npos) << r.status().message;

  // Outside the data roots: refused without saying whether the file exists.
  TempDir other;
  write_file(other.file("calib.jsonl"), "{\"prompt_ids\": [1]}\n");
  soartune::Result<JobSpec> denied =
      parse_job_spec(with("quantization", "quantization: {calibration_set: " + other.file("calib.jsonl") + "}"),
                     SpecContext{dir_.file("workloads"), {dir_.path()}});
  ASSERT_FALSE(denied.ok());
  EXPECT_EQ(denied.status().code, soartune::Code::kPermissionDenied);
  EXPECT_EQ(denied.status().message.rfind("quantization.calibration_set:", 0), 0u) << denied.status().message;
}

}  // namespace
}  // namespace soartune::daemon
