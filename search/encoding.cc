#include "search/encoding.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>

namespace soartune::search {
namespace {

bool all_ints(const std::vector<Value>& values) {
  return !values.empty() && std::all_of(values.begin(), values.end(),
                                        [](const Value& v) { return std::holds_alternative<int64_t>(v); });
}

int log2_floor(int64_t v) {
  int e = 0;
  while (v > 1) {
    v >>= 1;
    ++e;
  }
  return e;
}

}  // namespace

Encoding::Encoding(std::vector<ParamSpec> params) : params_(std::move(params)) {
  for (const ParamSpec& p : params_) {
    Column col;
    col.first = dims_;
    std::vector<int> rank;
    if (p.type == ParamType::kChoice && !all_ints(p.choices)) {
      col.one_hot = true;
      col.levels = static_cast<int>(p.choices.size());
      dims_ += col.levels;
    } else {
      col.levels = static_cast<int>(std::min<int64_t>(count(p), 1 << 30));
      dims_ += 1;
      if (p.type == ParamType::kChoice) {
        std::vector<int> order(p.choices.size());
        std::iota(order.begin(), order.end(), 0);
        std::sort(order.begin(), order.end(), [&](int a, int b) {
          return std::get<int64_t>(p.choices[a]) < std::get<int64_t>(p.choices[b]);
        });
        rank.assign(order.size(), 0);
        for (size_t r = 0; r < order.size(); ++r) rank[order[r]] = static_cast<int>(r);
      }
    }
    columns_.push_back(col);
    choice_rank_.push_back(std::move(rank));
  }
}

bool Encoding::active(const ParamSpec& p, const Config& c) const {
  for (const auto& [parent, values] : p.when) {
    auto it = c.find(parent);
    if (it == c.end()) return false;
    if (std::find(values.begin(), values.end(), it->second) == values.end()) return false;
  }
  return true;
}

Config Encoding::canonical(const Config& c, const Config& defaults) const {
  Config out;
  for (const ParamSpec& p : params_) {
    if (!active(p, out)) continue;   // parents come first, so `out` already holds them
    auto it = c.find(p.name);
    // A value outside the domain is kept (as Space::canonical does): a reference config outside the space
    // must not collide with the in-space config its value would be clamped to.
    if (it != c.end()) {
      out[p.name] = it->second;
      continue;
    }
    auto d = defaults.find(p.name);
    out[p.name] = (d != defaults.end() && index_of(p, d->second) >= 0) ? d->second : value_at(p, 0);
  }
  return out;
}

int64_t Encoding::count(const ParamSpec& p) const {
  switch (p.type) {
    case ParamType::kChoice: return static_cast<int64_t>(p.choices.size());
    case ParamType::kBool: return 2;
    case ParamType::kInt:
    case ParamType::kLogInt: return std::max<int64_t>(1, p.high - p.low + 1);
    case ParamType::kPow2: return std::max(1, log2_floor(p.high) - log2_floor(std::max<int64_t>(1, p.low)) + 1);
  }
  return 1;
}

Value Encoding::value_at(const ParamSpec& p, int64_t index) const {
  switch (p.type) {
    case ParamType::kChoice: return p.choices[static_cast<size_t>(index)];
    case ParamType::kBool: return index != 0;
    case ParamType::kInt:
    case ParamType::kLogInt: return p.low + index;
    case ParamType::kPow2: return int64_t{1} << (log2_floor(std::max<int64_t>(1, p.low)) + index);
  }
  return Value{};
}

int64_t Encoding::index_of(const ParamSpec& p, const Value& v) const {
  switch (p.type) {
    case ParamType::kChoice: {
      auto it = std::find(p.choices.begin(), p.choices.end(), v);
      return it == p.choices.end() ? -1 : it - p.choices.begin();
    }
    case ParamType::kBool:
      if (const bool* b = std::get_if<bool>(&v)) return *b ? 1 : 0;
      return -1;
    case ParamType::kInt:
    case ParamType::kLogInt: {
      const int64_t* i = std::get_if<int64_t>(&v);
      if (!i || *i < p.low || *i > p.high) return -1;
      return *i - p.low;
    }
    case ParamType::kPow2: {
      const int64_t* i = std::get_if<int64_t>(&v);
      if (!i || *i < p.low || *i > p.high || *i <= 0 || (*i & (*i - 1)) != 0) return -1;
      return log2_floor(*i) - log2_floor(std::max<int64_t>(1, p.low));
    }
  }
  return -1;
}

double Encoding::ordinal(const ParamSpec& p, const Value& v) const {
  const int64_t n = count(p);
  const int64_t i = index_of(p, v);
  if (n <= 1 || i < 0) return 0.5;
  if (p.type == ParamType::kLogInt) {
    return std::log(static_cast<double>(i + 1)) / std::log(static_cast<double>(n));
  }
  if (p.type == ParamType::kChoice) {
    const auto& rank = choice_rank_[&p - params_.data()];
    return static_cast<double>(rank[static_cast<size_t>(i)]) / static_cast<double>(n - 1);
  }
  return static_cast<double>(i) / static_cast<double>(n - 1);
}

Eigen::VectorXd Encoding::encode(const Config& c) const {
  Eigen::VectorXd x = Eigen::VectorXd::Zero(dims_);
  for (size_t k = 0; k < params_.size(); ++k) {
    const ParamSpec& p = params_[k];
    const Column& col = columns_[k];
    auto it = c.find(p.name);
    const bool on = active(p, c) && it != c.end();
    if (col.one_hot) {
      if (!on) continue;
      const int64_t i = index_of(p, it->second);
      if (i >= 0) x[col.first + static_cast<int>(i)] = 1.0;
    } else {
      x[col.first] = on ? ordinal(p, it->second) : 0.5;
    }
  }
  return x;
}

Config Encoding::from_unit(const std::vector<double>& u, const Config& defaults) const {
  Config c;
  for (size_t k = 0; k < params_.size(); ++k) {
    const ParamSpec& p = params_[k];
    const double uk = std::clamp(k < u.size() ? u[k] : 0.5, 0.0, std::nextafter(1.0, 0.0));
    const int64_t n = count(p);
    int64_t index = 0;
    if (p.type == ParamType::kLogInt) {
      // Uniform on log(v - low + 1): as many samples in 1..10 as in 10..100.
      index = static_cast<int64_t>(std::floor(std::exp(uk * std::log(static_cast<double>(n + 1))))) - 1;
    } else {
      index = static_cast<int64_t>(std::floor(uk * static_cast<double>(n)));
    }
    c[p.name] = value_at(p, std::clamp<int64_t>(index, 0, n - 1));
  }
  return canonical(c, defaults);
}

std::vector<Config> Encoding::neighbours(const Config& c, const Config& defaults) const {
  const Config base = canonical(c, defaults);
  std::vector<Config> out;
  std::set<std::string> seen{config_key(base)};
  auto add = [&](const ParamSpec& p, const Value& v) {
    Config n = base;
    n[p.name] = v;
    n = canonical(n, defaults);
    if (seen.insert(config_key(n)).second) out.push_back(std::move(n));
  };
  for (const ParamSpec& p : params_) {
    auto it = base.find(p.name);
    if (it == base.end()) continue;   // inactive
    const int64_t n = count(p);
    const int64_t i = index_of(p, it->second);
    if (p.type == ParamType::kChoice || p.type == ParamType::kBool || p.type == ParamType::kPow2) {
      for (int64_t j = 0; j < n; ++j) {
        if (j != i) add(p, value_at(p, j));
      }
      continue;
    }
    // Ints: one step and a few geometric steps either way, on the parameter's own scale.
    std::set<int64_t> steps{1};
    for (int64_t s = 2; s < n; s *= 4) steps.insert(s);
    if (p.type == ParamType::kLogInt) {
      const int64_t v = std::get<int64_t>(it->second) - p.low + 1;
      for (double f : {1.25, 2.0, 4.0}) {
        steps.insert(std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(v) * (f - 1)))));
        steps.insert(std::max<int64_t>(1, static_cast<int64_t>(std::llround(static_cast<double>(v) * (1 - 1 / f)))));
      }
    }
    for (int64_t s : steps) {
      if (i + s < n) add(p, value_at(p, i + s));
      if (i - s >= 0) add(p, value_at(p, i - s));
    }
  }
  return out;
}

}  // namespace soartune::search
