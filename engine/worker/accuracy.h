// Relative accuracy of a candidate config against the reference config (docs/FORMATS.md section 3).
//   task:     the set has true continuations; accuracy = teacher-forced next-token top-1 == true token;
//             relative_pct = candidate accuracy / reference accuracy * 100.
//   fidelity: no true continuations; the reference greedily continues each prompt (G) and records its own
//             teacher-forced top-1 along prompt + G (R); relative_pct = % of positions where the
//             candidate's teacher-forced top-1 along prompt + G equals R (the reference scores 100).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/engine.h"
#include "engine/worker/trial.h"

namespace soartune::engine::worker {

struct AccuracyItem {
  std::vector<int32_t> prompt;
  std::vector<int32_t> continuation;   // true continuation (task); empty for fidelity
};

struct AccuracySet {
  std::string metric;                  // "task" or "fidelity"
  int continuation_len = 0;            // fidelity: tokens the reference generates
  std::vector<AccuracyItem> items;
  int max_len() const;                 // longest prompt + continuation
  int max_scored() const;              // longest continuation scored by teacher forcing
};

Result<AccuracySet> load_accuracy_set(const AccuracySpec& spec, uint64_t seed, int vocab);

struct ReferenceOutputs {
  std::string metric;
  double accuracy = 0;                             // task: the reference's accuracy
  int64_t positions = 0;
  std::vector<std::vector<int32_t>> continuations; // fidelity: G per item
  std::vector<std::vector<int32_t>> top1;          // fidelity: R per item; task: the reference's teacher-forced
                                                   // top-1 along the true continuation (absent in older files)

  nlohmann::json to_json() const;
  static Result<ReferenceOutputs> from_json(const nlohmann::json& j);
};

struct AccuracyResult {
  std::string metric;
  double relative_pct = 0;
  double candidate = 0;
  double reference = 0;
  int64_t positions = 0;
  // Positions where the candidate's teacher-forced top-1 equals the reference's, percent; -1 when the
  // reference outputs hold no top-1 (a reference file written before they did).
  double top1_agreement_pct = -1;
  // FNV-1a 64 of the candidate's teacher-forced top-1 tokens, item by item in set order, as 16 hex digits: two
  // runs with equal digests chose the same token at every measured position.
  std::string top1_digest;
};

// The digest of AccuracyResult::top1_digest.
std::string top1_digest(const std::vector<std::vector<int32_t>>& top1);

Result<ReferenceOutputs> compute_reference(Engine& engine, const AccuracySet& set);
Result<AccuracyResult> evaluate_accuracy(Engine& engine, const AccuracySet& set, const ReferenceOutputs& ref);

}  // namespace soartune::engine::worker
