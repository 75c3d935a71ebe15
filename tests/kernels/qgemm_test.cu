// The quantised-weight GEMM (kernels/qgemm.cuh) against the CPU twin (kernels/gemv_ref.h) and against the GEMM
// path it stands beside (expansion to bf16, then cuBLAS: gemm.cuh), which multiplies the same bf16 values: every
// int4 and int8 group, rows across the 64-row tiles, one, three and the automatic number of k slices, the three
// epilogues, strided rows; outputs poisoned first and everything past them checked untouched.
#include <gtest/gtest.h>

#include <cublas_v2.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/gemm.cuh"
#include "kernels/gemv_ref.h"
#include "kernels/qgemm.cuh"
#include "tests/kernels/kernel_test_util.h"

namespace soartune::kernels {
namespace {

using test::Dev;

int sm_count() {
  int dev = 0, sms = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess)
    return 0;
  return sms;
}

// Arguments for x, y and the workspace on the device, row strides packed, epilogue fp32 unless set after.
QgemmArgs device_args(const DeviceLinear& w, const Dev& x, const Dev& y, int m, int splits, const Dev& workspace) {
  QgemmArgs a;
  a.w = w;
  a.x = x.p;
  a.y = y.p;
  a.m = m;
  a.splits = splits;
  a.workspace = workspace.as<float>();
  a.workspace_bytes = workspace.bytes;
  return a;
}

TEST(QgemmCanImplement, RejectsBadShapesAndArgumentsWithTheField) {
  QgemmArgs a;
  a.w = {WeightFormat::kInt4, 200, 1024, 128, reinterpret_cast<void*>(256), reinterpret_cast<float*>(256)};
  a.x = reinterpret_cast<void*>(256);
  a.y = reinterpret_cast<void*>(256);
  a.m = 64;
  a.splits = 1;
  EXPECT_EQ(qgemm_can_implement(a, 132), "");
  auto refused = [&](const QgemmArgs& b, const std::string& field) {
    const std::string e = qgemm_can_implement(b, 132);
    EXPECT_EQ(e.rfind(field, 0), 0u) << "want a message starting '" << field << "', got '" << e << "'";
  };
  QgemmArgs b = a;
  b.w.format = WeightFormat::kBf16;
  refused(b, "w.format");
  b = a, b.m = 0;
  refused(b, "m:");
  b = a, b.m = kQgemmMaxRows + 1;
  refused(b, "m:");
  b = a, b.w.k = 1056;  // not a multiple of 64
  refused(b, "w.k");
  b = a, b.w.group = 16;  // below an int4 chunk
  refused(b, "w.group");
  b = a, b.w.group = 96;  // does not divide k
  refused(b, "w.group");
  b = a, b.w.format = WeightFormat::kInt8, b.w.group = 16;  // an int8 chunk: allowed
  EXPECT_EQ(qgemm_can_implement(b, 132), "");
  b = a, b.x = reinterpret_cast<void*>(258);
  refused(b, "x, x_stride");
  b = a, b.x_stride = 1028;  // rows not 16-byte aligned
  refused(b, "x, x_stride");
  b = a, b.y_stride = 199;
  refused(b, "y_stride");
  b = a, b.out_bf16 = true, b.accumulate = true;
  refused(b, "accumulate");
  b = a, b.splits = 17;  // 16 k-tiles
  refused(b, "splits");
  b = a, b.splits = 4;  // slices need the workspace
  refused(b, "workspace");
  b.workspace = reinterpret_cast<float*>(256);
  b.workspace_bytes = qgemm_workspace_bytes(b.w, b.m, 4);
  EXPECT_EQ(qgemm_can_implement(b, 132), "");
  b.workspace_bytes -= 4;
  refused(b, "workspace");
  // The automatic slices: none where the tiles fill the SMs; else enough for two CTAs an SM, at least 8 k-tiles
  // a slice, at most 16 slices.
  EXPECT_EQ(qgemm_auto_splits(a.w, 64, 132), 2);                                        // 2 tiles; 16 k-tiles
  EXPECT_EQ(qgemm_auto_splits({WeightFormat::kInt4, 4096, 4096, 128}, 64, 132), 8);   // 32 tiles want 9; 64 k-tiles
  EXPECT_EQ(qgemm_auto_splits({WeightFormat::kInt4, 4096, 4096, 128}, 256, 132), 3);  // 128 tiles
  EXPECT_EQ(qgemm_auto_splits({WeightFormat::kInt4, 128, 65536, 128}, 1, 132), 16);   // 1 tile wants 264: capped
  EXPECT_EQ(qgemm_auto_splits({WeightFormat::kInt4, 32768, 4096, 128}, 64, 132), 1);  // 256 tiles
  EXPECT_EQ(qgemm_auto_splits({WeightFormat::kInt4, 4096, 256, 128}, 64, 132), 1);    // 4 k-tiles
}

struct Case {
  WeightFormat format;
  int group;  // k: per channel
};

TEST(Qgemm, EveryFormatGroupRowsAndSlicesMatchTheTwinAndTheGemmPath) {
  KT_SKIP_WITHOUT_GPU("quantised-weight GEMM");
  const uint64_t seed = test::new_seed();
  std::printf("seed %llu\n", (unsigned long long)seed);
  std::mt19937_64 rng(seed);
  const int n = 200, k = 1024, sms = sm_count();  // n: a partial column tile; k: 16 k-tiles
  const std::vector<Case> cases = {{WeightFormat::kInt4, 32}, {WeightFormat::kInt4, 64}, {WeightFormat::kInt4, 128},
                                   {WeightFormat::kInt4, k},  {WeightFormat::kInt8, 16}, {WeightFormat::kInt8, 128},
                                   {WeightFormat::kInt8, k}};
  cublasHandle_t h;
  ASSERT_EQ(cublasCreate(&h), CUBLAS_STATUS_SUCCESS);
  Dev scratch(size_t(n) * k * 2);
  GemmContext ctx{h, scratch.p, scratch.bytes};
  const int max_m = kQgemmMaxRows;
  Dev dws(qgemm_workspace_bytes({WeightFormat::kInt4, n, k, 32}, max_m, 16));
  for (const Case& c : cases) {
    test::Weights w = test::make_weights(rng, c.format, n, k, c.group);
    Dev dw(w.w.size()), ds(w.scales.size() * 4);
    dw.upload(w.w);
    ds.upload(w.scales);
    const DeviceLinear dl{c.format, n, k, c.group, dw.p, ds.as<float>()};
    for (int m : {1, 33, 64, 97, kQgemmMaxRows}) {
      std::vector<uint16_t> xb;
      std::vector<float> xf;
      test::random_bf16(rng, size_t(m) * k, 1.f, &xb, &xf);
      Dev dx(xb.size() * 2), dy((size_t(m) * n + 64) * 4), dg(size_t(m) * n * 4);
      dx.upload(xb);
      std::vector<float> ref(size_t(m) * n);
      linear_ref(w.host, xf.data(), m, ref.data());
      // The GEMM path on the same bf16 weight values (bf16(code * scale), rounded once).
      ASSERT_EQ(gemm_run(ctx, dl, dx.p, k, dg.p, n, m, nullptr), "");
      KT_CUDA(cudaDeviceSynchronize());
      const std::vector<float> gemm_out = dg.download<float>(size_t(m) * n);
      for (int splits : {1, 3, 0}) {
        for (int epilogue = 0; epilogue < 3; ++epilogue) {  // fp32, bf16, fp32 accumulated into y
          const bool out_bf16 = epilogue == 1, accumulate = epilogue == 2;
          if (epilogue > 0 && m != 97) continue;  // the other epilogues once per case and slicing
          QgemmArgs a = device_args(dl, dx, dy, m, splits, dws);
          a.out_bf16 = out_bf16;
          a.accumulate = accumulate;
          QgemmPlan plan;
          ASSERT_EQ(qgemm_plan(a, sms, &plan), "");
          dy.poison();
          std::vector<float> base;
          if (accumulate) {  // y starts as a random residual; the references add it
            std::uniform_real_distribution<float> bu(-2.f, 2.f);
            base.resize(size_t(m) * n);
            for (float& e : base) e = bu(rng);
            KT_CUDA(cudaMemcpy(dy.p, base.data(), base.size() * 4, cudaMemcpyHostToDevice));
          }
          KT_CUDA(qgemm_run(a, plan, nullptr));
          KT_CUDA(cudaDeviceSynchronize());
          std::vector<float> out(size_t(m) * n);
          if (out_bf16) {
            const auto raw = dy.download<uint16_t>(out.size() + 128);
            for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(raw[i]);
            for (size_t i = out.size(); i < raw.size(); ++i) ASSERT_EQ(raw[i], 0xFFFF) << "wrote past the output";
          } else {
            const auto raw = dy.download<float>(out.size() + 64);
            std::copy(raw.begin(), raw.begin() + long(out.size()), out.begin());
            for (size_t i = out.size(); i < raw.size(); ++i) ASSERT_TRUE(std::isnan(raw[i])) << "wrote past the output";
          }
          std::vector<float> want = ref, want_gemm = gemm_out;
          for (size_t i = 0; i < base.size(); ++i) want[i] += base[i], want_gemm[i] += base[i];
          const std::string what = std::string(weight_format_name(c.format)) + " group " + std::to_string(c.group) +
                                   " m " + std::to_string(m) + " splits " + std::to_string(plan.splits) +
                                   " epilogue " + std::to_string(epilogue);
          // Against the real weights: the bf16 rounding of code * scale (relative 2^-9 a value), and of the
          // output for bf16. Against the GEMM path: the same products, summed in another order.
          EXPECT_LT(test::normalized_error(out, want), 1e-2) << what;
          EXPECT_LT(test::normalized_error(out, want_gemm), out_bf16 ? 1e-2 : 1e-4) << what;
        }
      }
    }
  }
  cublasDestroy(h);
}

// Rows of X and Y with gaps between them (x_stride > k, y_stride > n): the gaps stay as they were.
TEST(Qgemm, StridedRowsLeaveTheGapsUntouched) {
  KT_SKIP_WITHOUT_GPU("quantised-weight GEMM");
  std::mt19937_64 rng(test::new_seed());
  const int n = 136, k = 512, m = 40, xs = k + 24, ys = n + 24;
  test::Weights w = test::make_weights(rng, WeightFormat::kInt4, n, k, 64);
  Dev dw(w.w.size()), ds(w.scales.size() * 4);
  dw.upload(w.w);
  ds.upload(w.scales);
  std::vector<uint16_t> xb;
  std::vector<float> xf;
  test::random_bf16(rng, size_t(m) * xs, 1.f, &xb, &xf);
  std::vector<float> packed(size_t(m) * k);
  for (int r = 0; r < m; ++r)
    for (int i = 0; i < k; ++i) packed[size_t(r) * k + i] = xf[size_t(r) * xs + i];
  std::vector<float> ref(size_t(m) * n);
  linear_ref(w.host, packed.data(), m, ref.data());
  Dev dx(xb.size() * 2), dy(size_t(m) * ys * 4);
  dx.upload(xb);
  for (int splits : {1, 2}) {
    Dev dws(qgemm_workspace_bytes({WeightFormat::kInt4, n, k, 64}, m, 2));
    QgemmArgs a = device_args({WeightFormat::kInt4, n, k, 64, dw.p, ds.as<float>()}, dx, dy, m, splits, dws);
    a.x_stride = xs;
    a.y_stride = ys;
    QgemmPlan plan;
    ASSERT_EQ(qgemm_plan(a, sm_count(), &plan), "");
    dy.poison();
    KT_CUDA(qgemm_run(a, plan, nullptr));
    KT_CUDA(cudaDeviceSynchronize());
    const auto raw = dy.download<float>(size_t(m) * ys);
    std::vector<float> out(size_t(m) * n);
    for (int r = 0; r < m; ++r)
      for (int i = 0; i < ys; ++i) {
        const float v = raw[size_t(r) * ys + i];
        if (i < n) out[size_t(r) * n + i] = v;
        else ASSERT_TRUE(std::isnan(v)) << "row " << r << " gap column " << i << " written (splits " << splits << ")";
      }
    EXPECT_LT(test::normalized_error(out, ref), 1e-2) << "splits " << splits;
  }
}

}  // namespace
}  // namespace soartune::kernels
