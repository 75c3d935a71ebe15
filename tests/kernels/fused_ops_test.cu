// The fused small ops and the prefill GEMM against their CPU twins on fresh random inputs, outputs poisoned:
// RMSNorm (+ residual add, + row gather), RoPE + paged KV write in every KV dtype, SwiGLU, argmax (ties and
// NaN), dequantise-to-bf16 + cuBLAS GEMM for every weight format.
#include <gtest/gtest.h>

#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <string>
#include <vector>

#include "kernels/activation.cuh"
#include "kernels/attention_ref.h"
#include "kernels/gemm.cuh"
#include "kernels/gemv_ref.h"
#include "kernels/norm.cuh"
#include "kernels/ops_ref.h"
#include "kernels/rope.cuh"
#include "kernels/sampling.cuh"
#include "tests/kernels/kernel_test_util.h"

namespace soartune::kernels {
namespace {

using test::Dev;

std::vector<float> uniform(std::mt19937_64& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

std::vector<float> bf16_to_floats(const std::vector<uint16_t>& b) {
  std::vector<float> f(b.size());
  for (size_t i = 0; i < b.size(); ++i) f[i] = bf16_to_f32(b[i]);
  return f;
}

TEST(RmsNorm, ResidualAddAndRowGatherMatchTheTwin) {
  KT_SKIP_WITHOUT_GPU("RMSNorm kernel");
  std::mt19937_64 rng(test::new_seed());
  // 4096 fits the kernel's register cache; 4160 and 9220 also run its tail loop past 4096 values.
  for (const int d : {4096, 4096 + 64, 9216 + 4}) {
    SCOPED_TRACE("d " + std::to_string(d));
    const int rows = 7;
    auto res = uniform(rng, size_t(rows) * d, -3, 3), add = uniform(rng, size_t(rows) * d, -1, 1),
         gamma = uniform(rng, d, 0.5, 1.5);
    Dev dres(res.size() * 4), dadd(add.size() * 4), dg(d * 4), dout(size_t(rows) * d * 2), didx(16);
    dres.upload(res), dadd.upload(add), dg.upload(gamma);
    RmsNormArgs a{dres.as<float>(), dadd.as<float>(), nullptr, dg.as<float>(), dout.p, rows, d, 1e-5f};
    ASSERT_EQ(rmsnorm_can_implement(a), "");
    dout.poison();
    KT_CUDA(rmsnorm_residual_run(a, nullptr));
    KT_CUDA(cudaDeviceSynchronize());
    std::vector<float> ref(res.size()), rres = res;
    rmsnorm_residual_ref(rres.data(), add.data(), gamma.data(), rows, d, 1e-5f, ref.data());
    EXPECT_LT(test::normalized_error(bf16_to_floats(dout.download<uint16_t>(ref.size())), ref), 1e-2);
    EXPECT_LT(test::normalized_error(dres.download<float>(res.size()), rres), 1e-6);
    // Gather rows 5 and 2 of the updated residual, without an add.
    const std::vector<int32_t> idx = {5, 2};
    didx.upload(idx);
    RmsNormArgs g{dres.as<float>(), nullptr, didx.as<int32_t>(), dg.as<float>(), dout.p, 2, d, 1e-5f};
    dout.poison();
    KT_CUDA(rmsnorm_residual_run(g, nullptr));
    KT_CUDA(cudaDeviceSynchronize());
    std::vector<float> gres, gref(size_t(2) * d);
    for (int r : idx) gres.insert(gres.end(), rres.begin() + int64_t(r) * d, rres.begin() + int64_t(r + 1) * d);
    rmsnorm_residual_ref(gres.data(), nullptr, gamma.data(), 2, d, 1e-5f, gref.data());
    EXPECT_LT(test::normalized_error(bf16_to_floats(dout.download<uint16_t>(gref.size())), gref), 1e-2);
  }
}

TEST(RopeKvWrite, EveryKvDtypeMatchesTheTwinAndTouchesOnlyItsSlots) {
  KT_SKIP_WITHOUT_GPU("RoPE + KV write kernel");
  std::mt19937_64 rng(test::new_seed());
  const int H = 8, KVH = 2, hd = 128, page = 16, pages = 6;
  const int q_dim = H * hd, kv_dim = KVH * hd, width = q_dim + 2 * kv_dim;
  // 5 tokens (a decode step: one head per CTA) and 70 (a prefill: heads in groups of 8 per CTA).
  for (const int T : {5, 70}) {
    SCOPED_TRACE("tokens " + std::to_string(T));
    auto qkv = uniform(rng, size_t(T) * width, -2, 2), bias = uniform(rng, width, -0.1f, 0.1f);
    std::vector<int32_t> pos = {0, 1, 17, 300, 4095}, slot = {0, 1 * 16 + 3, 5 * 16 + 15, 2 * 16 + 7, 4 * 16};
    if (T > 5) {
      pos.clear(), slot.clear();
      for (int i = 0; i < T; ++i) {
        pos.push_back((i * 59) % 4096);
        slot.push_back((i * 37) % (pages * page));  // distinct: 37 and 96 are coprime
      }
    }
    // Each KV dtype with fp32 qkv, then bf16 qkv (bf16 KV), then bf16 qkv without rotation (NoPE, fp8 KV).
    for (int variant = 0; variant < 6; ++variant) {
      const KvCacheDtype dt = variant == 4 ? KvCacheDtype::kBf16 : variant == 5 ? KvCacheDtype::kFp8E4M3 : KvCacheDtype(variant);
      const bool in_bf16 = variant >= 4, rotate = variant != 5;
      SCOPED_TRACE(in_bf16 ? "bf16 qkv" : "fp32 qkv");
      SCOPED_TRACE(rotate ? "rotated" : "NoPE");
      if (in_bf16)  // the twin runs on the same rounded values
        for (float& x : qkv) x = bf16_to_floats({f32_to_bf16(x)})[0];
      std::vector<uint16_t> qkv_b(qkv.size());
      for (size_t e = 0; e < qkv.size(); ++e) qkv_b[e] = f32_to_bf16(qkv[e]);
      PagedKvLayout lay{KVH, hd, page, dt};
      const size_t cache_bytes = lay.page_bytes() * pages;
      Dev dqkv(qkv.size() * 4), db(width * 4), dq(size_t(T) * q_dim * 2), dk(cache_bytes), dv(cache_bytes),
          dpos(T * 4), dslot(T * 4);
      if (in_bf16) dqkv.upload(qkv_b);
      else dqkv.upload(qkv);
      db.upload(bias), dpos.upload(pos), dslot.upload(slot);
      const float ks = kv_dtype_bytes(dt) == 1 ? 0.5f : 1.f, vs = kv_dtype_bytes(dt) == 1 ? 0.25f : 1.f;
      RopeKvArgs a;
      a.qkv = dqkv.p, a.qkv_bf16 = in_bf16, a.bias = db.as<float>(), a.q_out = dq.p, a.k_cache = dk.p, a.v_cache = dv.p;
      a.positions = dpos.as<int32_t>(), a.kv_slot = dslot.as<int32_t>(), a.tokens = T, a.n_heads = H;
      a.n_kv_heads = KVH, a.head_dim = hd, a.page_size = page, a.kv_dtype = dt, a.rope_theta = 500000.f;
      a.k_scale = ks, a.v_scale = vs, a.rotate = rotate;
      ASSERT_EQ(rope_kv_can_implement(a), "");
      dq.poison(), dk.poison(), dv.poison();
      KT_CUDA(rope_kv_write_run(a, nullptr));
      KT_CUDA(cudaDeviceSynchronize());
      auto q = bf16_to_floats(dq.download<uint16_t>(size_t(T) * q_dim));
      auto kc = dk.download<uint8_t>(cache_bytes), vc = dv.download<uint8_t>(cache_bytes);
      std::vector<float> qref, qout, kref, kout, vref, vout;
      for (int i = 0; i < T; ++i) {
        std::vector<float> row(qkv.begin() + int64_t(i) * width, qkv.begin() + int64_t(i + 1) * width);
        for (int c = 0; c < width; ++c) row[c] += bias[c];
        rope_ref(row.data(), H, KVH, hd, pos[i], 500000.f, rotate);
        qref.insert(qref.end(), row.begin(), row.begin() + q_dim);
        qout.insert(qout.end(), q.begin() + int64_t(i) * q_dim, q.begin() + int64_t(i + 1) * q_dim);
        const int pg = slot[i] / page, sl = slot[i] % page;
        for (int h = 0; h < KVH; ++h)
          for (int e = 0; e < hd; ++e) {
            kref.push_back(row[q_dim + h * hd + e]);
            vref.push_back(row[q_dim + kv_dim + h * hd + e]);
            kout.push_back(kv_cache_value(kc.data(), dt, lay.offset(pg, h, sl, e), ks));
            vout.push_back(kv_cache_value(vc.data(), dt, lay.offset(pg, h, sl, e), vs));
          }
      }
      const double kv_bound = dt == KvCacheDtype::kFp8E4M3 ? 0.07 : dt == KvCacheDtype::kFp8E5M2 ? 0.14 : 1e-2;
      EXPECT_LT(test::normalized_error(qout, qref), 1e-2) << kv_dtype_name(dt);
      EXPECT_LT(test::normalized_error(kout, kref), kv_bound) << kv_dtype_name(dt);
      EXPECT_LT(test::normalized_error(vout, vref), kv_bound) << kv_dtype_name(dt);
      // Every other slot still holds the poison bytes.
      size_t written = 0;
      for (size_t b = 0; b < cache_bytes; ++b) written += kc[b] != 0xFF;
      EXPECT_LE(written, size_t(T) * KVH * hd * kv_dtype_bytes(dt)) << kv_dtype_name(dt);
    }
  }
}

TEST(SwiGlu, MatchesTheTwin) {
  KT_SKIP_WITHOUT_GPU("SwiGLU kernel");
  std::mt19937_64 rng(test::new_seed());
  for (int f : {1536, 1538}) {  // the 4-wide kernel and the scalar one
    const int T = 9;
    auto gu = uniform(rng, size_t(T) * 2 * f, -6, 6);
    for (bool in_bf16 : {false, true}) {
      // bf16 input: the twin runs on the same rounded gate|up values.
      std::vector<uint16_t> gub(gu.size());
      std::vector<float> gin = gu;
      for (size_t i = 0; i < gu.size(); ++i) gub[i] = f32_to_bf16(gu[i]);
      if (in_bf16) gin = bf16_to_floats(gub);
      Dev dgu(gu.size() * 4), dout(size_t(T) * f * 2);
      if (in_bf16) dgu.upload(gub);
      else dgu.upload(gu);
      dout.poison();
      KT_CUDA(swiglu_run(dgu.p, dout.p, T, f, nullptr, in_bf16));
      KT_CUDA(cudaDeviceSynchronize());
      std::vector<float> ref(size_t(T) * f);
      swiglu_ref(gin.data(), T, f, ref.data());
      EXPECT_LT(test::normalized_error(bf16_to_floats(dout.download<uint16_t>(ref.size())), ref), 1e-2)
          << "f " << f << " bf16 input " << in_bf16;
      if (f % 8 != 0) continue;
      // The same values with gate|up columns in the GEMV's interleaved order (kernels/gemv.cuh).
      std::vector<uint16_t> gib(gub.size());
      std::vector<float> gi(gu.size());
      for (int i = 0; i < T; ++i)
        for (int j = 0; j < f; ++j) {
          const size_t row = size_t(i) * 2 * f, to = size_t(j / 8) * 16 + j % 8;
          gib[row + to] = gub[row + j], gib[row + to + 8] = gub[row + f + j];
          gi[row + to] = gu[row + j], gi[row + to + 8] = gu[row + f + j];
        }
      if (in_bf16) dgu.upload(gib);
      else dgu.upload(gi);
      dout.poison();
      KT_CUDA(swiglu_run(dgu.p, dout.p, T, f, nullptr, in_bf16, /*interleaved8=*/true));
      KT_CUDA(cudaDeviceSynchronize());
      EXPECT_LT(test::normalized_error(bf16_to_floats(dout.download<uint16_t>(ref.size())), ref), 1e-2)
          << "f " << f << " bf16 input " << in_bf16 << " interleaved";
    }
  }
}

TEST(Argmax, MatchesTheTwinWithTiesAndNaN) {
  KT_SKIP_WITHOUT_GPU("argmax kernel");
  std::mt19937_64 rng(test::new_seed());
  const int rows = 4, vocab = 128256;
  auto logits = uniform(rng, size_t(rows) * vocab, -10, 10);
  logits[size_t(1) * vocab + 77] = 50.f;  // row 1: a tie, lowest id wins
  logits[size_t(1) * vocab + 99000] = 50.f;
  logits[size_t(2) * vocab + 5] = NAN;     // row 2: NaN never wins
  logits[size_t(2) * vocab + 6] = 60.f;
  logits[size_t(3) * vocab + vocab - 1] = 70.f;  // row 3: the last id
  Dev dl(logits.size() * 4), dout(rows * 4);
  dl.upload(logits);
  dout.poison();
  KT_CUDA(argmax_run(dl.as<float>(), rows, vocab, dout.as<int32_t>(), nullptr));
  KT_CUDA(cudaDeviceSynchronize());
  std::vector<int32_t> ref(rows);
  argmax_ref(logits.data(), rows, vocab, ref.data());
  EXPECT_EQ(dout.download<int32_t>(rows), ref);
  EXPECT_EQ(ref[1], 77);
  EXPECT_EQ(ref[2], 6);
  EXPECT_EQ(ref[3], vocab - 1);
}

TEST(PrefillGemm, EveryFormatMatchesTheTwin) {
  KT_SKIP_WITHOUT_GPU("prefill GEMM");
  std::mt19937_64 rng(test::new_seed());
  const int m = 45, n = 96, k = 256;
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  Dev scratch(size_t(n) * k * 2);
  GemmContext ctx{h, scratch.p, scratch.bytes};
  for (WeightFormat f : {WeightFormat::kBf16, WeightFormat::kFp16, WeightFormat::kInt8, WeightFormat::kInt4}) {
    const int group = f == WeightFormat::kInt8 ? 64 : f == WeightFormat::kInt4 ? 32 : 0;
    std::vector<uint8_t> w(weight_bytes(f, n, k));
    std::vector<float> scales;
    if (f == WeightFormat::kBf16 || f == WeightFormat::kFp16) {
      auto* p = reinterpret_cast<uint16_t*>(w.data());
      for (float v : uniform(rng, size_t(n) * k, -1, 1)) *p++ = f == WeightFormat::kBf16 ? f32_to_bf16(v) : f32_to_fp16(v);
    } else {
      const int qmax = f == WeightFormat::kInt8 ? 127 : 7;
      std::uniform_int_distribution<int> qd(-qmax, qmax);
      std::vector<int8_t> q(size_t(n) * k);
      for (auto& v : q) v = int8_t(qd(rng));
      if (f == WeightFormat::kInt8) std::memcpy(w.data(), q.data(), q.size());
      else pack_int4_rows(q.data(), n, k, w.data());
      scales = uniform(rng, size_t(n) * (k / group), 0.5f / qmax, 1.5f / qmax);
    }
    std::vector<uint16_t> xb;
    std::vector<float> xf;
    test::random_bf16(rng, size_t(m) * k, 1.f, &xb, &xf);
    Dev dw(w.size()), ds(scales.size() * 4 + 16), dx(xb.size() * 2), dy(size_t(m) * n * 4);
    dw.upload(w), dx.upload(xb);
    if (!scales.empty()) ds.upload(scales);
    DeviceLinear dl{f, n, k, group, dw.p, scales.empty() ? nullptr : ds.as<float>()};
    ASSERT_EQ(gemm_can_implement(dl, m, ctx), "");
    HostLinear hl{f, n, k, group, w.data(), scales.empty() ? nullptr : scales.data()};
    std::vector<float> ref(size_t(m) * n);
    linear_ref(hl, xf.data(), m, ref.data());
    for (int epilogue = 0; epilogue < 3; ++epilogue) {  // fp32, bf16, fp32 accumulated into y
      const bool out_bf16 = epilogue == 1, accumulate = epilogue == 2;
      dy.poison();
      std::vector<float> want = ref;
      if (accumulate) {  // y starts as a random residual; the reference adds it
        const auto base = uniform(rng, ref.size(), -2, 2);
        dy.upload(base);
        for (size_t i = 0; i < want.size(); ++i) want[i] += base[i];
      }
      ASSERT_EQ(gemm_run(ctx, dl, dx.p, k, dy.p, n, m, nullptr, out_bf16, accumulate), "");
      KT_CUDA(cudaDeviceSynchronize());
      const std::vector<float> got =
          out_bf16 ? bf16_to_floats(dy.download<uint16_t>(ref.size())) : dy.download<float>(ref.size());
      // bf16 output: one rounding of each result (relative 2^-9).
      EXPECT_LT(test::normalized_error(got, want), out_bf16 ? 1e-2 : f == WeightFormat::kBf16 ? 1e-4 : 1e-2)
          << weight_format_name(f) << " epilogue " << epilogue;
    }
    EXPECT_NE(gemm_run(ctx, dl, dx.p, k, dy.p, n, m, nullptr, true, true).find("accumulate"), std::string::npos);
    // The expansion alone: every element bf16(value * scale), rounded once, in place.
    scratch.poison();
    KT_CUDA(dequantize_to_bf16_run(dl, scratch.p, nullptr));
    KT_CUDA(cudaDeviceSynchronize());
    const std::vector<uint16_t> exp16 = scratch.download<uint16_t>(size_t(n) * k);
    const uint16_t* p16 = reinterpret_cast<const uint16_t*>(w.data());
    int64_t wrong = 0;
    for (int r = 0; r < n; ++r)
      for (int c = 0; c < k; ++c) {
        float v = 0.f;
        switch (f) {
          case WeightFormat::kBf16: v = bf16_to_f32(p16[size_t(r) * k + c]); break;
          case WeightFormat::kFp16: v = fp16_to_f32(p16[size_t(r) * k + c]); break;
          case WeightFormat::kInt8:
            v = float(int8_t(w[size_t(r) * k + c])) * scales[size_t(r) * (k / group) + c / group];
            break;
          case WeightFormat::kInt4:
            v = float(int4_code_at(w.data(), k, r, c)) * scales[size_t(r) * (k / group) + c / group];
            break;
        }
        wrong += exp16[size_t(r) * k + c] != f32_to_bf16(v);
      }
    EXPECT_EQ(wrong, 0) << weight_format_name(f) << ": elements of the bf16 expansion that differ";
  }
  cublasDestroy(h);
}

}  // namespace
}  // namespace soartune::kernels
