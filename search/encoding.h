// Maps configs of a search space to points of the unit cube for the GP models, and back from quasi-random
// points to configs. Numeric knobs (int, log int, power of two, numeric choices) become one ordinal column in
// [0, 1] on the scale where their effect is smooth (log for log ints, log2 for powers of two, rank for
// numeric choices); string choices become one-hot columns; bools one 0/1 column. A parameter that is inactive
// (its `when` clause fails) is encoded at a fixed value (0.5 ordinal, all-zero one-hot) so that configs that
// differ only in an inactive knob encode identically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "core/knob_value.h"
#include "search/space.h"

namespace soartune::search {

class Encoding {
 public:
  explicit Encoding(std::vector<ParamSpec> params);

  int dims() const { return dims_; }                       // encoded columns
  int num_params() const { return static_cast<int>(params_.size()); }
  const std::vector<ParamSpec>& params() const { return params_; }

  // Whether `p`'s `when` clause holds in `c` (a parent that is itself inactive makes the child inactive).
  bool active(const ParamSpec& p, const Config& c) const;
  // Keeps only the space's active parameters (values outside the domain kept); missing ones come from
  // `defaults`, else the first value.
  Config canonical(const Config& c, const Config& defaults) const;
  Eigen::VectorXd encode(const Config& c) const;

  // The config whose parameter i sits at quantile u[i] of its domain (u in [0,1)^num_params), canonical.
  Config from_unit(const std::vector<double>& u, const Config& defaults) const;
  // Every canonical config that differs from `c` in one active knob: each other value of a choice or bool,
  // one and a few steps either way for numeric knobs.
  std::vector<Config> neighbours(const Config& c, const Config& defaults) const;

 private:
  struct Column {
    int first = 0;        // first encoded column
    bool one_hot = false;
    int levels = 0;       // one-hot columns, or the number of values of an ordinal parameter
  };
  // Position of v on the parameter's ordinal scale, in [0, 1].
  double ordinal(const ParamSpec& p, const Value& v) const;
  int64_t count(const ParamSpec& p) const;                         // number of values
  Value value_at(const ParamSpec& p, int64_t index) const;         // index in [0, count)
  int64_t index_of(const ParamSpec& p, const Value& v) const;      // -1 when not in the domain

  std::vector<ParamSpec> params_;
  std::vector<Column> columns_;
  std::vector<std::vector<int>> choice_rank_;   // numeric choices: rank of each value by size
  int dims_ = 0;
};

}  // namespace soartune::search
