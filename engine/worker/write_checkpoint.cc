#include "engine/worker/write_checkpoint.h"

#include <iostream>

#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "core/knob_catalogue.h"
#include "engine/gptq_checkpoint.h"
#include "engine/model_loader.h"
#include "engine/worker/quantize_trial.h"
#include "engine/worker/trial.h"

namespace soartune::engine::worker {

namespace {

int fail(const std::string& message) {
  spdlog::error("{}", message);
  std::cout << nlohmann::json{{"ok", false}, {"error", message}}.dump() << std::endl;
  return 2;
}

int write_or_throw(const std::string& trial_path, const std::string& dir) {
  auto trial = load_trial(trial_path);
  if (!trial.ok()) return fail(trial.status().message);
  const TrialSpec& t = trial.value();
  if (t.model.rfind("hf:", 0) != 0)
    return fail("model: " + t.model + " has no source checkpoint to copy the tokenizer and 16-bit tensors from; allowed: hf:<dir>");
  auto w = load_model(t.model, t.seed);
  if (!w.ok()) return fail(w.status().message);
  // The solver the measuring run took (it falls back to the CPU where no GPU can be used).
  auto q = quantize_for_trial(w.value(), t, t.backend == "cpu" ? "cpu" : "cuda");
  if (!q.ok()) return fail(q.status().message);
  GptqWriteOptions options;
  options.quantizer = std::string("soartune:") + SOARTUNE_VERSION;
  options.method = q.value().method;
  options.config_overrides = core::model_config_overrides(core::config_of(t.launch));
  auto files = write_gptq_checkpoint(w.value(), t.model.substr(3), dir, options);
  if (!files.ok()) return fail(files.status().message);
  spdlog::info("wrote a GPTQ checkpoint of {} into {} ({} files)", t.model, dir, files.value().size());
  std::cout << nlohmann::json{{"ok", true}, {"dir", dir}, {"files", files.value()}}.dump() << std::endl;
  return 0;
}

}  // namespace

int write_checkpoint(const std::string& trial_path, const std::string& dir) {
  try {
    return write_or_throw(trial_path, dir);
  } catch (const std::exception& e) {   // filesystem errors, host memory
    return fail(std::string("writing the checkpoint failed: ") + e.what());
  }
}

}  // namespace soartune::engine::worker
