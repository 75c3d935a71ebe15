#include "engine/workload.h"

#include <algorithm>
#include <filesystem>
#include <random>

namespace soartune::engine {

int Workload::max_total_len() const {
  int m = 0;
  for (const auto& r : requests) m = std::max(m, r.input_len + r.output_len);
  return m;
}

int Workload::total_requests() const {
  int n = 0;
  for (const auto& r : requests) n += r.count;
  return n;
}

namespace {

// The daemon's bound on each of input_len, output_len and count (daemon/job_spec.cc): the sums the engine
// forms from them (longest sequence, total requests) stay far from int overflow.
constexpr int kMaxRequestField = 1 << 20;
constexpr int64_t kMaxTotalRequests = 1 << 24;

Status positive_int(const YAML::Node& n, const std::string& field, int lo, int* out) {
  int v = 0;
  if (!n || !n.IsScalar() || !YAML::convert<int>::decode(n, v) || v < lo || v > kMaxRequestField)
    return Status::Invalid(field + ": " + (n && n.IsScalar() ? n.Scalar() : std::string("missing")) +
                           " is not an integer in " + std::to_string(lo) + ".." + std::to_string(kMaxRequestField));
  *out = v;
  return Status::Ok();
}

}  // namespace

Result<Workload> parse_workload(const YAML::Node& node, const std::string& field) {
  if (!node || !node.IsMap()) return Status::Invalid(field + ": must be a mapping with name and requests");
  Workload w;
  w.name = node["name"] && node["name"].IsScalar() ? node["name"].Scalar() : "inline";
  const YAML::Node reqs = node["requests"];
  if (!reqs || !reqs.IsSequence() || reqs.size() == 0)
    return Status::Invalid(field + ".requests: must be a non-empty list of {name, input_len, output_len, count}");
  int64_t total = 0;
  for (std::size_t i = 0; i < reqs.size(); ++i) {
    const std::string f = field + ".requests[" + std::to_string(i) + "]";
    const YAML::Node r = reqs[i];
    if (!r.IsMap()) return Status::Invalid(f + ": must be a mapping {name, input_len, output_len, count}");
    RequestClass c;
    c.name = r["name"] && r["name"].IsScalar() ? r["name"].Scalar() : "class" + std::to_string(i);
    if (Status s = positive_int(r["input_len"], f + ".input_len", 1, &c.input_len); !s.ok()) return s;
    if (Status s = positive_int(r["output_len"], f + ".output_len", 1, &c.output_len); !s.ok()) return s;
    c.count = 1;
    if (r["count"])
      if (Status s = positive_int(r["count"], f + ".count", 1, &c.count); !s.ok()) return s;
    total += c.count;
    if (total > kMaxTotalRequests)
      return Status::Invalid(field + ".requests: more than " + std::to_string(kMaxTotalRequests) + " requests in all");
    w.requests.push_back(c);
  }
  return w;
}

Result<Workload> load_workload_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return Status::NotFound("workload: file " + path + " not found");
  YAML::Node n;
  try {
    n = YAML::LoadFile(path);
  } catch (const std::exception& e) {
    return Status::Invalid("workload: " + path + " is not YAML: " + e.what());
  }
  if (n.IsMap() && n["workload"]) n = n["workload"];
  return parse_workload(n);
}

std::vector<WorkloadRequest> expand_workload(const Workload& w, uint64_t seed, int vocab) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(1, std::max(1, vocab - 1));
  std::vector<WorkloadRequest> out;
  for (const auto& c : w.requests) {
    for (int k = 0; k < c.count; ++k) {
      WorkloadRequest r;
      r.class_name = c.name;
      r.output_len = c.output_len;
      r.prompt.resize(static_cast<std::size_t>(c.input_len));
      for (auto& t : r.prompt) t = tok(rng);
      out.push_back(std::move(r));
    }
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

}  // namespace soartune::engine
