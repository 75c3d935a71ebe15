// Every GEMV variant x weight format x group x batch against the CPU twin (kernels/gemv_ref.h) on fresh random
// inputs, outputs poisoned before each run and the rows past the output checked untouched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/gemv.cuh"
#include "kernels/gemv_ref.h"
#include "tests/kernels/kernel_test_util.h"

namespace soartune::kernels {
namespace {

using test::Dev;
using test::make_weights;
using test::Weights;

struct Case {
  WeightFormat format;
  int group;  // 0: 16-bit; k: per channel
};

// A pipelined variant whose shared memory holds up to 24 batch columns (m1w16s6k2) refuses more, saying so.
bool refused_for_batch(const std::string& err, int batch) {
  return batch > 24 && err.find("it allows batch 1..24") != std::string::npos;
}

double bound_for(WeightFormat f) {
  // bf16 weights are exact in the mma; the others are rounded to bf16 once (fp16, int8) or twice (int4:
  // the scale and the product), each ~2^-9 relative.
  return f == WeightFormat::kBf16 ? 1e-4 : 1e-2;
}

TEST(GemvCanImplement, RejectsBadKnobsAndShapesWithTheField) {
  GemvArgs a;
  a.w = {WeightFormat::kInt4, 64, 96, 32, reinterpret_cast<void*>(256), reinterpret_cast<float*>(256)};
  a.x = reinterpret_cast<void*>(256);
  a.y = reinterpret_cast<void*>(256);
  a.batch = 1;
  EXPECT_EQ(gemv_can_implement(a, "auto"), "");
  EXPECT_NE(gemv_can_implement(a, "m9w9u9").find("gemv_variant"), std::string::npos);
  a.batch = 33;
  EXPECT_NE(gemv_can_implement(a, "auto").find("batch"), std::string::npos);
  a.batch = 4;
  a.w.k = 80;  // not a multiple of 32 for int4
  EXPECT_NE(gemv_can_implement(a, "auto").find("k:"), std::string::npos);
  a.w.k = 96;
  a.w.group = 48;  // not a multiple of 32
  EXPECT_NE(gemv_can_implement(a, "auto").find("group"), std::string::npos);
  for (const std::string& v : gemv_variant_names()) {
    a.w.group = 32;
    EXPECT_EQ(gemv_can_implement(a, v), "") << v;
  }
  a.batch = 25;  // four batch tiles: m1w16s6k2's reduction no longer fits beside its stages
  EXPECT_TRUE(refused_for_batch(gemv_can_implement(a, "m1w16s6k2"), a.batch)) << gemv_can_implement(a, "m1w16s6k2");
}

// auto's choice by shape and batch (docs/perf-log runs 39-40, 77): quantised layers with more rows than columns
// take m1w8u2b4 (registers for four CTAs an SM) up to batch 8 and m1w8u2 above, except int4 at batches 5..8
// (m2w8u2); the others m1w16u2, except 16-bit layers at batches 2..8 and int4 ones at 5..8 (m1w16u1p). Needs no
// GPU for these direct variants (16-bit layers at batch 1 take the pipelined form only on sm_90, so they are
// left out here).
TEST(GemvPlan, AutoCapsRegistersOfQuantisedTallLayersUpToBatch8) {
  auto chosen = [](WeightFormat f, int n, int k, int group, int batch) {
    GemvArgs a;
    a.w = {f, n, k, group, reinterpret_cast<void*>(256), reinterpret_cast<float*>(256)};
    a.x = reinterpret_cast<void*>(256);
    a.y = reinterpret_cast<void*>(256);
    a.batch = batch;
    GemvPlan p;
    const std::string err = gemv_plan(a, "auto", &p);
    return err.empty() ? gemv_variant_names()[p.variant] : "error: " + err;
  };
  EXPECT_EQ(chosen(WeightFormat::kInt4, 6144, 4096, 128, 1), "m1w8u2b4");   // qkv
  EXPECT_EQ(chosen(WeightFormat::kInt4, 28672, 4096, 32, 8), "m2w8u2");     // gate|up, batches 5..8
  EXPECT_EQ(chosen(WeightFormat::kInt4, 28672, 4096, 32, 4), "m1w8u2b4");
  EXPECT_EQ(chosen(WeightFormat::kInt4, 4096, 14336, 128, 8), "m1w16u1p");  // down, batches 5..8
  EXPECT_EQ(chosen(WeightFormat::kInt4, 4096, 14336, 128, 4), "m1w16u2");
  EXPECT_EQ(chosen(WeightFormat::kInt8, 28672, 4096, 128, 8), "m1w8u2b4");
  EXPECT_EQ(chosen(WeightFormat::kInt4, 28672, 4096, 128, 9), "m1w8u2");
  EXPECT_EQ(chosen(WeightFormat::kInt8, 6144, 4096, 4096, 1), "m1w8u2b4");
  EXPECT_EQ(chosen(WeightFormat::kInt4, 4096, 14336, 128, 1), "m1w16u2");   // down
  EXPECT_EQ(chosen(WeightFormat::kInt8, 4096, 4096, 4096, 8), "m1w16u2");   // o
  EXPECT_EQ(chosen(WeightFormat::kBf16, 6144, 4096, 0, 8), "m1w16u1p");
  EXPECT_EQ(chosen(WeightFormat::kBf16, 6144, 4096, 0, 9), "m1w8u2");
}

TEST(Gemv, EveryVariantFormatGroupAndBatchMatchesTheTwin) {
  KT_SKIP_WITHOUT_GPU("GEMV kernels");
  const uint64_t seed = test::new_seed();
  std::printf("seed %llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  // n not a multiple of any row tile; k leaves a partial step for every unroll depth.
  const int n = 72;
  const std::vector<Case> cases = {{WeightFormat::kBf16, 0},  {WeightFormat::kFp16, 0},  {WeightFormat::kInt8, 0},
                                   {WeightFormat::kInt8, 32}, {WeightFormat::kInt8, 128}, {WeightFormat::kInt4, 32},
                                   {WeightFormat::kInt4, 64}, {WeightFormat::kInt4, 128}};
  std::vector<std::string> variants = gemv_variant_names();
  variants.push_back("auto");
  for (const Case& c : cases) {
    const int k = c.format == WeightFormat::kInt4 ? 640 : 384;
    const int group = c.group == 0 && is_quantized(c.format) ? k : c.group;
    Weights w = make_weights(rng, c.format, n, k, group);
    Dev dw(w.w.size()), ds(w.scales.size() * 4 + 16);
    dw.upload(w.w);
    if (!w.scales.empty()) ds.upload(w.scales);
    for (int batch : {1, 3, 8, 13, 32}) {
      std::vector<uint16_t> xb;
      std::vector<float> xf;
      test::random_bf16(rng, size_t(batch) * k, 1.f, &xb, &xf);
      std::vector<float> ref(size_t(batch) * n);
      linear_ref(w.host, xf.data(), batch, ref.data());
      Dev dx(xb.size() * 2), dy((size_t(batch) * n + 64) * 4);
      dx.upload(xb);
      for (const std::string& v : variants) {
        for (int epilogue = 0; epilogue < 3; ++epilogue) {  // fp32, bf16, fp32 accumulated into y
          const bool out_bf16 = epilogue == 1, accumulate = epilogue == 2;
          if (epilogue > 0 && batch != 3) continue;  // the other epilogues once per case
          GemvArgs a;
          a.w = {c.format, n, k, group, dw.p, w.scales.empty() ? nullptr : ds.as<float>()};
          a.x = dx.p;
          a.y = dy.p;
          a.batch = batch;
          a.out_bf16 = out_bf16;
          a.accumulate = accumulate;
          GemvPlan plan;
          const std::string perr = gemv_plan(a, v, &plan);
          if (refused_for_batch(perr, batch)) continue;
          ASSERT_EQ(perr, "");
          dy.poison();
          std::vector<float> base;
          if (accumulate) {  // y starts as a random residual; the reference adds it
            std::uniform_real_distribution<float> bu(-2.f, 2.f);
            base.resize(size_t(batch) * n);
            for (float& e : base) e = bu(rng);
            KT_CUDA(cudaMemcpy(dy.p, base.data(), base.size() * 4, cudaMemcpyHostToDevice));
          }
          KT_CUDA(gemv_run(a, plan, nullptr));
          KT_CUDA(cudaDeviceSynchronize());
          std::vector<float> out(size_t(batch) * n);
          if (out_bf16) {
            auto raw = dy.download<uint16_t>(size_t(batch) * n + 128);
            for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(raw[i]);
            for (size_t i = out.size(); i < raw.size(); ++i) ASSERT_EQ(raw[i], 0xFFFF) << "wrote past the output";
          } else {
            auto raw = dy.download<float>(size_t(batch) * n + 64);
            std::copy(raw.begin(), raw.begin() + out.size(), out.begin());
            for (size_t i = out.size(); i < raw.size(); ++i) ASSERT_TRUE(std::isnan(raw[i])) << "wrote past the output";
          }
          std::vector<float> want = ref;
          for (size_t i = 0; i < base.size(); ++i) want[i] += base[i];
          const double err = test::normalized_error(out, want);
          EXPECT_LT(err, out_bf16 ? 1e-2 : bound_for(c.format))
              << weight_format_name(c.format) << " group " << group << " batch " << batch << " variant " << v
              << " epilogue " << epilogue;
        }
      }
    }
  }
}

// The pipelined variants (m1w*s*) loop over several row tiles per CTA and wrap their shared-memory stages
// many times; the shapes above fit one tile and one stage. Here: 282 tiles (up to three a CTA on 132 SMs),
// rows that end in a partial stage, up to 15 stages per CTA.
TEST(Gemv, PipelinedVariantsStreamManyTilesPerCta) {
  KT_SKIP_WITHOUT_GPU("GEMV kernels");
  const uint64_t seed = test::new_seed();
  std::printf("seed %llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const int n = 4500;
  const std::vector<Case> cases = {{WeightFormat::kBf16, 0}, {WeightFormat::kInt8, 128}, {WeightFormat::kInt4, 64}};
  for (const Case& c : cases) {
    const int k = c.format == WeightFormat::kInt4 ? 4224 : 2176;
    Weights w = make_weights(rng, c.format, n, k, c.group);
    Dev dw(w.w.size()), ds(w.scales.size() * 4 + 16);
    dw.upload(w.w);
    if (!w.scales.empty()) ds.upload(w.scales);
    for (int batch : {1, 8, 20}) {
      std::vector<uint16_t> xb;
      std::vector<float> xf;
      test::random_bf16(rng, size_t(batch) * k, 1.f, &xb, &xf);
      std::vector<float> ref(size_t(batch) * n);
      linear_ref(w.host, xf.data(), batch, ref.data());
      Dev dx(xb.size() * 2), dy((size_t(batch) * n + 64) * 4);
      dx.upload(xb);
      for (const std::string& v : gemv_variant_names()) {
        if (v.find('s') == std::string::npos) continue;
        GemvArgs a;
        a.w = {c.format, n, k, c.group, dw.p, w.scales.empty() ? nullptr : ds.as<float>()};
        a.x = dx.p;
        a.y = dy.p;
        a.batch = batch;
        GemvPlan plan;
        const std::string perr = gemv_plan(a, v, &plan);  // x in shared memory at batch 1 and 8, from L1 / L2 at 20
        if (refused_for_batch(perr, batch)) continue;
        ASSERT_EQ(perr, "");
        dy.poison();
        KT_CUDA(gemv_run(a, plan, nullptr));
        KT_CUDA(cudaDeviceSynchronize());
        auto raw = dy.download<float>(size_t(batch) * n + 64);
        std::vector<float> out(raw.begin(), raw.begin() + ref.size());
        for (size_t i = out.size(); i < raw.size(); ++i) ASSERT_TRUE(std::isnan(raw[i])) << "wrote past the output";
        EXPECT_LT(test::normalized_error(out, ref), bound_for(c.format))
            << weight_format_name(c.format) << " batch " << batch << " variant " << v << " grid " << plan.grid;
      }
    }
  }
}

TEST(Gemv, InterleaveGateUpPutsEightGateRowsThenTheirUpRows) {
  const int f = 24;
  const size_t row_bytes = 3, spr = 2;
  std::vector<uint8_t> rows(2 * f * row_bytes);
  std::vector<float> scales(2 * f * spr);
  for (int r = 0; r < 2 * f; ++r) {
    for (size_t i = 0; i < row_bytes; ++i) rows[r * row_bytes + i] = uint8_t(r);
    for (size_t i = 0; i < spr; ++i) scales[r * spr + i] = float(r) + 0.5f * i;
  }
  interleave_gate_up(rows.data(), row_bytes, scales.data(), spr, f);
  for (int q = 0; q < f / 8; ++q)
    for (int i = 0; i < 16; ++i) {
      const int at = 16 * q + i, from = i < 8 ? 8 * q + i : f + 8 * q + i - 8;
      for (size_t b = 0; b < row_bytes; ++b) ASSERT_EQ(rows[at * row_bytes + b], from) << "row " << at;
      for (size_t b = 0; b < spr; ++b) ASSERT_EQ(scales[at * spr + b], float(from) + 0.5f * b) << "row " << at;
    }
}

// The SwiGLU epilogue on every variant: y[b][j] = silu(bf16(gate_j)) * bf16(up_j), rows interleaved by 8.
TEST(Gemv, SwigluEpilogueMatchesTheTwin) {
  KT_SKIP_WITHOUT_GPU("GEMV kernels");
  const uint64_t seed = test::new_seed();
  std::printf("seed %llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const int n = 96, f = n / 2;
  std::vector<std::string> variants = gemv_variant_names();
  variants.push_back("auto");
  for (const Case& c : std::vector<Case>{{WeightFormat::kBf16, 0}, {WeightFormat::kInt8, 32}, {WeightFormat::kInt4, 32}}) {
    const int k = c.format == WeightFormat::kInt4 ? 640 : 384;
    Weights w = make_weights(rng, c.format, n, k, c.group);
    Dev dw(w.w.size()), ds(w.scales.size() * 4 + 16);
    dw.upload(w.w);
    if (!w.scales.empty()) ds.upload(w.scales);
    for (int batch : {1, 3, 8, 13}) {
      std::vector<uint16_t> xb;
      std::vector<float> xf;
      test::random_bf16(rng, size_t(batch) * k, 1.f, &xb, &xf);
      std::vector<float> full(size_t(batch) * n), want(size_t(batch) * f);
      linear_ref(w.host, xf.data(), batch, full.data());
      for (int b = 0; b < batch; ++b)
        for (int j = 0; j < f; ++j) {
          const int r = j / 8 * 16 + j % 8;
          const float g = bf16_to_f32(f32_to_bf16(full[size_t(b) * n + r]));
          const float u = bf16_to_f32(f32_to_bf16(full[size_t(b) * n + r + 8]));
          want[size_t(b) * f + j] = g / (1.f + std::exp(-g)) * u;
        }
      Dev dx(xb.size() * 2), dy(size_t(batch) * f * 2 + 256);
      dx.upload(xb);
      for (const std::string& v : variants) {
        GemvArgs a;
        a.w = {c.format, n, k, c.group, dw.p, w.scales.empty() ? nullptr : ds.as<float>()};
        a.x = dx.p;
        a.y = dy.p;
        a.batch = batch;
        a.out_bf16 = true;
        a.swiglu = true;
        GemvPlan plan;
        const std::string perr = gemv_plan(a, v, &plan);
        if (refused_for_batch(perr, batch)) continue;
        ASSERT_EQ(perr, "");
        dy.poison();
        KT_CUDA(gemv_run(a, plan, nullptr));
        KT_CUDA(cudaDeviceSynchronize());
        auto raw = dy.download<uint16_t>(size_t(batch) * f + 128);
        std::vector<float> out(want.size());
        for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(raw[i]);
        for (size_t i = out.size(); i < raw.size(); ++i) ASSERT_EQ(raw[i], 0xFFFF) << "wrote past the output";
        EXPECT_LT(test::normalized_error(out, want), 1e-2)
            << weight_format_name(c.format) << " batch " << batch << " variant " << v;
      }
    }
  }
  GemvArgs a;
  a.w = {WeightFormat::kBf16, 88, 64, 0, reinterpret_cast<void*>(256), nullptr};
  a.x = a.y = reinterpret_cast<void*>(256);
  a.batch = 1;
  a.swiglu = true;
  EXPECT_NE(gemv_can_implement(a, "auto").find("swiglu"), std::string::npos) << "needs out_bf16";
  a.out_bf16 = true;
  EXPECT_NE(gemv_can_implement(a, "auto").find("multiple of 16"), std::string::npos);
}

// The pipelined variants stage RMSNorm(residual) * gamma themselves when asked: against the twin of the
// unfused path (the normalised row rounded to bf16, then the GEMV).
TEST(Gemv, FusedRmsNormMatchesTheTwin) {
  KT_SKIP_WITHOUT_GPU("GEMV kernels");
  const uint64_t seed = test::new_seed();
  std::printf("seed %llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const int n = 2100, k = 1024;
  const float eps = 1e-5f;
  for (const Case& c : std::vector<Case>{{WeightFormat::kBf16, 0}, {WeightFormat::kInt4, 64}}) {
    Weights w = make_weights(rng, c.format, n, k, c.group);
    Dev dw(w.w.size()), ds(w.scales.size() * 4 + 16);
    dw.upload(w.w);
    if (!w.scales.empty()) ds.upload(w.scales);
    std::uniform_real_distribution<float> ud(-3.f, 3.f), gd(0.5f, 1.5f);
    std::vector<float> gamma(k);
    for (float& e : gamma) e = gd(rng);
    Dev dg(k * 4);
    dg.upload(gamma);
    for (int batch = 1; batch <= kGemvMaxNormBatch; ++batch) {
      std::vector<float> res(size_t(batch) * k), xf(size_t(batch) * k);
      for (float& e : res) e = ud(rng);
      for (int b = 0; b < batch; ++b) {
        double ss = 0;
        for (int i = 0; i < k; ++i) ss += double(res[size_t(b) * k + i]) * res[size_t(b) * k + i];
        const float inv = float(1.0 / std::sqrt(ss / k + eps));
        for (int i = 0; i < k; ++i)
          xf[size_t(b) * k + i] = bf16_to_f32(f32_to_bf16(res[size_t(b) * k + i] * inv * gamma[i]));
      }
      std::vector<float> ref(size_t(batch) * n);
      linear_ref(w.host, xf.data(), batch, ref.data());
      Dev dr(res.size() * 4), dy((size_t(batch) * n + 64) * 4);
      dr.upload(res);
      std::vector<std::string> variants = {"auto"};
      for (const std::string& v : gemv_variant_names())
        if (v.find('s') != std::string::npos) variants.push_back(v);
      for (const std::string& v : variants) {
        GemvArgs a;
        a.w = {c.format, n, k, c.group, dw.p, w.scales.empty() ? nullptr : ds.as<float>()};
        a.y = dy.p;
        a.batch = batch;
        a.norm_residual = dr.as<float>();
        a.norm_gamma = dg.as<float>();
        a.norm_eps = eps;
        GemvPlan plan;
        ASSERT_EQ(gemv_plan(a, v, &plan), "") << v;
        EXPECT_TRUE(plan.pipelined) << v;
        dy.poison();
        KT_CUDA(gemv_run(a, plan, nullptr));
        KT_CUDA(cudaDeviceSynchronize());
        auto raw = dy.download<float>(size_t(batch) * n + 64);
        std::vector<float> out(raw.begin(), raw.begin() + ref.size());
        for (size_t i = out.size(); i < raw.size(); ++i) ASSERT_TRUE(std::isnan(raw[i])) << "wrote past the output";
        // The device sums the squares in fp32 (the twin in double): a normalised value on a bf16 rounding
        // boundary may round the other way, one ulp of one x.
        EXPECT_LT(test::normalized_error(out, ref), std::max(bound_for(c.format), 1e-3))
            << weight_format_name(c.format) << " batch " << batch << " variant " << v;
      }
    }
  }
  GemvArgs a;
  a.w = {WeightFormat::kBf16, 64, 64, 0, reinterpret_cast<void*>(256), nullptr};
  a.y = reinterpret_cast<void*>(256);
  a.norm_residual = reinterpret_cast<const float*>(256);
  a.norm_gamma = reinterpret_cast<const float*>(256);
  a.batch = 1;
  EXPECT_NE(gemv_can_implement(a, "m1w8u2").find("cannot fuse RMSNorm"), std::string::npos);
  a.batch = kGemvMaxNormBatch + 1;
  EXPECT_NE(gemv_can_implement(a, "auto").find("batch"), std::string::npos);
}

}  // namespace
}  // namespace soartune::kernels
