// soartune-worker: runs one trial (docs/FORMATS.md section 3) and prints one JSON result (section 4) on
// stdout, after a progress line per measured stage with --progress; logs go to stderr. Exit 0 on success, 2 on a bad config or model, 1 on any other failure.
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <new>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "core/worker_progress.h"
#include "core/worker_result.h"
#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine/quantize.h"
#include "engine/system_memory.h"
#include "engine/worker/accuracy.h"
#include "engine/worker/tiers.h"
#include "engine/worker/quantize_trial.h"
#include "engine/worker/trial.h"
#include "engine/worker/write_checkpoint.h"

namespace soartune::engine::worker {
namespace {

using nlohmann::json;

void emit(const WorkerResult& r) { std::cout << to_json(r) << std::endl; }

// One progress line (core/worker_progress.h), flushed at once: the daemon may stop the trial on what it says.
void report(const WorkerProgress& p) { std::cout << to_json(p) << std::endl; }

int fail(const Status& s, bool config_error, const std::string& default_field = "") {
  WorkerResult r;
  r.error.message = s.message;
  r.error.kind = config_error                         ? FailureKind::kInvalidConfig
                 : s.code == Code::kResourceExhausted ? FailureKind::kOutOfMemory
                                                      : FailureKind::kWorkerError;
  if (config_error) {
    // "<field>: <message>" when the prefix is one token (launch.kv_cache_dtype), else the default field.
    const auto pos = s.message.find(": ");
    const std::string prefix = pos == std::string::npos ? "" : s.message.substr(0, pos);
    if (!prefix.empty() && prefix.find(' ') == std::string::npos) {
      r.error.field = prefix;
      r.error.message = s.message.substr(pos + 2);
    } else if (!default_field.empty()) {
      r.error.field = default_field;
    }
  }
  emit(r);
  spdlog::error("{}", s.message);
  return config_error ? 2 : 1;
}

bool is_config_error(const Status& s) { return s.code == Code::kInvalidArgument || s.code == Code::kNotFound; }

LatencyPercentiles percentiles(const Percentiles& p) { return {p.p50, p.p90, p.p99}; }

struct BackendChoice {
  std::string kind;   // "cpu" or "cuda"
  int threads = 0;
};

Result<std::unique_ptr<Backend>> make_backend(const BackendChoice& c) {
  if (c.kind == "cuda") return make_cuda_backend(0);
  return make_cpu_backend(c.threads);
}

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// Whether a failure is the trial's (bad config or model: exit 2) rather than the run's.
struct Failed {
  Status status;
  bool config_error = false;
  std::string field;
};

// Proxy accuracy: the trial's launch config on accuracy.model (a trained model of the same family as the
// trial's synthetic one) against that model's reference config, with the reference outputs read, written or
// computed as the trial file says. Durations are not measured here: they come from the trial's own model.
Result<AccuracyResult> proxy_accuracy(const TrialSpec& trial, const BackendChoice& choice, const ModelConfig& timed,
                                      Failed& failed, double& seconds) {
  const auto t0 = std::chrono::steady_clock::now();
  auto give_up = [&](Status s, bool config_error, std::string field = "") -> Result<AccuracyResult> {
    failed = {s, config_error, std::move(field)};
    return s;
  };
  auto weights_or = load_model(trial.accuracy.model, trial.seed);
  if (!weights_or.ok()) return give_up(weights_or.status(), is_config_error(weights_or.status()), "accuracy.model");
  ModelWeights weights = std::move(weights_or).value();
  // One family: the same mixer layout kind (every layer softmax attention, or a hybrid), so the launch knobs
  // mean the same thing on both models.
  if (weights.config.mixers.empty() != timed.mixers.empty())
    return give_up(Status::Invalid("accuracy.model: " + trial.accuracy.model + " is not of the same family as " +
                                   trial.model + " (one is a hybrid of attention kinds, the other is not)"),
                   true);
  auto set_or = load_accuracy_set(trial.accuracy, trial.seed, weights.config.vocab);
  if (!set_or.ok()) return give_up(set_or.status(), true, "accuracy.set");
  const AccuracySet set = set_or.value();
  EngineOptions options;
  options.max_context = set.max_len() + 1;
  options.max_scored_tokens = set.max_scored();
  const int seqs = std::max(1, static_cast<int>(set.items.size()));
  auto engine_for = [&](const LaunchConfig& launch, const ModelWeights& w) -> Result<std::unique_ptr<Engine>> {
    auto backend = make_backend(choice);
    if (!backend.ok()) return backend.status();
    EngineOptions o = options;
    o.launch = launch;
    if (choice.kind == "cpu") o.kv_pages = std::min(seqs, launch.max_running_requests) * pages_for(o.max_context, launch.kv_page_size);
    return Engine::create(std::move(backend).value(), w, o);
  };
  std::optional<ReferenceOutputs> reference;
  if (!trial.reference_read.empty()) {
    std::ifstream in(trial.reference_read);
    json j;
    try {
      j = json::parse(in);
    } catch (const std::exception& e) {
      return give_up(Status::Invalid(std::string("reference.read: not JSON: ") + e.what()), true);
    }
    auto r = ReferenceOutputs::from_json(j);
    if (!r.ok()) return give_up(r.status(), true);
    reference = r.value();
  } else {
    auto engine = engine_for(LaunchConfig::reference(), weights);
    if (!engine.ok()) return give_up(engine.status(), is_config_error(engine.status()));
    auto r = compute_reference(*engine.value(), set);
    if (!r.ok()) return give_up(r.status(), false);
    reference = r.value();
    if (!trial.reference_write.empty()) {
      std::ofstream out(trial.reference_write);
      out << r.value().to_json().dump() << "\n";
      if (!out) return give_up(Status::Invalid("reference.write: cannot write " + trial.reference_write), true);
    }
  }
  // Quantised as the trial says (GPTQ included), with the proxy's own calibration rows and cache entry.
  TrialSpec on_proxy = trial;
  on_proxy.model = trial.accuracy.model;
  auto quantised = quantize_for_trial(weights, on_proxy, choice.kind);
  if (!quantised.ok()) return give_up(quantised.status(), is_config_error(quantised.status()));
  auto engine = engine_for(trial.launch, weights);
  if (!engine.ok()) return give_up(engine.status(), is_config_error(engine.status()));
  auto a = evaluate_accuracy(*engine.value(), set, *reference);
  if (!a.ok()) return give_up(a.status(), is_config_error(a.status()));
  seconds = seconds_since(t0);
  return a;
}

int run(const std::string& trial_path, const std::string& backend_override, int threads, bool progress_lines) {
  const auto t_start = std::chrono::steady_clock::now();
  auto trial_or = load_trial(trial_path);
  if (!trial_or.ok()) return fail(trial_or.status(), true, "trial");
  TrialSpec trial = trial_or.value();
  if (!backend_override.empty()) trial.backend = backend_override;

  // Backend: auto takes the CUDA backend when it is built and finds a device.
  BackendChoice choice{"cpu", threads};
  if (trial.backend == "cuda" || trial.backend == "auto") {
    auto probe = make_cuda_backend(0);
    if (probe.ok()) {
      choice.kind = "cuda";
    } else if (trial.backend == "cuda") {
      return fail(Status::Invalid("backend: cuda is not usable here: " + probe.status().message), true);
    } else {
      spdlog::info("backend auto: using the CPU ({})", probe.status().message);
    }
  }

  if (choice.kind == "cpu") {
    // The CPU backend keeps fp32 weights beside the 16-bit host copy: refuse before loading what cannot fit.
    auto cfg = trial.model.rfind("synthetic:", 0) == 0 ? synthetic_config(trial.model.substr(10))
               : trial.model.rfind("hf:", 0) == 0     ? read_hf_config(trial.model.substr(3))
                                                      : Result<ModelConfig>(Status::Invalid("model: '" + trial.model + "' is not one of hf:<dir>, synthetic:<preset>"));
    if (!cfg.ok()) return fail(cfg.status(), true, "model");
    const std::size_t need = static_cast<std::size_t>(cfg.value().parameter_count()) * 6;
    const std::size_t avail = available_memory_bytes();
    if (avail && need > avail * 9 / 10)
      return fail(Status::Exhausted("model: " + trial.model + " needs about " + std::to_string(need >> 30) + " GiB of host memory on the " +
                                    "cpu backend (fp32 weights plus the 16-bit copy); " + std::to_string(avail >> 30) + " GiB available"),
                  false);
  }

  const auto t_load = std::chrono::steady_clock::now();
  auto weights_or = load_model(trial.model, trial.seed);
  if (!weights_or.ok()) return fail(weights_or.status(), is_config_error(weights_or.status()), "model");
  ModelWeights weights = std::move(weights_or).value();
  const ModelConfig model = weights.config;
  const double weights_s = seconds_since(t_load);
  spdlog::info("model {}: {} layers, hidden {}, vocab {} ({:.1f} s)", model.name, model.layers, model.hidden,
               model.vocab, weights_s);

  const bool proxy = !trial.accuracy.model.empty();
  double accuracy_s = 0;
  AccuracyResult acc;
  if (proxy) {
    Failed failed;
    auto a = proxy_accuracy(trial, choice, model, failed, accuracy_s);
    if (!a.ok()) return fail(failed.status, failed.config_error, failed.field);
    acc = a.value();
    spdlog::info("proxy accuracy on {}: {} {:.2f}%", trial.accuracy.model, acc.metric, acc.relative_pct);
  }
  // With a proxy the accuracy set is the proxy's; the timed model needs none.
  auto set_or = proxy ? Result<AccuracySet>(AccuracySet{}) : load_accuracy_set(trial.accuracy, trial.seed, model.vocab);
  if (!set_or.ok()) return fail(set_or.status(), true, "accuracy.set");
  const AccuracySet set = set_or.value();
  const std::vector<WorkloadRequest> requests = expand_workload(trial.workload, trial.seed, model.vocab);
  EngineOptions options;
  int kv_sequences = 0;   // CPU: sequences the KV pool is sized for
  options.max_context = std::max(trial.workload.max_total_len(), set.max_len()) + 1;
  options.max_scored_tokens = set.max_scored();
  if (choice.kind == "cpu") {
    // Pages for as many sequences as can ever run at once here, at their longest; the CUDA backend sizes
    // its pool from mem_fraction_pct instead.
    const int seqs = std::max(trial.workload.total_requests(), static_cast<int>(set.items.size()));
    kv_sequences = std::max(1, seqs);
  }
  double load_s = seconds_since(t_load) - accuracy_s;   // less the proxy accuracy pass run in between

  // Reference outputs: read, or computed here with the reference config before quantising.
  std::optional<ReferenceOutputs> reference;
  if (proxy) {
  } else if (!trial.reference_read.empty()) {
    std::ifstream in(trial.reference_read);
    json j;
    try {
      j = json::parse(in);
    } catch (const std::exception& e) {
      return fail(Status::Invalid(std::string("reference.read: not JSON: ") + e.what()), true);
    }
    auto r = ReferenceOutputs::from_json(j);
    if (!r.ok()) return fail(r.status(), true);
    reference = r.value();
  } else if (trial.reference_write.empty()) {
    const auto t = std::chrono::steady_clock::now();
    auto backend = make_backend(choice);
    if (!backend.ok()) return fail(backend.status(), false);
    EngineOptions ref_options = options;
    ref_options.launch = LaunchConfig::reference();
    if (kv_sequences)
      ref_options.kv_pages = std::min(kv_sequences, ref_options.launch.max_running_requests) *
                             pages_for(options.max_context, ref_options.launch.kv_page_size);
    auto engine = Engine::create(std::move(backend).value(), weights, ref_options);
    if (!engine.ok()) return fail(engine.status(), is_config_error(engine.status()));
    auto r = compute_reference(*engine.value(), set);
    if (!r.ok()) return fail(r.status(), false);
    reference = r.value();
    accuracy_s += seconds_since(t);
  }

  const auto t_quant = std::chrono::steady_clock::now();
  auto quantised = quantize_for_trial(weights, trial, choice.kind);
  if (!quantised.ok()) return fail(quantised.status(), is_config_error(quantised.status()));
  if (quantised.value().method == "gptq")
    spdlog::info("quantised by gptq in {:.1f} s ({} calibration sequences{})", quantised.value().seconds,
                 quantised.value().calibration_sequences,
                 quantised.value().cached ? ", from the cache" : ", solver " + quantised.value().solver);
  options.launch = trial.launch;
  if (kv_sequences)
    options.kv_pages = std::min(kv_sequences, trial.launch.max_running_requests) * pages_for(options.max_context, trial.launch.kv_page_size);
  auto backend = make_backend(choice);
  if (!backend.ok()) return fail(backend.status(), false);
  const auto t_prepare = std::chrono::steady_clock::now();
  auto engine_or = Engine::create(std::move(backend).value(), weights, options);
  if (!engine_or.ok()) return fail(engine_or.status(), is_config_error(engine_or.status()));
  Engine& engine = *engine_or.value();
  const double prepare_s = seconds_since(t_prepare);
  weights = ModelWeights{};  // the backend holds its own copy now
  load_s += seconds_since(t_quant);

  const auto t_acc = std::chrono::steady_clock::now();
  if (proxy) {
  } else if (!reference) {
    // This trial is the reference: its outputs are the baseline, and it scores 100 against itself.
    auto r = compute_reference(engine, set);
    if (!r.ok()) return fail(r.status(), false);
    std::ofstream out(trial.reference_write);
    out << r.value().to_json().dump() << "\n";
    if (!out) return fail(Status::Invalid("reference.write: cannot write " + trial.reference_write), true);
    acc.metric = r.value().metric;
    acc.positions = r.value().positions;
    acc.candidate = acc.reference = acc.metric == "task" ? r.value().accuracy : 1.0;
    acc.relative_pct = 100.0;
    acc.top1_agreement_pct = 100.0;
    acc.top1_digest = top1_digest(r.value().top1);
  } else {
    auto a = evaluate_accuracy(engine, set, *reference);
    if (!a.ok()) return fail(a.status(), is_config_error(a.status()));
    acc = a.value();
  }
  accuracy_s += seconds_since(t_acc);
  spdlog::info("accuracy {}: {:.2f}% ({} positions)", acc.metric, acc.relative_pct, acc.positions);
  WorkerResult result;
  result.accuracy = {acc.metric, acc.relative_pct, acc.candidate, acc.reference, acc.positions, proxy,
                     proxy ? trial.accuracy.model : std::string(), acc.top1_agreement_pct, acc.top1_digest};
  WorkerProgress progress;
  progress.stage = "accuracy";
  progress.accuracy = result.accuracy;
  progress.elapsed_s = seconds_since(t_start);
  if (progress_lines) report(progress);

  const auto t_tiers = std::chrono::steady_clock::now();
  for (int c : trial.tiers) {
    auto r = run_tier(engine, requests, c);
    if (!r.ok()) return fail(r.status(), false);
    const TierResult& t = r.value();
    spdlog::info("tier {}: {:.3f} s, {} tokens, {:.1f} tok/s", t.tier, t.duration_s, t.output_tokens, t.output_tokens_per_s);
    result.tiers.push_back({t.tier, t.concurrency, t.duration_s, t.requests, t.output_tokens, percentiles(t.ttft_ms),
                            percentiles(t.tpot_ms), t.output_tokens_per_s});
    progress.stage = t.tier;
    progress.tiers = result.tiers;
    progress.elapsed_s = seconds_since(t_start);
    if (progress_lines) report(progress);
  }
  const double tiers_s = seconds_since(t_tiers);

  // The kernel plans the backend made when it was built (variant, tiles, splits, grid per op and shape).
  result.plans = engine.backend().kernel_plans();
  result.ok = true;
  result.backend = engine.backend().name();
  result.device = engine.backend().device();
  result.engine_build = std::string(SOARTUNE_VERSION) + "+" + SOARTUNE_GIT_COMMIT;
  result.quantization = {quantised.value().method, quantised.value().calibration_sequences,
                         quantised.value().held_out_skipped, quantised.value().cached, quantised.value().seconds,
                         quantised.value().solver};
  result.peak_memory_bytes = static_cast<int64_t>(engine.backend().peak_memory_bytes());
  result.load_s = load_s;
  result.weights_s = weights_s;
  result.prepare_s = prepare_s;
  result.accuracy_s = accuracy_s;
  result.tiers_s = tiers_s;
  emit(result);
  return 0;
}

}  // namespace
}  // namespace soartune::engine::worker

