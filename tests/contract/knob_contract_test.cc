// The knob contract across every layer a knob crosses: the job spec, the search encoding, the trial file the
// daemon writes, the worker's reading of it, the SQLite store and the export. Every catalogue knob and every
// allowed value (a range knob: its ends, its default and a middle value) must come out of each layer as it went
// in; a refused value must get the one message (field + allowed values) whichever layer checks it.
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/knob_catalogue.h"
#include "core/launch_config.h"
#include "daemon/job_spec.h"
#include "daemon/store.h"
#include "engine/worker/trial.h"
#include "search/encoding.h"
#include "search/launch_export.h"
#include "test_util.h"

namespace soartune {
namespace {

using daemon::testing::TempDir;
using daemon::testing::write_file;

std::vector<Value> sample_values(const core::KnobSpec& k) {
  if (!k.is_range) return k.values;
  std::vector<Value> v = {Value{k.low}, k.default_value, Value{(k.low + k.high) / 2}, Value{k.high}};
  return v;
}

// A YAML scalar for a value (strings are never quoted by the catalogue's values).
std::string yaml_scalar(const Value& v) { return to_text(v); }

std::string spec_with(const std::string& extra) {
  return "name: contract\nmodel: synthetic:tiny\nbackend: cpu\nstrategy: random\nbudget: {trials: 2}\n"
         "workload: {name: w, requests: [{name: r, input_len: 8, output_len: 4, count: 1}]}\n"
         "accuracy: {set: synthetic, samples: 2}\n" +
         extra;
}

// The argument that follows `flag` in the mapped args, or "" when absent; `present` says whether it was there.
std::string flag_arg(const search::SglangMapping& m, const std::string& flag, bool* present) {
  *present = false;
  for (size_t i = 0; i < m.args.size(); ++i) {
    if (m.args[i] != flag) continue;
    *present = true;
    return i + 1 < m.args.size() && m.args[i + 1].rfind("--", 0) != 0 ? m.args[i + 1] : std::string();
  }
  return "";
}

bool lists(const std::vector<std::string>& lines, const std::string& prefix) {
  for (const std::string& l : lines)
    if (l.rfind(prefix, 0) == 0) return true;
  return false;
}

TEST(KnobContract, EveryKnobAndValueCrossesEveryLayerUnchanged) {
  TempDir dir;
  auto store = daemon::Store::open(dir.file("contract.db"));
  ASSERT_TRUE(store.ok()) << store.status().message;
  int trial_number = 0;
  int checked = 0;
  for (const core::KnobSpec& k : core::launch_knobs()) {
    for (const Value& v : sample_values(k)) {
      const std::string what = k.name + "=" + to_text(v);
      SCOPED_TRACE(what);
      // 1. The job spec: the value as the search space's only choice.
      auto spec = daemon::parse_job_spec(
          spec_with("space:\n  " + k.name + ": {type: choice, values: [" + yaml_scalar(v) + "]}\n"), {});
      ASSERT_TRUE(spec.ok()) << spec.status().message;
      // 2. The search encoding: the space's point decodes back to the value, and encodes finitely.
      search::Encoding enc(spec.value().space.params());
      const Config suggestion = enc.from_unit({0.5}, spec.value().reference);
      ASSERT_EQ(suggestion.at(k.name), v);
      EXPECT_TRUE(enc.encode(suggestion).allFinite());
      const Config full = daemon::trial_config(spec.value(), suggestion);
      ASSERT_EQ(full.at(k.name), v);
      // 3. The trial file the daemon writes, 4. read by the worker's parser.
      const std::string path =
          write_file(dir.file("trial-" + std::to_string(trial_number) + ".yaml"),
                     daemon::trial_yaml(spec.value(), full, daemon::ReferenceFile{}));
      auto trial = engine::worker::load_trial(path);
      ASSERT_TRUE(trial.ok()) << trial.status().message;
      const Config parsed = trial.value().launch.values();
      EXPECT_EQ(parsed, full);
      // The typed config writes itself back to the same values.
      auto again = LaunchConfig::parse(trial.value().launch.to_yaml(), trial.value().launch.layer_overrides_yaml());
      ASSERT_TRUE(again.ok()) << again.status().message;
      EXPECT_EQ(again.value().values(), full);
      // 5. The store keeps it.
      const std::string job = "job-" + std::to_string(trial_number);
      daemon::JobRecord j;
      j.id = job;
      j.name = job;
      j.spec_yaml = spec_with("");
      j.model = "synthetic:tiny";
      j.strategy = "random";
      j.trial_budget = 2;
      j.work_dir = dir.path();
      ASSERT_TRUE(store.value()->insert_job(j).ok());
      daemon::TrialRecord t;
      t.job_id = job;
      t.number = 0;
      t.params = to_text(parsed);
      ASSERT_TRUE(store.value()->insert_trial(t).ok());
      auto stored = store.value()->get_trial(job, 0);
      ASSERT_TRUE(stored.ok()) << stored.status().message;
      auto stored_config = core::launch_config_from_text(stored.value().params);
      ASSERT_TRUE(stored_config.ok()) << stored_config.status().message;
      EXPECT_EQ(stored_config.value(), full);
      // 6. The export says the value: as its flag's argument, as a switch, or among the unmapped knobs.
      auto m = search::sglang_mapping(stored_config.value());
      ASSERT_TRUE(m.ok()) << m.status().message;
      const std::string text = to_text(v);
      const bool listed = lists(m.value().unmapped, k.name + "=" + text + ":");
      using Rule = core::ServingFlag::Rule;
      switch (k.serving.rule) {
        case Rule::kNone:
          EXPECT_TRUE(listed);
          break;
        case Rule::kCheckpoint:
          // A value away from the 16-bit checkpoint's must be said (as unmapped, or in the --quantization note).
          if (v != k.default_value) EXPECT_TRUE(listed || !m.value().notes.empty());
          break;
        case Rule::kValue: {
          if (!k.serving.requires_true.empty() && !std::get<bool>(full.at(k.serving.requires_true))) {
            EXPECT_TRUE(listed);
            break;
          }
          auto mapped = k.serving.value_map.find(text);
          const std::string want = mapped == k.serving.value_map.end() ? text : mapped->second;
          search::SglangMapping with_backend = m.value();
          if (!k.serving.requires_attention_backend.empty()) {
            // Without the attention backend the flag needs, the value is said among the unmapped knobs; with it,
            // the flag carries the value.
            if (!want.empty()) EXPECT_TRUE(listed);
            auto mb = search::sglang_mapping(stored_config.value(),
                                             {"--attention-backend", k.serving.requires_attention_backend});
            ASSERT_TRUE(mb.ok()) << mb.status().message;
            with_backend = mb.value();
          }
          for (const std::string& flag : k.serving.flags) {
            bool present = false;
            const std::string got = flag_arg(with_backend, flag, &present);
            EXPECT_EQ(present, !want.empty()) << flag;
            if (!want.empty()) EXPECT_EQ(got, want) << flag;
          }
          break;
        }
        case Rule::kPercent: {
          char buf[16];
          std::snprintf(buf, sizeof buf, "%.2f", static_cast<double>(std::get<int64_t>(v)) / 100.0);
          bool present = false;
          EXPECT_EQ(flag_arg(m.value(), k.serving.flags.at(0), &present), buf);
          EXPECT_TRUE(present);
          break;
        }
        case Rule::kDisableSwitch: {
          search::SglangMapping with_backend = m.value();
          if (!k.serving.requires_any_attention_backend.empty()) {
            // Without a backend the switch needs, turning the feature off is said among the unmapped knobs.
            if (!std::get<bool>(v)) EXPECT_TRUE(listed);
            auto mb = search::sglang_mapping(stored_config.value(),
                                             {"--attention-backend", k.serving.requires_any_attention_backend.front()});
            ASSERT_TRUE(mb.ok()) << mb.status().message;
            with_backend = mb.value();
          }
          bool present = false;
          flag_arg(with_backend, k.serving.flags.at(0), &present);
          EXPECT_EQ(present, !std::get<bool>(v));
          break;
        }
        case Rule::kModelConfig: {
          // The checkpoint's config.json entry carries the value; the default keeps the model's own.
          const auto it = m.value().model_config.find(k.serving.config_key);
          if (v == k.default_value) {
            EXPECT_TRUE(it == m.value().model_config.end()) << k.name;
          } else {
            ASSERT_TRUE(it != m.value().model_config.end()) << k.name;
            EXPECT_EQ(it->second, v);
          }
          break;
        }
      }
      ++trial_number;
      ++checked;
    }
  }
  EXPECT_GE(checked, static_cast<int>(core::launch_knobs().size()) * 2);
}

// A value no layer may accept: outside a range, or not among the enumerated values.
std::string refused_value(const core::KnobSpec& k) {
  if (k.is_range) return std::to_string(k.high + 1);
  switch (k.type) {
    case core::KnobType::kInt: return "7777";
    case core::KnobType::kBool: return "maybe";
    case core::KnobType::kString: return "nope";
  }
  return "nope";
}

// What follows "<field>: " in a message.
std::string after_field(const std::string& message, const std::string& field) {
  if (message.rfind(field + ": ", 0) != 0) return "(field " + field + " not named) " + message;
  return message.substr(field.size() + 2);
}

TEST(KnobContract, ARefusedValueGetsOneMessageWhicheverLayerChecksIt) {
  TempDir dir;
  for (const core::KnobSpec& k : core::launch_knobs()) {
    const std::string bad = refused_value(k);
    SCOPED_TRACE(k.name + "=" + bad);
    const std::string want = after_field(core::disallowed(k, bad, "f").message, "f");
    EXPECT_NE(want.find(k.allowed_text()), std::string::npos) << want;

    // Submission: `fixed:`, `reference:` and the search space (a space over another knob beside the first two).
    const std::string other = k.name == "kv_page_size" ? "weight_bits" : "kv_page_size";
    const std::string other_space = "space: {" + other + ": {type: choice, values: [" +
                                    to_text(core::find_knob(other)->values.at(1)) + "]}}\n";
    auto fixed = daemon::parse_job_spec(spec_with("fixed: {" + k.name + ": " + bad + "}\n" + other_space), {});
    ASSERT_FALSE(fixed.ok());
    EXPECT_EQ(after_field(fixed.status().message, "fixed." + k.name), want);
    auto reference =
        daemon::parse_job_spec(spec_with("reference: {" + k.name + ": " + bad + "}\n" + other_space), {});
    ASSERT_FALSE(reference.ok());
    EXPECT_EQ(after_field(reference.status().message, "reference." + k.name), want);
    auto space =
        daemon::parse_job_spec(spec_with("space:\n  " + k.name + ": {type: choice, values: [" + bad + "]}\n"), {});
    ASSERT_FALSE(space.ok());
    EXPECT_EQ(after_field(space.status().message, "space." + k.name + ".values[0]"), want);

    // The worker's trial file.
    const std::string path = write_file(
        dir.file(k.name + ".yaml"),
        "model: synthetic:tiny\nbackend: cpu\nlaunch: {" + k.name + ": " + bad +
            "}\nworkload: {name: w, requests: [{name: r, input_len: 8, output_len: 4, count: 1}]}\n");
    auto trial = engine::worker::load_trial(path);
    ASSERT_FALSE(trial.ok());
    EXPECT_EQ(after_field(trial.status().message, "launch." + k.name), want);

    // The store's text and the exporter.
    auto from_store = core::launch_config_from_text({{k.name, bad}});
    ASSERT_FALSE(from_store.ok());
    EXPECT_EQ(after_field(from_store.status().message, "launch." + k.name), want);
    auto exported = search::sglang_mapping({{k.name, value_from_text(bad)}});
    ASSERT_FALSE(exported.ok());
    EXPECT_EQ(after_field(exported.status().message, "launch." + k.name), want);
  }
}

TEST(KnobContract, LayerOverridesAreReadOnceAndCheckedAgainstTheModel) {
  // The job spec and the worker refuse the same keys with the same words.
  for (const char* key : {"x", "3.ffn", "-1", "3.attn.mlp"}) {
    SCOPED_TRACE(key);
    auto spec = daemon::parse_job_spec(spec_with("space: {kv_page_size: {type: choice, values: [32]}}\n" + std::string("layer_overrides: {\"") + key + "\": 8}\n"), {});
    ASSERT_FALSE(spec.ok());
    auto typed = LaunchConfig::parse(YAML::Node(), YAML::Load(std::string("{\"") + key + "\": 8}"));
    ASSERT_FALSE(typed.ok());
    EXPECT_EQ(spec.status().message, typed.status().message);
  }
  auto spec = daemon::parse_job_spec(spec_with("space: {kv_page_size: {type: choice, values: [32]}}\nlayer_overrides: {\"2\": 5}\n"), {});
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message, "layer_overrides.2: 5 is not one of 16, 8, 4");
  auto c = LaunchConfig::parse(YAML::Node(), YAML::Load("{\"1.attn\": 8, \"99\": 4}"));
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(c.value().check_layers(100).ok());
  EXPECT_EQ(c.value().check_layers(4).message,
            "layer_overrides.99: layer 99 does not exist; the model has 4 layers (0..3)");
  EXPECT_EQ(c.value().weight_bits_for(1, 4, ProjKind::kAttn), 8);
  EXPECT_EQ(c.value().weight_bits_for(1, 4, ProjKind::kMlp), 16);
}

TEST(KnobContract, TheStructDefaultsAreTheCatalogueDefaults) {
  EXPECT_EQ(LaunchConfig{}.values(), core::default_config());
  EXPECT_EQ(LaunchConfig::reference().values(), core::default_config());
}

}  // namespace
}  // namespace soartune
