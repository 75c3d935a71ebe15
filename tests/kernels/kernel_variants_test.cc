// The closed kernel variant sets (core/kernel_variants.h): names, the CUDA-free shape check each GEMV variant
// answers, and the attention sets. No GPU: this is what the search and the catalogue read.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/kernel_variants.h"

namespace soartune::core {
namespace {

TEST(KernelVariants, GemvNamesAreUniqueIndexedAndListedAfterAuto) {
  const auto& names = gemv_variant_names();
  ASSERT_EQ(int(names.size()), kNumGemvVariants);
  EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(), names.size());
  std::string allowed = "auto";
  for (int i = 0; i < kNumGemvVariants; ++i) {
    EXPECT_EQ(gemv_variant_index(names[i]), i);
    EXPECT_NE(names[i], "auto");
    allowed += ", " + names[i];
  }
  EXPECT_EQ(gemv_variant_index("auto"), -1);
  EXPECT_EQ(gemv_variant_index("m9w9u9"), -1);
  EXPECT_EQ(gemv_variant_allowed(), allowed);
}

TEST(KernelVariants, EveryGemvVariantRunsTheLlamaLayersItsSharedMemoryAllows) {
  // llama3-8b's linears (qkv, o, gate|up, down, lm_head) in every weight format.
  const int shapes[][2] = {{6144, 4096}, {4096, 4096}, {28672, 4096}, {4096, 14336}, {128256, 4096}};
  for (const GemvVariant& v : kGemvVariants) {
    for (const auto& nk : shapes) {
      for (int bits : {16, 8, 4}) {
        for (int batch : {1, 8, 16, 24, 32}) {
          const GemvShape s{nk[0], nk[1], batch, bits, bits == 16 ? 0 : 128};
          const std::string err = gemv_can_implement(v, s);
          const bool fits = !v.pipelined() || gemv_pipe_smem_bytes(v, batch) <= kGemvPipeSmemLimit;
          EXPECT_EQ(err.empty(), fits) << v.name << " batch " << batch << ": " << err;
          EXPECT_EQ(gemv_can_implement(v.name, s), err);
        }
      }
    }
  }
  // The one variant whose reduction buffer for four batch tiles does not fit beside its stages says how far it goes.
  const std::string err = gemv_can_implement("m1w16s6k2", GemvShape{4096, 4096, 25, 16, 0});
  EXPECT_NE(err.find("it allows batch 1..24"), std::string::npos) << err;
  EXPECT_EQ(gemv_can_implement("m1w16s6k2", GemvShape{4096, 4096, 24, 16, 0}), "");
}

TEST(KernelVariants, GemvShapeCheckNamesTheField) {
  const GemvShape ok{64, 96, 1, 4, 32};
  EXPECT_EQ(gemv_can_implement("auto", ok), "");
  const std::string unknown = gemv_can_implement("m9w9u9", ok);
  EXPECT_EQ(unknown, "gemv_variant: m9w9u9 is not one of " + gemv_variant_allowed());
  GemvShape s = ok;
  s.batch = kGemvMaxBatch + 1;
  EXPECT_EQ(gemv_can_implement("auto", s).rfind("batch:", 0), 0u);
  s = ok;
  s.k = 80;  // int4 chunks hold 32 values
  EXPECT_EQ(gemv_can_implement("m1w8u2", s).rfind("k:", 0), 0u);
  s = ok;
  s.group = 48;
  EXPECT_EQ(gemv_can_implement("m1w8u2", s).rfind("group:", 0), 0u);
  s = ok;
  s.weight_bits = 6;
  EXPECT_EQ(gemv_can_implement("auto", s).rfind("weight_bits:", 0), 0u);
  s = ok;
  s.k = kGemvMaxK + 32;
  EXPECT_EQ(gemv_can_implement("auto", s).rfind("k:", 0), 0u);
  s = GemvShape{64, 96, 1, 16, 0};  // 16-bit weights take no group
  EXPECT_EQ(gemv_can_implement("m1w16u2", s), "");
}

TEST(KernelVariants, AttentionSetsAreClosed) {
  for (int s : kDecodeKvSplits) {
    EXPECT_TRUE(decode_kv_splits_allowed(s)) << s;
    EXPECT_TRUE(s == 0 || (s & (s - 1)) == 0) << s;  // 0 (the plan chooses) or a power of two
    EXPECT_LE(s, kDecodeMaxKvSplits);
  }
  EXPECT_FALSE(decode_kv_splits_allowed(3));
  EXPECT_FALSE(decode_kv_splits_allowed(2 * kDecodeMaxKvSplits));
  EXPECT_EQ(allowed_list(kDecodeKvSplits), "0, 1, 2, 4, 8, 16, 32, 64, 128");
  EXPECT_TRUE(prefill_attn_block_allowed(64));
  EXPECT_FALSE(prefill_attn_block_allowed(48));
  EXPECT_EQ(allowed_list(kPrefillAttnBlocks), "32, 64, 128");
}

}  // namespace
}  // namespace soartune::core
