#include "engine/worker/quantize_trial.h"

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <sstream>

#include <spdlog/spdlog.h>

#include "engine/gptq_quantize.h"
#include "engine/quant_cache.h"
#include "engine/quantize.h"
#include "engine/worker/accuracy.h"

namespace soartune::engine::worker {

// Calibration sequences: a named set's first rows, or the accuracy set's rows after the measured ones. Either
// way no row whose prompt is a measured row's prompt is used (a named set may be the accuracy file itself, or
// hold copies of its rows): GPTQ fitted to the rows it is judged on would overstate its accuracy.
Result<CalibrationRows> calibration_sequences(const TrialSpec& t, int vocab) {
  auto measured = load_accuracy_set(t.accuracy, t.seed, vocab);
  if (!measured.ok()) return Status::Invalid("accuracy.set: " + measured.status().message);
  std::set<std::vector<int32_t>> held_out;
  for (const AccuracyItem& it : measured.value().items) held_out.insert(it.prompt);

  AccuracySpec spec = t.accuracy;
  int skip = t.accuracy.samples;
  if (!t.calibration.set.empty()) {
    spec.set = t.calibration.set;
    skip = 0;
  }
  // Enough rows to make up for every measured row the named set might repeat.
  spec.samples = skip + t.calibration.samples + static_cast<int>(held_out.size());
  auto set = load_accuracy_set(spec, t.seed, vocab);
  if (!set.ok()) return Status::Invalid("calibration.set: " + set.status().message);
  CalibrationRows rows;
  const auto& items = set.value().items;
  for (std::size_t i = static_cast<std::size_t>(skip);
       i < items.size() && static_cast<int>(rows.sequences.size()) < t.calibration.samples; ++i) {
    if (held_out.count(items[i].prompt)) {
      ++rows.held_out_skipped;
      continue;
    }
    std::vector<int32_t> s = items[i].prompt;
    s.insert(s.end(), items[i].continuation.begin(), items[i].continuation.end());
    rows.sequences.push_back(std::move(s));
  }
  if (rows.sequences.empty())
    return Status::Invalid("calibration.samples: " + spec.set + " has no rows besides the " +
                           std::to_string(held_out.size()) + " the accuracy is measured on; name a calibration.set");
  return rows;
}

namespace {

// Everything the quantised weights depend on.
std::string cache_key(const TrialSpec& t) {
  std::ostringstream k;
  const LaunchConfig& l = t.launch;
  k << "model=" << t.model << ";seed=" << t.seed << ";method=" << l.quant_method << ";bits=" << l.weight_bits
    << ";group=" << l.weight_group_size << ";attn=" << l.attn_weight_bits << ";edge=" << l.edge_layers_bits
    << ";softmax=" << l.softmax_attn_bits << ";lightning=" << l.lightning_attn_bits << ";mlp=" << l.mlp_bits
    << ";lm_head=" << l.lm_head_bits << ";overrides=" << YAML::Dump(l.layer_overrides_yaml())
    << ";calibration=" << (t.calibration.set.empty() ? t.accuracy.set + "@" + std::to_string(t.accuracy.samples) : t.calibration.set)
    << ";samples=" << t.calibration.samples << ";damp=" << t.calibration.damp_pct
    << ";held_out=" << t.accuracy.set << "@" << t.accuracy.samples;   // rows left out of a named set
  if (t.accuracy.set == "synthetic" && t.calibration.set.empty())
    k << ";prompt_len=" << t.accuracy.prompt_len << ";continuation_len=" << t.accuracy.continuation_len;
  return k.str();
}

bool quantises(const LaunchConfig& l, int layers) {
  if (l.lm_head_bits < 16) return true;
  for (int i = 0; i < layers; ++i)
    for (ProjKind k : {ProjKind::kAttn, ProjKind::kLightningAttn, ProjKind::kMlp})
      if (l.weight_bits_for(i, layers, k) < 16) return true;
  return false;
}

}  // namespace

Result<QuantizeReport> quantize_for_trial(ModelWeights& w, const TrialSpec& t, const std::string& backend) {
  const auto t0 = std::chrono::steady_clock::now();
  QuantizeReport r;
  r.method = t.launch.quant_method;
  auto done = [&]() -> Result<QuantizeReport> {
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return r;
  };
  if (r.method != "gptq" || !quantises(t.launch, static_cast<int>(w.layers.size()))) {
    if (Status s = quantize_model(w, t.launch); !s.ok()) return s;
    return done();
  }
  // Only the trial file names the cache (the daemon gives each job one under its work dir): nothing in the
  // worker's environment decides where weights come from.
  const std::string& dir = t.calibration.cache_dir;
  const std::string key = cache_key(t);
  if (!dir.empty()) {
    r.cache_file = quantized_cache_file(dir, key);
    auto hit = load_quantized(w, r.cache_file, key);
    if (hit.ok() && hit.value()) {
      r.cached = true;
      spdlog::info("gptq: quantised weights from the cache {}", r.cache_file);
      return done();
    }
  }
  auto rows = calibration_sequences(t, w.config.vocab);
  if (!rows.ok()) return rows.status();
  r.calibration_sequences = static_cast<int>(rows.value().sequences.size());
  r.held_out_skipped = rows.value().held_out_skipped;
  if (r.held_out_skipped > 0)
    spdlog::info("gptq: {} calibration rows left out: their prompts are measured rows", r.held_out_skipped);
  GptqOptions options;
  options.damp_pct = t.calibration.damp_pct;
  std::unique_ptr<GptqSolver> solver;
  if (backend == "cuda") {
    auto gpu = make_cuda_gptq_solver(0);
    if (gpu.ok())
      solver = std::move(gpu).value();
    else
      spdlog::warn("gptq: on the CPU, the GPU solver cannot start: {}", gpu.status().message);
  }
  if (!solver) solver = make_cpu_gptq_solver();
  r.solver = solver->name();
  if (Status s = gptq_quantize_model(w, t.launch, rows.value().sequences, options, solver.get()); !s.ok()) return s;
  const GptqStageSeconds& st = solver->seconds();
  spdlog::info("gptq on the {}: {} linears, hessians {:.2f} s, cholesky {:.2f} s, columns {:.2f} s, copies {:.2f} s, "
               "forward {:.2f} s ({} products)", r.solver, st.linears, st.hessian, st.cholesky, st.columns, st.transfer,
               st.forward, st.forwards);
  if (!dir.empty()) {
    if (Status s = save_quantized(w, r.cache_file, key); !s.ok()) spdlog::warn("gptq: not cached: {}", s.message);
  }
  return done();
}

}  // namespace soartune::engine::worker
