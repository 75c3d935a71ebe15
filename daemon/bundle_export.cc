#include "daemon/bundle_export.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "core/knob_value.h"
#include "daemon/worker_process.h"
#include "search/sglang_bundle.h"

namespace soartune::daemon {
namespace fs = std::filesystem;
namespace {

Status write_file(const fs::path& p, const std::string& text, bool executable) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Status::Internal("cannot write " + p.string());
  if (executable) {
    std::error_code ec;
    fs::permissions(p, fs::perms::owner_exec | fs::perms::group_exec | fs::perms::others_exec,
                    fs::perm_options::add, ec);
  }
  return Status::Ok();
}

// A path component made only of the characters job ids use, whatever the store holds.
std::string safe_component(const std::string& s) {
  std::string out;
  for (char ch : s)
    out += ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') || ch == '-')
               ? ch
               : '_';
  return out.empty() ? std::string("_") : out;
}

search::BundleSummary summary_of(const TrialRecord& t, const std::string& band) {
  search::BundleSummary s;
  s.predicted_band = band;
  char line[256];
  std::snprintf(line, sizeof line, "score %.3f (gate factor %.2f)", t.score, t.gate);
  s.measured.push_back(line);
  std::snprintf(line, sizeof line, "relative accuracy %.2f%% (%s metric, against the job's 16-bit reference)",
                t.relative_accuracy, t.accuracy_metric.c_str());
  s.measured.push_back(line);
  for (const TierRecord& tier : t.tiers) {
    const std::string conc = tier.concurrency == 0 ? std::string("unlimited") : std::to_string(tier.concurrency);
    std::snprintf(line, sizeof line, "%s (concurrency %s): %.3f s, %.1f output tokens/s, TTFT p50 %.1f ms, TPOT p50 %.2f ms",
                  tier.tier.c_str(), conc.c_str(), tier.duration_s, tier.output_tokens_per_s, tier.ttft_p50_ms,
                  tier.tpot_p50_ms);
    s.measured.push_back(line);
  }
  if (!t.device.empty()) s.measured.push_back("device: " + t.device);
  return s;
}

// Runs the worker's checkpoint mode and reads its one JSON line: {"ok": true, "dir", "files"} or
// {"ok": false, "error"} (exit 0 / 2).
Status write_checkpoint(const DaemonConfig& cfg, const JobSpec& spec, const fs::path& trial_file,
                        const fs::path& dir) {
  ProcessSpec ps;
  ps.argv = {cfg.worker, "--trial", trial_file.string(), "--write-checkpoint", dir.string()};
  ps.cwd = trial_file.parent_path().string();
  ps.timeout_s = spec.trial_timeout_s.value_or(cfg.trial_timeout_s);
  ProcessResult r = run_process(ps);
  const std::string what = "checkpoint: soartune-worker --write-checkpoint";
  if (!r.started) return Status::Internal(what + " could not be started: " + r.spawn_error);
  if (r.timed_out) return Status::Internal(what + " did not finish within " + std::to_string(ps.timeout_s) + " s");
  // The last line that opens a JSON object is the answer; log lines before it are tolerated.
  std::string last;
  size_t pos = 0;
  while (pos < r.out.size()) {
    size_t nl = r.out.find('\n', pos);
    if (nl == std::string::npos) nl = r.out.size();
    if (r.out[pos] == '{') last = r.out.substr(pos, nl - pos);
    pos = nl + 1;
  }
  const std::string tail = last_lines(r.err_tail, 5, 2048);
  nlohmann::json j = nlohmann::json::parse(last, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("ok") || !j["ok"].is_boolean()) {
    std::string how = r.exited ? "exit " + std::to_string(r.exit_code) : signal_name(r.term_signal);
    return Status::Internal(what + " gave no result (" + how + ")" + (tail.empty() ? "" : ": " + tail));
  }
  if (!j["ok"].get<bool>()) {
    std::string err = "(no reason given)";
    if (j.contains("error") && j["error"].is_string()) err = j["error"].get<std::string>();
    else if (j.contains("error") && j["error"].is_object() && j["error"].contains("message") &&
             j["error"]["message"].is_string())
      err = j["error"]["message"].get<std::string>();
    return Status::Internal(what + " failed: " + err);
  }
  if (!r.exited || r.exit_code != 0) return Status::Internal(what + " said ok but exited abnormally");
  std::error_code ec;
  if (!fs::is_directory(dir, ec) || fs::is_empty(dir, ec))
    return Status::Internal(what + " said ok but wrote nothing into " + dir.string());
  return Status::Ok();
}

}  // namespace

Result<WrittenBundle> write_sglang_bundle(const DaemonConfig& cfg, const JobSpec& spec, const TrialRecord& trial,
                                         const std::string& predicted_band) {
  const search::ServingSpec serving = spec.serving.value_or(search::ServingSpec{});
  const Config launch = config_from_text(trial.params);
  const bool quantised = search::quantises_weights(launch);
  search::ExportSource src{trial.job_id, trial.number, spec.model, trial.engine_build};
  Result<search::BundleText> text =
      search::sglang_bundle(launch, src, serving, summary_of(trial, predicted_band),
                            quantised ? "checkpoint" : "");
  if (!text.ok()) return text.status();

  const int64_t ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                         std::chrono::system_clock::now().time_since_epoch())
                         .count();
  const std::string name = "trial-" + std::to_string(trial.number) + "-" + std::to_string(ms);
  const fs::path parent = fs::path(cfg.work_dir) / "bundles" / safe_component(trial.job_id);
  const fs::path dir = parent / name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Status::Internal("cannot create " + dir.string() + ": " + ec.message());
  if (Status s = write_file(dir / "prepare_env.sh", text.value().prepare_env, true); !s.ok()) return s;
  if (Status s = write_file(dir / "README.md", text.value().readme, false); !s.ok()) return s;
  if (quantised) {
    // The trial file stays beside the bundle, not in it: it is the worker's input, not part of a submission.
    const fs::path trial_file = parent / (name + ".trial.yaml");
    // The job's quantised-weights cache (job_manager's <work_dir>/<job>/quantized): a GPTQ trial's checkpoint is
    // then the very weights the trial measured, not a second quantisation.
    ReferenceFile ref;
    ref.quant_cache = (fs::path(cfg.work_dir) / trial.job_id / "quantized").string();
    if (Status s = write_file(trial_file, trial_yaml(spec, launch, ref), false); !s.ok()) return s;
    if (Status s = write_checkpoint(cfg, spec, trial_file, dir / "checkpoint"); !s.ok()) return s;
  }

  WrittenBundle out;
  out.dir = fs::absolute(dir).string();
  out.readme = text.value().readme;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    out.files.push_back({fs::relative(e.path(), dir).generic_string(), fs::absolute(e.path()).string(),
                         static_cast<uint64_t>(e.file_size())});
  }
  if (ec) return Status::Internal("cannot list " + dir.string() + ": " + ec.message());
  std::sort(out.files.begin(), out.files.end(),
            [](const WrittenFile& a, const WrittenFile& b) { return a.path < b.path; });
  return out;
}

}  // namespace soartune::daemon