int main(int argc, char** argv) {
  spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));
  CLI::App app{"soartune-worker: run one trial, print one JSON result"};
  std::string trial, backend, checkpoint_dir;
  int threads = 0;
  bool progress = false;
  app.add_option("--trial", trial, "trial file (docs/FORMATS.md section 3)")->required();
  app.add_flag("--progress", progress,
               "before the result, print a progress line after the accuracy and after each tier (docs/FORMATS.md "
               "section 4; soartuned reads them to stop hopeless trials early)");
  app.add_option("--write-checkpoint", checkpoint_dir,
                 "instead of measuring: write the trial's model, quantised under its launch config, as a GPTQ checkpoint into DIR");
  app.add_option("--backend", backend, "override the trial's backend")->check(CLI::IsMember({"auto", "cpu", "cuda"}));
  app.add_option("--threads", threads, "CPU backend threads (0: all cores)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);   // --help
    soartune::WorkerResult r;
    r.error = {soartune::FailureKind::kInvalidConfig, "argv", e.what()};
    std::cout << soartune::to_json(r) << std::endl;
    app.exit(e);
    return 2;
  }
  try {
    if (!checkpoint_dir.empty()) return soartune::engine::worker::write_checkpoint(trial, checkpoint_dir);
    return soartune::engine::worker::run(trial, backend, threads, progress);
  } catch (const std::bad_alloc& e) {
    soartune::WorkerResult r;
    r.error = {soartune::FailureKind::kOutOfMemory, "", std::string("host memory: ") + e.what()};
    std::cout << soartune::to_json(r) << std::endl;
    return 1;
  } catch (const std::exception& e) {
    soartune::WorkerResult r;
    r.error = {soartune::FailureKind::kWorkerError, "", e.what()};
    std::cout << soartune::to_json(r) << std::endl;
    return 1;
  }
}
