// The set-up the CUDA engine tests share (cuda_model_gpu_test.cc, cuda_sala_gpu_test.cc,
// cuda_sala_sparse_gpu_test.cc): where the shared test models are, the skip when no CUDA device is usable, each
// model loaded once, engines for a launch config, and teacher-forced agreement with a reference's top-1.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

// The shared test assets: $SOARTUNE_SHARED_DIR when set (the device machine carries a copy), else the build's.
inline std::string soartune_shared_dir_at_run_time() {
  const char* e = std::getenv("SOARTUNE_SHARED_DIR");
  return e && *e ? e : SOARTUNE_SHARED_DIR_BUILD;
}
#define SOARTUNE_SHARED_DIR soartune_shared_dir_at_run_time()

#include "engine/backend.h"
#include "engine/engine.h"
#include "engine/model_loader.h"
#include "engine/quantize.h"
#include "tests/engine/single_sequence.h"
#include "tests/engine/tiny_model.h"

namespace soartune::engine::testing {

inline bool have_cuda() { return make_cuda_backend(0).ok(); }

#define SKIP_WITHOUT_CUDA() \
  if (!soartune::engine::testing::have_cuda()) GTEST_SKIP() << "no usable CUDA device on this machine: the CUDA engine is not run"

#define SKIP_WITHOUT_CUDA_SALA() \
  SKIP_WITHOUT_CUDA();           \
  SKIP_WITHOUT_TINY_SALA()

// A CUDA backend on device 0; null (and a failure) when none can be made.
inline std::unique_ptr<Backend> cuda_backend() {
  auto b = make_cuda_backend(0);
  EXPECT_TRUE(b.ok()) << b.status().message;
  return b.ok() ? std::move(b).value() : nullptr;
}

// The checkpoint in `dir` (hf:), loaded once for the whole test binary.
inline const ModelWeights& loaded_model(const std::string& dir) {
  static std::map<std::string, ModelWeights> models;
  auto it = models.find(dir);
  if (it == models.end()) {
    auto r = load_model("hf:" + dir);
    EXPECT_TRUE(r.ok()) << r.status().message;
    it = models.emplace(dir, r.ok() ? std::move(r).value() : ModelWeights{}).first;
  }
  return it->second;
}

// `base` rewritten for l's weight bits (a copy; 16-bit stays as loaded).
inline ModelWeights weights_for(const ModelWeights& base, const LaunchConfig& l) {
  ModelWeights w = base;
  const Status s = quantize_model(w, l);
  EXPECT_TRUE(s.ok()) << s.message;
  return w;
}

// An engine on the CUDA backend with launch config l over `base` quantised as l says; null when it fails.
inline std::unique_ptr<Engine> make_cuda_engine(const ModelWeights& base, const LaunchConfig& l, int max_context) {
  EngineOptions o;
  o.launch = l;
  o.max_context = max_context;
  auto b = cuda_backend();
  if (!b) return nullptr;
  auto e = Engine::create(std::move(b), weights_for(base, l), o);
  EXPECT_TRUE(e.ok()) << e.status().message;
  return e.ok() ? std::move(e).value() : nullptr;
}

// Teacher-forced top-1 agreement (%) of `engine` with the reference top-1 `field` of each of `rows` (an
// eval_public.jsonl's rows: prompt_ids, continuation_ids, field).
inline double teacher_forced_agreement(Engine& engine, const std::vector<nlohmann::json>& rows, const char* field) {
  std::vector<std::vector<int32_t>> want;
  for (const auto& r : rows) {
    EXPECT_TRUE(engine.add_teacher_forced(r["prompt_ids"].get<std::vector<int32_t>>(),
                                          r["continuation_ids"].get<std::vector<int32_t>>()).ok());
    want.push_back(r[field].get<std::vector<int32_t>>());
  }
  const Status s = engine.run_until_idle();
  EXPECT_TRUE(s.ok()) << s.message;
  auto done = engine.take_finished();
  EXPECT_EQ(done.size(), want.size());
  int64_t match = 0, total = 0;
  for (const auto& f : done) {
    const auto& w = want[static_cast<std::size_t>(f.id)];
    EXPECT_EQ(f.output.size(), w.size());
    for (std::size_t i = 0; i < std::min(w.size(), f.output.size()); ++i) match += f.output[i] == w[i];
    total += static_cast<int64_t>(w.size());
  }
  return total ? 100.0 * match / total : 0;
}

}  // namespace soartune::engine::testing
