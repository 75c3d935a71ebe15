#include "engine/worker/accuracy.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <random>
#include <stdexcept>
#include <utility>

namespace soartune::engine::worker {

int AccuracySet::max_len() const {
  int m = 0;
  for (const auto& it : items)
    m = std::max(m, static_cast<int>(it.prompt.size() + std::max<std::size_t>(it.continuation.size(), continuation_len)));
  return m;
}

int AccuracySet::max_scored() const {
  int m = continuation_len;
  for (const auto& it : items) m = std::max(m, static_cast<int>(it.continuation.size()));
  return m;
}

Result<AccuracySet> load_accuracy_set(const AccuracySpec& spec, uint64_t seed, int vocab) {
  AccuracySet s;
  s.continuation_len = spec.continuation_len;
  if (spec.set == "synthetic") {
    s.metric = "fidelity";
    std::mt19937_64 rng(seed * 7919 + 17);
    std::uniform_int_distribution<int32_t> tok(1, std::max(1, vocab - 1));
    for (int i = 0; i < spec.samples; ++i) {
      AccuracyItem it;
      it.prompt.resize(static_cast<std::size_t>(spec.prompt_len));
      for (auto& t : it.prompt) t = tok(rng);
      s.items.push_back(std::move(it));
    }
    return s;
  }
  std::ifstream in(spec.set);
  if (!in) return Status::Invalid("accuracy.set: " + spec.set + " cannot be opened");
  std::string line;
  int lineno = 0;
  bool all_have_cont = true;
  while (static_cast<int>(s.items.size()) < spec.samples && std::getline(in, line)) {
    ++lineno;
    if (line.empty()) continue;
    AccuracyItem it;
    // Token ids must be JSON integers, read at 64 bits and range-checked before they narrow: 2^32 + 5 is not
    // token 5, and 1.5 is not token 1.
    std::vector<int64_t> prompt, continuation;
    auto ids = [](const nlohmann::json& a, const char* key, std::vector<int64_t>* out) {
      if (!a.is_array()) throw std::invalid_argument(std::string(key) + " is not an array");
      for (const auto& t : a) {
        if (!t.is_number_integer()) throw std::invalid_argument(std::string(key) + " holds " + t.dump() + ", not a token id");
        out->push_back(t.is_number_unsigned() && t.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX) ? INT64_MAX : t.get<int64_t>());
      }
    };
    try {
      const auto j = nlohmann::json::parse(line);
      ids(j.at("prompt_ids"), "prompt_ids", &prompt);
      if (j.contains("continuation_ids")) ids(j["continuation_ids"], "continuation_ids", &continuation);
    } catch (const std::exception& e) {
      return Status::Invalid("accuracy.set: " + spec.set + " line " + std::to_string(lineno) + ": " + e.what());
    }
    for (const auto* v : {&prompt, &continuation})
      for (int64_t t : *v)
        if (t < 0 || t >= vocab)
          return Status::Invalid("accuracy.set: " + spec.set + " line " + std::to_string(lineno) + ": token " + std::to_string(t) +
                                 " outside the model's vocabulary of " + std::to_string(vocab));
    it.prompt.assign(prompt.begin(), prompt.end());
    it.continuation.assign(continuation.begin(), continuation.end());
    if (it.prompt.empty()) return Status::Invalid("accuracy.set: " + spec.set + " line " + std::to_string(lineno) + ": empty prompt_ids");
    all_have_cont = all_have_cont && it.continuation.size() >= 1;
    s.items.push_back(std::move(it));
  }
  if (s.items.empty()) return Status::Invalid("accuracy.set: " + spec.set + " has no samples");
  s.metric = all_have_cont ? "task" : "fidelity";
  if (!all_have_cont)
    for (auto& it : s.items) it.continuation.clear();
  return s;
}

std::string top1_digest(const std::vector<std::vector<int32_t>>& top1) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](uint32_t v) {
    for (int b = 0; b < 4; ++b) h = (h ^ ((v >> (8 * b)) & 0xffu)) * 1099511628211ull;
  };
  for (const auto& item : top1) {
    mix(static_cast<uint32_t>(item.size()));   // item boundaries count: [1 2][3] differs from [1][2 3]
    for (int32_t t : item) mix(static_cast<uint32_t>(t));
  }
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

nlohmann::json ReferenceOutputs::to_json() const {
  nlohmann::json j = {{"metric", metric}, {"positions", positions}};
  if (metric == "task") {
    j["accuracy"] = accuracy;
    j["top1"] = top1;
  } else {
    j["continuations"] = continuations;
    j["top1"] = top1;
  }
  return j;
}

Result<ReferenceOutputs> ReferenceOutputs::from_json(const nlohmann::json& j) {
  ReferenceOutputs r;
  try {
    r.metric = j.at("metric").get<std::string>();
    r.positions = j.at("positions").get<int64_t>();
    if (r.metric == "task") {
      r.accuracy = j.at("accuracy").get<double>();
      if (j.contains("top1")) r.top1 = j.at("top1").get<std::vector<std::vector<int32_t>>>();
    } else if (r.metric == "fidelity") {
      r.continuations = j.at("continuations").get<std::vector<std::vector<int32_t>>>();
      r.top1 = j.at("top1").get<std::vector<std::vector<int32_t>>>();
    } else {
      return Status::Invalid("reference.read: metric " + r.metric + " is not one of task, fidelity");
    }
  } catch (const std::exception& e) {
    return Status::Invalid(std::string("reference.read: not a reference file: ") + e.what());
  }
  return r;
}

