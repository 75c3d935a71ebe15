// Named request sets replayed at each tier: classes of requests with a prompt length, a fixed output
// length (generated to the end, as with ignore_eos) and a count. Prompts are random token ids from a seed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

#include "core/status.h"

namespace soartune::engine {

struct RequestClass {
  std::string name;
  int input_len = 0;
  int output_len = 0;
  int count = 0;
};

struct Workload {
  std::string name;
  std::vector<RequestClass> requests;

  int max_total_len() const;          // longest input + output
  int total_requests() const;
};

struct WorkloadRequest {
  std::string class_name;
  std::vector<int32_t> prompt;
  int output_len = 0;
};

// `node` is the `workload:` mapping (name, requests); `field` prefixes error messages ("workload").
Result<Workload> parse_workload(const YAML::Node& node, const std::string& field = "workload");
// A YAML file holding that mapping, either at top level or under a `workload:` key.
Result<Workload> load_workload_file(const std::string& path);

// Every request of the workload in a seed-determined interleaved order, prompts drawn uniformly from
// token ids [1, vocab) (0 is often a special token).
std::vector<WorkloadRequest> expand_workload(const Workload& w, uint64_t seed, int vocab);

}  // namespace soartune::engine
