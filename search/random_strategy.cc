#include "search/random_strategy.h"

#include <random>
#include <set>

namespace soartune::search {

namespace {

// Sampling attempts per suggestion before falling back to listing the unobserved configs.
constexpr int kSampleAttempts = 256;
// Most configs listed in that fallback; a space larger than this is never that close to exhausted.
constexpr size_t kEnumerateLimit = 200000;

// FNV-1a: a hash that is the same on every platform and run, so a job's suggestions replay exactly.
uint64_t fnv1a(uint64_t h, const std::string& s) {
  for (unsigned char ch : s) {
    h ^= ch;
    h *= 1099511628211ull;
  }
  return h;
}

class RandomStrategy : public Strategy {
 public:
  std::string name() const override { return "random"; }

  std::vector<Suggestion> ask(const SearchProblem& problem, const std::vector<Observation>& history,
                              int q) override {
    std::vector<Suggestion> out;
    if (q <= 0) return out;
    const Space& space = problem.space;
    std::set<std::string> seen;
    uint64_t h = fnv1a(14695981039346656037ull, std::to_string(problem.seed));
    for (const Observation& o : history) {
      const std::string key = config_key(space.canonical(o.config, problem.reference));
      seen.insert(key);
      h = fnv1a(h, key);
      h = fnv1a(h, std::to_string(static_cast<int>(o.outcome)));
    }
    std::mt19937_64 rng(h);

    auto take = [&](Config c, const char* strategy, const char* note) {
      seen.insert(config_key(c));
      Suggestion s;
      s.config = std::move(c);
      s.strategy = strategy;
      s.note = note;
      out.push_back(std::move(s));
    };

    const Config reference = space.canonical(problem.reference, problem.reference);
    if (!seen.count(config_key(reference))) take(reference, "reference", "trial 0: the reference config");

    std::vector<Config> rest;   // the unobserved configs, listed once sampling stops finding new ones
    bool listed = false;
    while (static_cast<int>(out.size()) < q) {
      bool found = false;
      if (!listed) {
        for (int i = 0; i < kSampleAttempts && !found; ++i) {
          Config c = space.sample(rng);
          if (!seen.count(config_key(c))) {
            take(std::move(c), "random", "uniform sample");
            found = true;
          }
        }
        if (found) continue;
        listed = true;
        for (Config& c : space.enumerate(kEnumerateLimit))
          if (!seen.count(config_key(c))) rest.push_back(std::move(c));
      }
      if (rest.empty()) break;   // exhausted (or too large to list and every sample collided)
      const size_t i = std::uniform_int_distribution<size_t>(0, rest.size() - 1)(rng);
      take(std::move(rest[i]), "random", "uniform among the configs not yet tried");
      rest.erase(rest.begin() + static_cast<std::ptrdiff_t>(i));
    }
    return out;
  }
};

}  // namespace

std::unique_ptr<Strategy> make_random_strategy() { return std::make_unique<RandomStrategy>(); }

}  // namespace soartune::search