namespace {

// Runs the engine until idle and returns the finished outputs in the order of `ids`.
Result<std::vector<std::vector<int32_t>>> run_and_collect(Engine& e, const std::vector<int64_t>& ids) {
  if (Status s = e.run_until_idle(); !s.ok()) return s;
  std::vector<std::vector<int32_t>> out(ids.size());
  for (auto& f : e.take_finished()) {
    const auto it = std::find(ids.begin(), ids.end(), f.id);
    if (it != ids.end()) out[static_cast<std::size_t>(it - ids.begin())] = std::move(f.output);
  }
  return out;
}

// Teacher-forced top-1 along prompt + continuation for every item, batched through the scheduler.
Result<std::vector<std::vector<int32_t>>> teacher_forced(Engine& e, const std::vector<AccuracyItem>& items,
                                                         const std::vector<std::vector<int32_t>>* conts) {
  std::vector<int64_t> ids;
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto id = e.add_teacher_forced(items[i].prompt, conts ? (*conts)[i] : items[i].continuation);
    if (!id.ok()) return id.status();
    ids.push_back(id.value());
  }
  return run_and_collect(e, ids);
}

struct TaskHits {
  int64_t hits = 0, positions = 0;
  std::vector<std::vector<int32_t>> top1;   // per item, along its true continuation
};

// Next-token accuracy on the true continuations (the `task` metric).
Result<TaskHits> task_hits(Engine& e, const AccuracySet& set) {
  auto top1 = teacher_forced(e, set.items, nullptr);
  if (!top1.ok()) return top1.status();
  TaskHits h;
  for (std::size_t i = 0; i < set.items.size(); ++i)
    for (std::size_t k = 0; k < set.items[i].continuation.size(); ++k) {
      h.hits += top1.value()[i][k] == set.items[i].continuation[k];
      ++h.positions;
    }
  h.top1 = std::move(top1).value();
  return h;
}

// Percent of positions where `a` and `b` hold the same token (over the shorter of each pair).
double agreement_pct(const std::vector<std::vector<int32_t>>& a, const std::vector<std::vector<int32_t>>& b) {
  int64_t same = 0, n = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i)
    for (std::size_t k = 0; k < a[i].size() && k < b[i].size(); ++k) {
      same += a[i][k] == b[i][k];
      ++n;
    }
  return n ? 100.0 * static_cast<double>(same) / static_cast<double>(n) : 0.0;
}

}  // namespace

Result<ReferenceOutputs> compute_reference(Engine& e, const AccuracySet& set) {
  ReferenceOutputs r;
  r.metric = set.metric;
  if (set.metric == "task") {
    auto hits = task_hits(e, set);
    if (!hits.ok()) return hits.status();
    r.positions = hits.value().positions;
    r.accuracy = r.positions ? static_cast<double>(hits.value().hits) / r.positions : 0;
    r.top1 = std::move(hits.value().top1);
    return r;
  }
  std::vector<int64_t> ids;
  for (const auto& it : set.items) {
    auto id = e.add_request(it.prompt, set.continuation_len);
    if (!id.ok()) return id.status();
    ids.push_back(id.value());
  }
  auto conts = run_and_collect(e, ids);
  if (!conts.ok()) return conts.status();
  r.continuations = std::move(conts).value();
  auto top1 = teacher_forced(e, set.items, &r.continuations);
  if (!top1.ok()) return top1.status();
  r.top1 = std::move(top1).value();
  for (const auto& t : r.top1) r.positions += static_cast<int64_t>(t.size());
  return r;
}

Result<AccuracyResult> evaluate_accuracy(Engine& e, const AccuracySet& set, const ReferenceOutputs& ref) {
  if (ref.metric != set.metric)
    return Status::Invalid("reference.read: the reference holds metric " + ref.metric + ", this accuracy set gives " + set.metric);
  AccuracyResult a;
  a.metric = set.metric;
  if (set.metric == "task") {
    auto hits = task_hits(e, set);
    if (!hits.ok()) return hits.status();
    a.positions = hits.value().positions;
    a.candidate = a.positions ? static_cast<double>(hits.value().hits) / a.positions : 0;
    a.reference = ref.accuracy;
    a.relative_pct = ref.accuracy > 0 ? 100.0 * a.candidate / ref.accuracy : 0;
    if (ref.top1.size() == set.items.size()) a.top1_agreement_pct = agreement_pct(hits.value().top1, ref.top1);
    a.top1_digest = top1_digest(hits.value().top1);
    return a;
  }
  // The reference file is read back from disk: its two lists must both hold a row per sample.
  if (ref.continuations.size() != set.items.size() || ref.top1.size() != set.items.size())
    return Status::Invalid("reference.read: the reference has " + std::to_string(ref.continuations.size()) + " continuations and " +
                           std::to_string(ref.top1.size()) + " top-1 rows, accuracy.samples gives " + std::to_string(set.items.size()));
  auto top1 = teacher_forced(e, set.items, &ref.continuations);
  if (!top1.ok()) return top1.status();
  int64_t hits = 0;
  for (std::size_t i = 0; i < set.items.size(); ++i)
    for (std::size_t k = 0; k < ref.top1[i].size() && k < top1.value()[i].size(); ++k) {
      hits += top1.value()[i][k] == ref.top1[i][k];
      ++a.positions;
    }
  a.candidate = a.positions ? static_cast<double>(hits) / a.positions : 0;
  a.reference = 1.0;
  a.relative_pct = 100.0 * a.candidate;
  a.top1_agreement_pct = a.relative_pct;   // fidelity is top-1 agreement along the reference's own text
  a.top1_digest = top1_digest(top1.value());
  return a;
}

}  // namespace soartune::engine::worker
