// The one result of a trial, as soartune-worker prints it (one JSON line on stdout, docs/FORMATS.md section 4)
// and the daemon reads it back. The worker fills a WorkerResult and prints to_json(); the daemon calls
// parse_worker_output() on the worker's stdout, which it treats as untrusted input: every field is
// type-checked, a wrong type is an error naming the field (never an exception), strings are capped on
// character boundaries.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "core/failure_kind.h"
#include "core/status.h"

namespace soartune {

struct LatencyPercentiles {
  double p50 = 0, p90 = 0, p99 = 0;
};

// One closed-loop tier (c1, c8, cinf) over the workload's requests.
struct TierMeasurement {
  std::string tier;                // "c1", "c8", "cinf"
  int concurrency = 0;             // 0: unlimited
  double duration_s = 0;
  int64_t requests = 0, output_tokens = 0;
  LatencyPercentiles ttft_ms, tpot_ms;
  double output_tokens_per_s = 0;
};

struct AccuracyMeasurement {
  std::string metric;              // "task" | "fidelity"
  double relative_pct = 0;         // candidate against the reference config, percent
  double candidate = 0, reference = 0;
  int64_t positions = 0;
  bool proxy = false;              // measured on proxy_model, not on the trial's own model
  std::string proxy_model;         // "hf:<dir>" when proxy
  // Percent of measured positions where the candidate's teacher-forced top-1 equals the reference config's
  // (task: along the true continuation; fidelity: = relative_pct); < 0: not reported.
  double top1_agreement_pct = -1;
  // FNV-1a 64 (16 hex digits) of the candidate's teacher-forced top-1 at every measured position: equal
  // digests = the same token chosen everywhere (e.g. a checkpoint loaded back against the run that wrote it).
  std::string top1_digest;
};

// How the trial's weights were quantised (absent from results of workers that did not say).
struct QuantizationFacts {
  std::string method;              // "rtn" | "gptq"; empty: not reported
  int64_t calibration_sequences = 0;   // gptq: rows calibrated on (0 when read from the cache)
  int64_t held_out_skipped = 0;    // gptq: calibration rows left out because their prompt is a measured row's
  bool cached = false;             // gptq: weights read from the job's quantised-weights cache
  double seconds = 0;
  std::string solver;              // gptq computed in this trial: "cpu" | "cuda"; empty otherwise
};

// A kernel choice the engine made for one op and shape (tiles, splits, variant, grid), as the plan step
// returned it.
struct KernelPlan {
  std::string op;                  // "gemv", "attention_decode", ...
  std::string shape;               // e.g. "m1 n4096 k4096"
  std::map<std::string, std::string> choice;   // e.g. {"variant": "m1w8u2b4"}
};

struct WorkerError {
  FailureKind kind = FailureKind::kWorkerError;   // kInvalidConfig, kOutOfMemory or kWorkerError
  std::string field;               // the offending field, for kInvalidConfig ("launch.kv_cache_dtype")
  std::string message;
};

struct WorkerResult {
  bool ok = false;
  WorkerError error;               // when !ok
  std::string backend, device, engine_build;
  std::vector<TierMeasurement> tiers;
  AccuracyMeasurement accuracy;
  QuantizationFacts quantization;
  int64_t peak_memory_bytes = 0;
  double load_s = 0, accuracy_s = 0, tiers_s = 0;   // where the worker's time went
  // Parts of load_s: reading or synthesising the weights, and preparing the timed engine (the backend's upload,
  // repacking, kernel plans and graphs); the rest of it is quantisation (quantization.seconds) and set-up.
  double weights_s = 0, prepare_s = 0;
  std::vector<KernelPlan> plans;
};

// The variables a worker inherits that change which device runs or how the runtime schedules, so two trials
// with different values are not comparable: the daemon records the values it started the worker with.
inline constexpr std::array<const char*, 8> kTimingEnvironment = {
    "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_MAX_CONNECTIONS", "CUDA_LAUNCH_BLOCKING", "CUDA_MODULE_LOADING",
    "OMP_NUM_THREADS",      "OMP_PROC_BIND",               "SOARTUNE_DEVICE",      "NVIDIA_TF32_OVERRIDE"};

// What else a worker process inherits from the daemon: what a program needs to start and find its libraries,
// nothing that changes what it measures.
inline constexpr std::array<const char*, 9> kWorkerBaseEnvironment = {
    "PATH", "HOME", "USER", "LANG", "LC_ALL", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "CUDA_HOME"};

// Longest string kept from a worker's result (an error message, a device name): longer ones are cut on a
// character boundary and say so.
inline constexpr size_t kMaxResultString = 4096;

// How many of the last lines that open a JSON object parse_worker_output() tries as the start of the result.
inline constexpr int kMaxResultLineTries = 16;

// One line of JSON, no trailing newline.
std::string to_json(const WorkerResult& r);
// Reads the result out of the worker's whole stdout: the last line that opens a JSON object (log lines before
// it are tolerated; of the lines that open an object, the last kMaxResultLineTries are tried). Errors
// (kInvalidArgument) say what is wrong: "garbage output: printed nothing on stdout", "garbage output: stdout is
// not a JSON object (starts with '...')", or "bad worker result: <field>: expected <type>, got <type>" for a
// result of the wrong shape.
Result<WorkerResult> parse_worker_output(std::string_view stdout_text);

}  // namespace soartune
